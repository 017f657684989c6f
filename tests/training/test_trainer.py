"""The Trainer's step (training/trainer.py). Gradient accumulation, recomputation
(selective, the default, and whole blocks) and the whole step under XLA change how a step
is computed, never what it computes: each variant
trains three steps on one batch from the same weights and must end where the plain step
(nothing recomputed) ends (weights and metrics), up to float rounding. One device here;
accumulation under MirroredStrategy is in test_distribute.py."""

import re

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_config
from electra_tf import errors
from electra_tf.model import remat
from electra_tf.training import distribute
from electra_tf.training import loop
from electra_tf.training import step_settings
from electra_tf.training import trainer as trainer_lib
from tests import helpers

VOCAB, SEQ, P, BATCH, STEPS = 40, 32, 5, 8, 3


def _config(**train):
    config = electra_config.get_config("tiny")
    config.data.max_seq_length = SEQ
    config.train.batch_size = BATCH
    config.train.warmup_steps = 1  # the first update already moves the weights
    config.train.mixed_precision = "float32"
    config.runtime.strategy = "one_device"
    config.train.xla_scope = "forward_backward"  # auto's choice on CPU (whole_step on a GPU)
    config.train.update(train)
    return config


def _batch():
    """One batch of the pipeline's structure: padded rows, some prediction slots empty."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, VOCAB, (BATCH, SEQ)).astype(np.int32)
    mask = np.zeros_like(ids)
    positions = np.zeros((BATCH, P), np.int32)
    weights = np.zeros((BATCH, P), np.float32)
    for row in range(BATCH):
        length = SEQ - 3 * row
        mask[row, :length] = 1
        n = P - row % 2
        positions[row, :n] = np.sort(rng.choice(np.arange(1, length), n, replace=False))
        weights[row, :n] = 1.0
    masked = ids.copy()
    np.put_along_axis(masked, positions, 4, 1)
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": np.zeros_like(ids),
            "masked_input_ids": masked * mask, "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, 1),
            "masked_lm_weights": weights}


def _trainer(**train):
    """(trainer with the seed's weights, an iterator repeating `_batch()`)."""
    config = _config(**train)
    strategy = distribute.get_strategy(config.runtime)
    trainer = trainer_lib.Trainer(config, strategy, VOCAB, P)
    data = tf.data.Dataset.from_tensors(
        {k: tf.constant(v) for k, v in _batch().items()}).repeat()
    return trainer, iter(strategy.experimental_distribute_dataset(data))


def _train(**train):
    """(trainer, metrics, weights) after STEPS steps on `_batch()` from the seed's weights."""
    trainer, iterator = _trainer(**train)
    trainer.train_loop(iterator, tf.constant(STEPS))
    return (trainer, trainer.train_metrics.result(),
            [v.numpy() for v in trainer.model.trainable_variables])


@pytest.fixture(scope="module")
def plain():
    return _train(remat="none")


def _assert_same(run, plain, atol=1e-6):
    trainer, metrics, weights = run
    _, plain_metrics, plain_weights = plain
    assert int(trainer.step.numpy()) == STEPS
    assert set(metrics) == set(plain_metrics)
    for name, value in plain_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, err_msg=name)
    for variable, mine, theirs in zip(trainer.model.trainable_variables, weights,
                                      plain_weights):
        np.testing.assert_allclose(mine, theirs, atol=atol, err_msg=variable.path)


def test_the_plain_step_moves_the_weights(plain):
    trainer, metrics, weights = plain
    assert trainer.xla_scope == "forward_backward" and trainer.accumulation_steps == 1
    assert trainer.remat == "none"
    assert metrics["grad_norm"] > 0 and np.isfinite(metrics["loss"])
    fresh = trainer_lib.Trainer(_config(), trainer.strategy, VOCAB, P)  # the seed's weights
    moved = max(float(np.abs(w - v.numpy()).max())
                for w, v in zip(weights, fresh.model.trainable_variables))
    assert moved > 1e-3  # well above the tolerance the variants are held to


def test_the_vocabulary_padded_for_a_gpu_trains_the_cpus_unpadded_weights(plain):
    """`vocabulary_padding=auto` leaves a CPU's projection unpadded; padded to tiles, as
    on a GPU or TPU, the same steps end at the same weights and metrics."""
    trainer = plain[0]
    assert trainer.vocabulary_multiple == 1 and "CPU" in trainer.vocabulary_padding_reason
    run = _train(remat="none", vocabulary_padding="tiles")
    assert run[0].vocabulary_multiple == 128
    _assert_same(run, plain)
    # The choice reaches the compiled step through the trainer's own context: the
    # table padded (its Pad op) in the padded run's program only.
    table_pad = re.compile(r'op_name="[^"]*generator_predictions[^"]*/Pad"')
    assert not table_pad.search(_optimized_hlo(trainer, stage="trainer_context"))
    assert table_pad.search(_optimized_hlo(run[0], stage="trainer_context"))


def test_accumulation_ends_where_the_whole_batch_step_ends(plain):
    run = _train(accumulation_steps=4)  # 4 micro-batches of 2 rows
    assert run[0].accumulation_steps == 4
    _assert_same(run, plain)


def test_a_step_builds_its_context_once_and_its_micro_batches_derive_theirs(monkeypatch):
    from electra_tf.model import context  # pylint: disable=g-import-not-at-top
    built, derived = [], []
    for_step, for_block = context.StepContext.for_step, context.StepContext.for_block
    monkeypatch.setattr(context.StepContext, "for_step", classmethod(
        lambda cls, *args, **kwargs: built.append(1) or for_step(*args, **kwargs)))
    monkeypatch.setattr(context.StepContext, "for_block", lambda self, *args: derived.append(
        args[0]) or for_block(self, *args))
    trainer, iterator = _trainer(accumulation_steps=2)
    trainer.train_loop.get_concrete_function(iterator, tf.constant(1))
    assert len(built) == 1 and len(derived) == 1  # the micro-batch loop: traced once


@pytest.fixture(scope="module")
def whole_step():
    """(`_train` with the whole step under XLA at 2 steps a loop, {id(handle): whether
    it was made under the strategy's scope} of every variable the trainer made)."""
    in_scope = {}

    def record(next_creator, **kwargs):
        variable = next_creator(**kwargs)
        in_scope[id(variable.handle)] = tf.distribute.has_strategy()
        return variable
    with tf.variable_creator_scope(record):
        run = _train(xla_scope="whole_step", steps_per_loop=2)
    return run, in_scope


def test_the_whole_step_under_xla_computes_the_same_step(plain, whole_step):
    """The optimizer and metrics inside XLA too (as on TPUs and one GPU): the same
    updates, and the same sampling noise (integer draws, which TF's kernels and XLA
    agree on). The loop is inside XLA as well (a `while` in the compiled program,
    `steps_per_loop` steps a launch): 3 steps at 2 a loop, a program of 2 and one of 1
    (its second batch the first again, which no step reads), end where the plain
    steps, run one by one, end."""
    run, _ = whole_step
    assert run[0].xla_scope == "whole_step"
    _assert_same(run, plain)


def _reachable(library, name):
    """Function `name` and every function it calls, by name."""
    found, pending = {name}, [name]
    while pending:
        for node in library[pending.pop()].node_def:
            for attr in node.attr.values():
                if attr.HasField("func") and attr.func.name not in found:
                    found.add(attr.func.name)
                    pending.append(attr.func.name)
    return found


def _ops(library, names):
    return {node.op for name in names for node in library[name].node_def}


def test_the_loop_inside_xla_is_one_launch_of_a_while_over_the_steps(whole_step):
    """What a TPU needs of the loop, checked on the traced graph: the host's loop
    launches one compiled program a turn (one call site, in the body of its `while`),
    and that program is one `while` whose body holds the step (its matrix multiplies
    and variable updates; none outside). The program reaches only variables made
    under the strategy's scope (a TPU program can reach no other): the host state
    (stop flag, non-finite record, float16's skipped steps) stays with the host."""
    ((trainer, _, _), in_scope) = whole_step
    (traced,) = trainer.train_loop._list_all_concrete_functions()  # pylint: disable=protected-access
    graph = traced.graph.as_graph_def()
    library = {f.signature.name: f for f in graph.library.function}
    (program,) = [name for name, f in library.items() if f.attr["_XlaMustCompile"].b]
    calls = [(name, node.op) for name, f in library.items() for node in f.node_def
             if any(a.func.name == program for a in node.attr.values())]
    (host_loop,) = [node for node in graph.node if node.op == "While"]
    assert calls == [(host_loop.attr["body"].func.name, "StatefulPartitionedCall")], calls
    (loop,) = [node for node in library[program].node_def
               if node.op in ("While", "StatelessWhile")]
    step = _ops(library, _reachable(library, loop.attr["body"].func.name))
    matmuls = {"MatMul", "BatchMatMulV2", "Einsum"}
    assert step & matmuls and "AssignVariableOp" in step, sorted(step)
    host = {node.op for node in graph.node} | _ops(
        library, set(library) - _reachable(library, program))
    assert not host & matmuls, sorted(host)

    compiled = traced.graph._functions[program].graph  # pylint: disable=protected-access
    captured = [outside for outside, _ in compiled.captures if outside.dtype == tf.resource]
    assert len(captured) > len(trainer.model.trainable_variables)  # + slots and metrics
    assert all(in_scope.get(id(handle)) for handle in captured)
    host_state = (trainer.stop_requested, trainer.nonfinite, trainer.skipped_steps)
    assert all(not in_scope[id(v.handle)] for v in host_state)


def _optimized_hlo(trainer, stage="optimized_hlo"):
    """The compiled forward/backward pass of `trainer`, as XLA optimised it (`stage`:
    "hlo", before XLA's optimisation)."""
    from electra_tf.model import context  # pylint: disable=g-import-not-at-top
    batch = {k: tf.constant(v) for k, v in _batch().items()}
    counts = (tf.constant(1.0), tf.constant(1.0))
    step = tf.constant(0, tf.int64)
    step_context = context.StepContext.for_step(
        0, step, training=True, uniform=tf.zeros([BATCH, P]), block=tf.constant(0),
        temperature=trainer.temperature(step), stage=trainer.stage, remat=trainer.remat,
        vocabulary_multiple=trainer.vocabulary_multiple)
    if stage == "trainer_context":  # the context the trainer's step builds, traced
        step_context, stage = trainer.step_context(step, trainer.stage), "hlo"
    return trainer._forward_backward.experimental_get_compiler_ir(  # pylint: disable=protected-access
        batch, counts, step_context)(stage=stage)


def _count(op, hlo):
    return len(re.findall(rf"\b{op}\(", hlo))


def test_selective_recomputation_computes_the_same_step_and_really_recomputes(plain,
                                                                               monkeypatch):
    handed = []  # the projections applied in the attentions' recomputed cores
    pass_through = remat.OutputProjection.pass_through
    monkeypatch.setattr(remat.OutputProjection, "pass_through",
                        lambda self, projected: handed.append(id(self))
                        or pass_through(self, projected))
    run = _train()  # the default
    assert run[0].remat == "selective"
    _assert_same(run, plain)
    projections = [layer for layer in run[0].model._flatten_layers()
                   if isinstance(layer, remat.OutputProjection)]
    assert projections and all(p._projected is None for p in projections)  # none pending
    assert set(handed) == {id(p) for p in projections}  # each projected in its core
    # What survives XLA's optimisation: the backward pass computes each block's gelu
    # again (one more erf per block: 6 → 10 for the tiny model), its softmax (two more
    # exponentials per block, 26 → 34) and its attention scores and ·V (two more dots
    # per block of both encoders, 110 → 118: the ·V feeds the output projection's
    # kernel gradient; the recomputed projection itself is unused, and dropped).
    shape = run[0].model.shape
    blocks = shape.discriminator.num_layers + shape.generator.num_layers
    plain_hlo, hlo = _optimized_hlo(plain[0]), _optimized_hlo(run[0])
    assert _count("erf", hlo) == _count("erf", plain_hlo) + blocks, (
        _count("erf", plain_hlo), _count("erf", hlo))
    assert _count("exponential", hlo) >= _count("exponential", plain_hlo) + 2 * blocks, (
        _count("exponential", plain_hlo), _count("exponential", hlo))
    assert _count("dot", hlo) == _count("dot", plain_hlo) + 2 * blocks, (
        _count("dot", plain_hlo), _count("dot", hlo))


@pytest.mark.slow  # 70 s; that the recomputed blocks compile whole is a fast test
def test_recomputed_blocks_compute_the_same_step_and_really_recompute(plain):
    run = _train(remat="blocks", accumulation_steps=2)
    _assert_same(run, plain)
    # Recomputation survives XLA's optimisation: the compiled backward pass holds the
    # blocks' forward matmuls a second time.
    plain_dots, remat_dots = _count("dot", _optimized_hlo(plain[0])), _count(
        "dot", _optimized_hlo(run[0]))
    assert remat_dots > plain_dots, (plain_dots, remat_dots)


def test_remat_auto_chooses_by_the_device_and_its_memory(plain, monkeypatch):
    """`auto` on fake devices: a CPU recomputes selectively (today's default, the log
    line says why); a GPU or TPU whose memory holds the estimated activations
    recomputes nothing; one too small for them recomputes selectively."""
    model = plain[0].model
    assert plain[0].remat == "none" and plain[0].remat_reason == "as configured"

    def mode(kind, memory_bytes, batch=BATCH):
        monkeypatch.setattr(distribute, "device_kind", lambda strategy: kind)
        monkeypatch.setattr(distribute, "device_memory", lambda strategy: memory_bytes)
        return step_settings.remat_mode("auto", None, model, batch, SEQ, P, "mixed_bfloat16")

    chosen, reason = mode("cpu", None)
    assert chosen == "selective" and reason.startswith("auto on a CPU: selective"), reason
    assert mode("gpu", 80 * 2**30)[0] == "none"
    assert mode("tpu", distribute.TPU_MEMORY_BYTES)[0] == "none"
    assert mode("gpu", None)[0] == "selective"  # memory unknown
    # The tiny model keeps ~1.9 MiB at 8 rows (~0.2 MiB at 1) beside 2.6 MiB of
    # weights and Adam's state.
    chosen, reason = mode("gpu", 4 * 2**20)
    assert chosen == "selective" and "do not fit" in reason, reason
    chosen, reason = mode("gpu", 4 * 2**20, batch=1)
    assert chosen == "none" and " fit in 60% of the GPU's" in reason, reason
    with pytest.raises(errors.UserError, match=r"^config.train.remat='all': choose one of"):
        step_settings.remat_mode("all", None, model, BATCH, SEQ, P, "float32")  # unvalidated
    # Under accumulation a step keeps one micro-batch's activations: auto counts those.
    rows = []
    monkeypatch.setattr(step_settings, "remat_mode",
                        lambda *args: rows.append(args[3]) or ("none", "as configured"))
    _trainer(accumulation_steps=4)
    assert rows == [BATCH // 4]


def test_bad_values_are_one_line_errors_naming_the_key():
    """A value wrong on any device: `loop.validate`'s error (the loop calls it before the
    Trainer); one that this strategy cannot run: the Trainer's."""
    strategy = distribute.get_strategy(_config().runtime)
    with pytest.raises(errors.UserError) as raised:
        trainer_lib.Trainer(_config(accumulation_steps=3), strategy, VOCAB, P)
    assert str(raised.value) == (
        "config.train.accumulation_steps=3 does not divide the 8 rows each replica gets "
        "of config.train.batch_size=8: choose a divisor")
    for train, message in (
            ({"accumulation_steps": 0}, "config.train.accumulation_steps=0: must be a whole "
             "number >= 1"),
            ({"accumulation_steps": True}, "config.train.accumulation_steps=True: must be a "
             "whole number >= 1"),
            ({"remat": "all"}, "config.train.remat='all': choose one of auto, none, "
             "selective, blocks"),
            ({"xla_scope": "everything"}, "config.train.xla_scope='everything': choose one "
             "of auto, whole_step, forward_backward")):
        with pytest.raises(errors.UserError) as raised:
            loop.validate(_config(**train))
        assert str(raised.value) == message
    assert step_settings.xla_scope(_config(jit_compile=False).train, strategy) == "none"
    # A TPU compiles every step; forward_backward launches them one at a time there (the
    # fallback if its XLA refused the steps' loop), anything else loops inside XLA.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distribute, "is_tpu", lambda strategy: True)
        assert [step_settings.xla_scope(_config(xla_scope=s, jit_compile=j).train, None)
                for s, j in (("auto", True), ("whole_step", False),
                             ("forward_backward", True), ("forward_backward", False))] == [
            "whole_step", "whole_step", "forward_backward", "forward_backward"]
    with pytest.raises(errors.UserError, match="xla_scope='whole_step' needs "
                       "config.train.jit_compile=true"):
        step_settings.xla_scope(_config(jit_compile=False, xla_scope="whole_step").train, strategy)
    with pytest.raises(errors.UserError, match=r"^config.train.xla_scope='everything': "):
        step_settings.xla_scope(_config(xla_scope="everything").train, strategy)  # unvalidated


def test_the_step_seeds_each_pass_as_the_model_does(plain):
    """The training step's dropout is the model's own seeding with (seed, step): the
    generator's pass salted, so layers both passes share (the embeddings) drop other
    elements in each. Shown against the two passes seeded alike, which differs."""
    from electra_tf.model import context  # pylint: disable=g-import-not-at-top
    from electra_tf.model import losses  # pylint: disable=g-import-not-at-top
    trainer = plain[0]
    batch = {k: tf.constant(v) for k, v in _batch().items()}
    step = 5
    loss, _ = trainer.loss_and_gradients(
        trainer.strategy.experimental_distribute_values_from_function(lambda _: batch), step)
    uniform = trainer._uniform(trainer.config.train.seed, step)  # pylint: disable=protected-access
    seed = tf.constant([trainer.config.train.seed, step], tf.int64)
    disc_weight = trainer.config.model.disc_weight

    @tf.function(jit_compile=True)  # as the step computes it: XLA's rounding, not TF's
    def seeded_by_model():
        outputs = helpers.forward(trainer.model, batch, uniform=uniform, seed=seed,
                                  training=True)
        return losses.pretraining_loss(outputs, batch, disc_weight)[0]

    @tf.function(jit_compile=True)
    def seeded_alike():  # both passes in the step's context, no salt folded in
        outputs = helpers.forward(trainer.model, batch, uniform=uniform, seed=seed,
                                  training=True)
        return losses.pretraining_loss(outputs, batch, disc_weight)[0]
    model = float(seeded_by_model())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(context.StepContext, "salted", lambda self, salt: self)
        alike = float(seeded_alike())
    np.testing.assert_allclose(float(loss), model, rtol=1e-6, err_msg=f"alike {alike}")
    # 4e-5 of the loss as measured, against ~1e-7 of rounding between XLA programs.
    assert abs(alike - model) > 1e-5 * abs(model), (alike, model)


def test_gradients_add_dense_sliced_and_absent():
    """A micro-batch's gradient is added whether it is dense, IndexedSlices (an
    embedding's rows, repeated rows summed) or None (a variable the pass did not use)."""
    total = tf.ones([4, 2])
    sliced = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([1, 1]),
                              tf.constant([4, 2]))
    np.testing.assert_array_equal(trainer_lib._add_gradient(total, sliced).numpy(),
                                  [[1, 1], [5, 7], [1, 1], [1, 1]])
    np.testing.assert_array_equal(trainer_lib._add_gradient(total, 2 * total).numpy(),
                                  3 * np.ones([4, 2]))
    assert trainer_lib._add_gradient(total, None) is total


def test_the_steps_ops_keep_short_stacks(plain):
    """The training loop traces its step under `tracebacks.short_tracebacks()`: the
    compiled pass's ops keep ours and TF's graph-building frames, not Keras's (each kept
    frame stays in memory after XLA's compilation)."""
    trainer = plain[0]
    (pass_fn,) = trainer._forward_backward._list_all_concrete_functions()
    # The feed-forward's matmuls are made inside Keras' Dense (its backend's tensordot).
    ops = [op for op in pass_fn.graph.get_operations()
           if op.type in ("MatMul", "BatchMatMulV2") and "feedforward" in op.name]
    assert ops
    for op in ops:
        files = [frame.filename for frame in op.traceback]
        assert any("/electra_tf/" in f for f in files), files
        assert not any("/keras/" in f or "/keras_hub/" in f for f in files), files


def test_tracing_converts_nothing_with_autograph(monkeypatch):
    """Nothing the loops, the step and evaluation call is converted by autograph
    (`autograph=False`; the loops are `tf.while_loop`s). Autograph enters a stack filter
    for each call of a function it converts, which copies `short_tracebacks()`' file set
    for the life of the ops made in the call (Small's 4 micro-batches held 0.2 GiB of
    those copies: BENCHMARKS.md, "Memory"), and converting a step's functions took ~5 s
    of each process (WORKSPACE.md). Tracing with micro-batches, a launch a step or the
    loop inside XLA, enters no filter of autograph's (`CurrentModuleFilter`), only
    `short_tracebacks()`' own."""
    tf_stack = pytest.importorskip("tensorflow.python.util.tf_stack")
    if not hasattr(tf_stack, "StackTraceFilter"):
        pytest.skip("this TF has no stack filters (short_tracebacks does nothing)")
    entered = []
    update = tf_stack.StackTraceFilter.update
    monkeypatch.setattr(tf_stack.StackTraceFilter, "update",
                        lambda self: entered.append(type(self).__name__) or update(self))
    for train in ({"accumulation_steps": 4},
                  {"accumulation_steps": 4, "xla_scope": "whole_step"}):
        trainer, iterator = _trainer(**train)
        entered.clear()
        trainer.train_loop.get_concrete_function(iterator, tf.constant(1))
        trainer.eval_batch.get_concrete_function(next(iterator), tf.constant(0, tf.int64))
        # The loop's and evaluation's (a function that traced twice would enter it again).
        assert entered == ["FilesFilter"] * 2, (train, entered)
