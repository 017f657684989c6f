"""The pre-training loop: `train_and_evaluate(config, workdir)`.

One replica step (`_replica_step`), read top to bottom:

    global counts (all-reduce) ─► for each micro-batch (1 unless accumulation_steps):
        [XLA] forward: generator ─► sample ─► discriminator ─► losses scaled to this
        rows' share of the global mean ─► gradients (summed) ─► metrics
    ─► all-reduce (sum) ─► optimizer: clip to global norm, weight decay, AdamW

(That is the `electra` objective under the `joint` algorithm: the forward pass, the loss
and the metrics are the objective's, `model/objectives/`; which variables a step trains by
which loss is the algorithm's stage's, `training/algorithms.py`.)

`steps_per_loop` such steps run inside one `tf.function` (one host round-trip per loop,
which is what TPUs need). The loop ends early, at a step boundary, when SIGTERM has set
`stop_requested` or a step's losses or gradient norm were not finite (`nonfinite`).

Every random draw of step t is a function of (seed, t), so a resumed run repeats an
uninterrupted one: the sampling noise is made of stateless integer draws `[global_batch,
P]` seeded by (seed, t), of which each replica (and micro-batch) takes its rows, and the
dropout masks are stateless hashes of (seed, t, layer, global element index)
(`model/dropout.py`); both are therefore also the same whatever the number of replicas
or micro-batches. The masks of the data are
functions of (seed, batch index) (`data/pipeline.py`).
"""

import contextlib
import functools
import json
import os
import time

import keras
import ml_collections
import tensorflow as tf
from absl import logging

from electra_tf import config_check
from electra_tf import errors
from electra_tf import model_config
from electra_tf import progress
from electra_tf import workdir as workdir_lib
from electra_tf.data import masking as masking_lib
from electra_tf.data import order
from electra_tf.data import pipeline
from electra_tf.data import writer
from electra_tf.model import objectives
from electra_tf.model import remat
from electra_tf.text import tokenizer
from electra_tf.training import algorithms
from electra_tf.training import distribute
from electra_tf.training import memory
from electra_tf.training import metrics as metrics_lib
from electra_tf.training import optimizer as optimizer_lib
from electra_tf.training import predictions
from electra_tf.training import preemption
from electra_tf.training import summaries
from electra_tf.training import tracebacks

SUM = tf.distribute.ReduceOp.SUM


class Trainer:
    """The model, optimizer, metrics and compiled steps of one run, under one strategy."""

    def __init__(self, config, strategy, vocab_size: int, num_predictions: int):
        self.config = config
        self.strategy = strategy
        self.num_predictions = num_predictions
        self.global_batch = config.train.batch_size
        self.local_batch = distribute.local_batch_size(strategy, self.global_batch)
        self.accumulation_steps = micro_batches(config.train, self.local_batch)
        self.remat = config.train.get("remat", "selective")
        if self.remat not in remat.MODES:
            raise errors.UserError(f"config.train.remat={self.remat!r}: choose one of "
                                   f"{', '.join(remat.MODES)}")
        self.policy = distribute.dtype_policy(config.train.mixed_precision, strategy)
        seq_length = config.data.max_seq_length
        with strategy.scope():
            keras.utils.set_random_seed(config.train.seed)
            self.model = model_config.pretrainer(config, vocab_size, dtype=self.policy)
            self.model.build_for(seq_length, num_predictions)
            self.optimizer = optimizer_lib.create_optimizer(config.train, self.model,
                                                            self.policy)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            objective = model_config.objective_name(config)
            # Which variables each step trains, by which loss (checked: errors name keys).
            self.algorithm = algorithms.get(config)
            self.algorithm.build(config.train, self.model, self.policy)
            self.train_metrics = metrics_lib.PretrainingMetrics(config.model.disc_weight,
                                                                objective)
            self.eval_metrics = metrics_lib.PretrainingMetrics(config.model.disc_weight,
                                                               objective)
        # The loss, its metrics and what is checked finite (model/objectives/).
        self.objective = self.train_metrics.objective
        # Host state that the compiled loop reads or writes once per step.
        self.stop_requested = tf.Variable(False, trainable=False, name="stop_requested")
        # (step, which): the first step whose losses (bit 2^i: the objective's
        # `loss_names[i]`; electra: mlm_loss 1, rtd_loss 2) or gradient norm (the next
        # bit) was not finite; step -1 while none was.
        self.nonfinite = tf.Variable([-1, 0], dtype=tf.int64, trainable=False,
                                     name="nonfinite")
        # float16: steps the loss-scale optimizer skipped (overflowing gradients).
        self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name="skipped_steps")
        self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        self.xla_scope = xla_scope(config.train, strategy)
        # XLA: the forward/backward pass (with jit_compile), or the whole replica step
        # (see `xla_scope`). Inside a compiled whole step the pass is a plain call: a
        # jit_compile function nested in another makes TF 2.21 pass every variable it
        # reads as a compile-time constant, so the step would compile again at every
        # step (`kind=constant-resource` in `TF_CPP_VMODULE=device_compiler=3`).
        self._forward_backward = (
            self._forward_backward_fn if self.xla_scope == "whole_step"
            else tf.function(self._forward_backward_fn, jit_compile=config.train.jit_compile))
        self._forward = tf.function(self._forward_fn, jit_compile=config.train.jit_compile)
        # We compile the whole step ourselves (TPUStrategy compiles it by itself).
        self._jit_whole_step = self.xla_scope == "whole_step" and not distribute.is_tpu(strategy)
        self._step = (tf.function(self._replica_step, jit_compile=True)
                      if self._jit_whole_step else self._replica_step)
        self.stage = self.algorithm.stage(0)  # host state: `start_loop` sets it
        self._train_loops = {}  # one compiled loop per stage of the algorithm
        self._compiled_stages = set()  # stages whose loop has run (run_loop)
        self.eval_batch = tf.function(self._eval_batch_fn)
        self.predict = predictions.predict_fn(self.model)  # the predictions view's

    # ------------------------------------------------------------------ helpers
    def _uniform(self, seed, index):
        """This replica's rows of the `[global_batch, P]` sampling noise for `index`.

        Made from integer draws: TF's kernel and XLA give the same stateless integers but
        not the same floats (they map bits to floats differently), and the noise must not
        depend on which of them runs the step (the whole step compiled or not, one device
        or several). The top 24 bits, times 2^-24: exact float32s in [0, 1)."""
        bits = tf.random.stateless_uniform(
            [self.global_batch, self.num_predictions],
            seed=tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)]),
            minval=None, maxval=None, dtype=tf.uint32)
        noise = tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)),
                        tf.float32) * 2.0**-24
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.slice(noise, [replica * self.local_batch, 0],
                        [self.local_batch, self.num_predictions])

    def _global_counts(self, batch):
        """Masked positions and real tokens in the GLOBAL batch: the loss normalizers."""
        counts = tf.stack([tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)),
                           tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))])
        counts = tf.distribute.get_replica_context().all_reduce(SUM, counts)
        return counts[0], counts[1]

    def _outputs_and_loss(self, batch, uniform, counts, training, dropout_seed=None,
                          block=0):
        outputs = self.model(batch, uniform=uniform, dropout_seed=dropout_seed,
                             replica=block, training=training)
        loss, values = self.objective.loss(outputs, batch, *counts)
        # Keep only what the metrics read: never return [B, P, V] logits from XLA.
        return loss, self.objective.compact(outputs), values

    def _forward_backward_fn(self, batch, uniform, counts, dropout_seed, block, stage):
        """`block`: which `len(batch)`-row block of the global batch this is, for the
        dropout masks (the replica; with accumulation, replica · N + micro-batch).
        `stage`: the algorithm's (`training/algorithms.py`), whose variables and loss
        this pass differentiates."""
        variables = self.algorithm.variables(self.model, stage)
        # The model seeds each pass's masks from dropout_seed (the generator's salted);
        # what remat recomputes redraws the masks of its forward call.
        with remat.recomputing(self.remat):
            with tf.GradientTape() as tape:
                loss, outputs, values = self._outputs_and_loss(
                    batch, uniform, counts, True, dropout_seed, block)
                loss = self.algorithm.loss(self.objective, loss, values, stage)
                scaled = self.stage_optimizer(stage).scale_loss(loss)  # float16 scaling
            return tape.gradient(scaled, variables), outputs, values

    def _forward_fn(self, batch, uniform, counts):
        return self._outputs_and_loss(batch, uniform, counts, False)[1:]

    # ------------------------------------------------------------------ steps
    def _summed_gradients(self, batch, step, stage, metrics=None):
        """(gradients summed over replicas, loss values) of this replica's rows; each
        micro-batch's outputs go to `metrics` (a `PretrainingMetrics`) if given.

        With `accumulation_steps` N > 1 the rows are N micro-batches, run one after the
        other, their gradients summed. Every micro-batch's loss is normalised by the
        counts of the whole global batch and draws the sampling noise and the dropout
        masks of its own rows of it, so the sum is the gradient of one step on the whole
        batch (up to float rounding), and the metrics are the same."""
        variables = self.algorithm.variables(self.model, stage)
        counts = self._global_counts(batch)
        uniform = self._uniform(self.config.train.seed, step)
        dropout_seed = tf.stack([tf.constant(self.config.train.seed, tf.int64),
                                 tf.cast(step, tf.int64)])
        replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group,
                          tf.int32)
        n = self.accumulation_steps
        if n == 1:
            grads, outputs, values = self._forward_backward(batch, uniform, counts,
                                                            dropout_seed, replica, stage)
            # Dense, as the accumulated sum is: the norm (clipping, grad_norm) of an
            # IndexedSlices gradient would count its repeated rows one by one.
            grads = [tf.zeros(v.shape, v.dtype) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(grads, variables)]
            if metrics is not None:
                metrics.update(batch, outputs, values)
        else:
            def split(t):  # [n · size, ...] → [n, size, ...]: static micro-batch shapes
                return tf.reshape(t, [n, self.local_batch // n] + t.shape[1:].as_list())
            batches, uniforms = {k: split(t) for k, t in batch.items()}, split(uniform)
            grads = [tf.zeros(v.shape, v.dtype) for v in variables]
            values = {k: tf.constant(0.0) for k in self.objective.loss_names}
            for micro in tf.range(n):
                micro_batch = {k: t[micro] for k, t in batches.items()}
                micro_grads, outputs, micro_values = self._forward_backward(
                    micro_batch, uniforms[micro], counts, dropout_seed, replica * n + micro,
                    stage)
                grads = [_add_gradient(g, m) for g, m in zip(grads, micro_grads)]
                values = {k: values[k] + micro_values[k] for k in values}
                if metrics is not None:
                    metrics.update(micro_batch, outputs, micro_values)
        # Sum over replicas here (not in Keras) so that clipping sees the global gradient.
        return tf.distribute.get_replica_context().all_reduce(SUM, grads), values

    def _replica_step(self, batch, step, stage=None):
        stage = stage or self.stage
        grads, values = self._summed_gradients(batch, step, stage, self.train_metrics)
        grad_norm = tf.linalg.global_norm(grads)
        optimizer = self.stage_optimizer(stage)
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            grad_norm /= tf.cast(optimizer.dynamic_scale, grad_norm.dtype)
        optimizer.apply_gradients(zip(grads, self.algorithm.variables(self.model, stage)))
        self.train_metrics.update_grad_norm(grad_norm)
        # Replicas whose losses (electra: mlm_loss, rtd_loss) or gradient norm are not
        # finite: the same counts on every replica (and worker), so all of them stop at
        # the same step.
        finite = tf.math.is_finite(tf.stack([values[k] for k in self.objective.loss_names]
                                            + [tf.cast(grad_norm, tf.float32)]))
        return tf.distribute.get_replica_context().all_reduce(
            SUM, tf.cast(tf.logical_not(finite), tf.float32))

    def stage_optimizer(self, stage=None):
        """The optimizer of `stage` (default: the current one): the run's `optimizer`,
        or the algorithm's own (two_stage's discriminator stage)."""
        return self.algorithm.optimizer(stage or self.stage, self.optimizer)

    @property
    def train_loop(self):
        """The compiled loop of the current stage, `(iterator, num_steps)`: one
        `tf.function` per stage, so a stage's trace never runs another's step."""
        if self.stage not in self._train_loops:
            self._train_loops[self.stage] = tf.function(self._train_loop_fn)
        return self._train_loops[self.stage]

    def run_loop(self, iterator, num_steps: int) -> None:
        """`num_steps` steps through `train_loop`. The first call of each stage compiles:
        its first step runs alone under `memory.trimming()`, so that the memory XLA's
        compilation freed (~0.4 GiB for Small) goes back to the OS before that step's
        working set comes on top of it (BENCHMARKS.md, "Memory"). The steps, their order
        and their results are the same as in one call."""
        if self.stage not in self._compiled_stages and num_steps > 0:
            self._compiled_stages.add(self.stage)
            with memory.trimming():
                self.train_loop(iterator, tf.constant(1))
            num_steps -= 1
            if not num_steps:
                return
        self.train_loop(iterator, tf.constant(num_steps))

    def start_loop(self, step: int) -> None:
        """On the host, before a loop that starts at `step`: the algorithm's stage there
        (and, at two_stage's switch, the discriminator's initialisation)."""
        self.algorithm.begin(self.model, step)
        self.stage = self.algorithm.stage(step)

    def _train_loop_fn(self, iterator, num_steps):
        """`num_steps` steps of the current stage (traced by that stage's loop only)."""
        step_fn = functools.partial(self._step, stage=self.stage)
        with tracebacks.short_tracebacks():  # 0.2 GiB less held after XLA's compilation
            # The stop test in the loop's condition, not a `break` in its body: a break
            # puts the step in a branch function inside the body, one more graph that
            # holds a copy of every function the step calls (the compiled pass's, ~30 MB
            # for Small) for the life of the process.
            done = tf.zeros_like(num_steps)
            while tf.logical_and(done < num_steps, tf.logical_not(tf.logical_or(
                    self.stop_requested.read_value(), self.nonfinite[0] >= 0))):
                bad = self.strategy.run(step_fn, args=(next(iterator), self.step.value()))
                self.step.assign_add(1)
                self._record_nonfinite(
                    self.strategy.experimental_local_results(bad)[0] > 0)
                done += 1

    def _record_nonfinite(self, bad):
        """bad: [losses + 1] bool, each loss (`loss_names`) and the gradient norm not
        finite at this step."""
        if self.loss_scaling:
            # float16: the optimizer has skipped the update (and lowered the loss scale).
            self.skipped_steps.assign_add(tf.cast(bad[-1], tf.int64))
            bad = tf.concat([bad[:-1], [False]], 0)
        bits = tf.constant([2**i for i in range(len(self._checked_names))], tf.int64)
        which = tf.reduce_sum(tf.cast(bad, tf.int64) * bits)
        first = tf.logical_and(which > 0, self.nonfinite[0] < 0)
        self.nonfinite.assign(tf.where(first, tf.stack([self.step.value(), which]),
                                       self.nonfinite.value()))

    def nonfinite_step(self) -> tuple[int, list[str]] | None:
        """(step, names of the non-finite quantities) of the first bad step, or None."""
        step, which = (int(v) for v in self.nonfinite.numpy())
        if step < 0:
            return None
        return step, [name for i, name in enumerate(self._checked_names) if which & 2**i]

    @property
    def _checked_names(self):
        return (*self.objective.loss_names, "gradient norm")

    def _eval_batch_fn(self, batch, index):
        def replica_fn(batch, index):
            counts = self._global_counts(batch)
            # A fixed noise stream per evaluation batch: evaluations are comparable.
            uniform = self._uniform(self.config.train.seed + 1, index)
            outputs, values = self._forward(batch, uniform, counts)
            self.eval_metrics.update(batch, outputs, values)
        with tracebacks.short_tracebacks():
            self.strategy.run(replica_fn, args=(batch, index))

    def evaluate(self, dataset, num_batches: int) -> dict[str, float]:
        self.eval_metrics.reset()
        seen = 0
        # A line every 30 s: an evaluation of a large model can take minutes.
        bar = progress.Progress(num_batches, "eval batches", every_secs=30,
                                first_line_now=False)
        for index, batch in enumerate(dataset):
            if index >= num_batches:
                break
            self.eval_batch(batch, tf.constant(index, tf.int64))
            seen += 1
            bar.update(seen)
        if not seen:
            raise errors.UserError("config.data.eval_files: fewer examples than one "
                                   f"global batch ({self.global_batch})")
        return self.eval_metrics.result()

    def loss_and_gradients(self, dist_batch, step):
        """(loss, gradients) of one distributed global batch at `step`, by the training
        step's path (global counts, noise rows, forward/backward, all-reduce) without the
        update: the loss summed over replicas (the global mean) and the all-reduced
        gradients, dense, in the order of the step's variables (joint:
        `model.trainable_variables`). For comparing strategies."""
        stage = self.algorithm.stage(step)

        def replica_fn(batch, step):
            grads, values = self._summed_gradients(batch, step, stage)
            loss = self.objective.total(values)
            return loss, [tf.convert_to_tensor(g) for g in grads]

        def run(dist_batch, step):
            loss, grads = self.strategy.run(replica_fn, args=(dist_batch, step))
            return (self.strategy.reduce(SUM, loss, axis=None),
                    [self.strategy.experimental_local_results(g)[0] for g in grads])
        # Compiled as the step is: whole (XLA over the pass, the counts and the sum) where
        # we compile the step whole; else its forward/backward pass is.
        return tf.function(run, jit_compile=self._jit_whole_step or None)(
            dist_batch, tf.constant(step, tf.int64))


# Not converted by autograph (it has no tensor control flow): autograph enters a stack
# filter for each call of a function it converts, and that filter copies the file set of
# `tracebacks.short_tracebacks()` (~2,900 names) for the life of the ops made in the call.
# Called once per variable where the micro-batch loop is traced (402 calls for Small),
# the copies held 0.2 GiB (training/tracebacks.py).
@tf.autograph.experimental.do_not_convert
def _add_gradient(total, gradient):
    """total + gradient, for a gradient that may be `IndexedSlices` (an embedding's rows).
    Scattered with the total's static row count: XLA cannot convert IndexedSlices to
    dense inside a loop (their dense shape is not a compile-time constant there)."""
    if gradient is None:  # a variable this objective does not use
        return total
    if isinstance(gradient, tf.IndexedSlices):
        return tf.tensor_scatter_nd_add(total, gradient.indices[:, None], gradient.values)
    return total + gradient


XLA_SCOPES = ("auto", "whole_step", "forward_backward")


def xla_scope(train_config, strategy) -> str:
    """What XLA compiles of a training step: "whole_step" (the forward/backward pass,
    all-reduce, clipping, optimizer update and metrics in one program), "forward_backward"
    (the rest runs as TensorFlow ops) or "none" (`jit_compile=False`).

    `auto`: the whole step on TPUs (TPUStrategy compiles every step whole) and on one GPU
    (expected to pay there: the optimizer's few hundred small kernels and their launches
    leave the step; not yet measured on a GPU);
    the forward/backward pass on a CPU, where the whole step is 7% faster but holds
    0.5 GiB more (Small, batch 32, BENCHMARKS.md "Memory"), and under Mirrored and
    multi-worker strategies, which cannot compile the cross-device all-reduce and update.
    """
    scope = train_config.get("xla_scope", "auto")
    if scope not in XLA_SCOPES:
        raise errors.UserError(f"config.train.xla_scope={scope!r}: choose one of "
                               f"{', '.join(XLA_SCOPES)}")
    if distribute.is_tpu(strategy):
        return "whole_step"  # TPUStrategy compiles every step whole, whatever is asked
    if not train_config.jit_compile:
        if scope == "whole_step":
            raise errors.UserError("config.train.xla_scope='whole_step' needs "
                                   "config.train.jit_compile=true")
        return "none"
    one_device = isinstance(strategy, tf.distribute.OneDeviceStrategy)
    if scope == "whole_step":
        if not one_device:
            raise errors.UserError(
                f"config.train.xla_scope='whole_step' needs one device or a TPU; "
                f"{type(strategy).__name__} compiles the forward/backward pass only "
                "(use auto)")
        return "whole_step"
    if scope == "auto" and one_device and distribute.device_kind(strategy) == "gpu":
        return "whole_step"
    return "forward_backward"


def micro_batches(train_config, local_batch: int) -> int:
    """`config.train.accumulation_steps`, checked against this replica's batch rows."""
    n = train_config.get("accumulation_steps", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise errors.UserError(f"config.train.accumulation_steps={n!r}: give a whole number "
                               ">= 1 (1: no accumulation)")
    if local_batch % n:
        raise errors.UserError(
            f"config.train.accumulation_steps={n} does not divide the {local_batch} rows each "
            f"replica gets of config.train.batch_size={train_config.batch_size}: choose a "
            "divisor")
    return n


def masking_config(config, vocab) -> masking_lib.MaskingConfig:
    """The masking of `config.data` for `vocab`."""
    return pipeline.masking_config_for(
        vocab, config.data.max_seq_length, config.data.mask_prob,
        config.data.mask_token_rate, config.data.random_token_rate)


def distributed_dataset(strategy, files, config, masking, training, step=0):
    """Masked batches of `files` for `strategy`, from the first batch after the `step`
    steps before (found by arithmetic, not by reading them: data/order.py)."""
    def make(context):
        # Each step takes one batch per replica this pipeline feeds.
        per_step = context.num_replicas_in_sync // context.num_input_pipelines
        return pipeline.pretraining_dataset(
            files, config.train.batch_size, config.data.max_seq_length, masking,
            is_training=training, input_context=context, seed=config.train.seed,
            shuffle_buffer=config.data.shuffle_buffer, skip_batches=step * per_step)
    return strategy.distribute_datasets_from_function(make)


def _files(config, key, vocab):
    pattern = config.data[key]
    if not pattern:
        raise errors.UserError(f"config.data.{key} is empty: give a data directory, "
                               "manifest or glob")
    try:
        return pipeline.resolve_files(pattern, config.data.max_seq_length, vocab,
                                      skip_damaged=config.data.skip_damaged_shards)
    except pipeline.DamagedShardError as e:
        raise errors.UserError(f"config.data.{key}: {e}{_DAMAGED_HINT}") from None
    except errors.UserError as e:
        raise errors.UserError(f"config.data.{key}={pattern!r}: {e}") from None


_DAMAGED_HINT = (" (config.data.skip_damaged_shards=true reads every shard at start and "
                 "leaves the damaged ones out)")


@contextlib.contextmanager
def _profiled(enabled: bool, logdir: str, step_variable):
    """A TensorBoard profile (the Profile tab) of the steps run inside, if `enabled`."""
    if not enabled:
        yield
        return
    first = int(step_variable.numpy()) + 1
    tf.profiler.experimental.start(logdir)
    try:
        yield
    finally:
        tf.profiler.experimental.stop()
    logging.info("Profiled steps %d-%d into %s (TensorBoard: Profile)", first,
                 int(step_variable.numpy()), logdir)


@contextlib.contextmanager
def _naming_damaged(files, key):
    """A record that fails to read inside the compiled loop is a `DataLossError` that
    names no file: read the files through to name it."""
    try:
        yield
    except tf.errors.DataLossError as e:
        error = pipeline.damaged_data_error(files, e)
        raise errors.UserError(f"config.data.{key}: {error}{_DAMAGED_HINT}; the last "
                               "checkpoint is kept") from None


def train_and_evaluate(config, workdir: str, strategy=None) -> dict[str, float]:
    """Pre-trains (resuming from `workdir` if it holds a checkpoint); returns the last
    evaluation's metrics (or the last training metrics without eval files)."""
    # ------------------------------------------------------------ runtime
    config_check.check(config)  # every value in its range before anything is written
    config = model_config.resolve(config)  # the shape explicit, as config.json keeps it
    strategy = strategy or distribute.get_strategy(config.runtime)
    chief = distribute.is_chief(strategy)
    distribute.local_batch_size(strategy, config.train.batch_size)  # before any dataset
    # One run writes a workdir: the chief holds it (the other workers write aside).
    with workdir_lib.Lock(workdir) if chief else contextlib.nullcontext():
        if chief:
            workdir_lib.remove_partial_files(workdir)
        return _train_and_evaluate(config, workdir, strategy, chief)


def _train_and_evaluate(config, workdir, strategy, chief) -> dict[str, float]:
    # ------------------------------------------------------------ data
    if not config.data.vocab_file:
        raise errors.UserError("config.data.vocab_file is empty: give the vocab.txt the "
                               "data was made with")
    vocab = tokenizer.Vocab.load(config.data.vocab_file)
    train_files = _files(config, "train_files", vocab)
    eval_files = _files(config, "eval_files", vocab) if config.data.eval_files else None
    masking = masking_config(config, vocab)
    eval_data = (distributed_dataset(strategy, eval_files, config, masking, training=False)
                 if eval_files else None)
    # The view shows replaced-token detection: objectives without it have none.
    shown = (config.train.eval_predictions if eval_files and chief
             and objectives.get(model_config.objective_name(config)).detects else 0)
    shown_batch = (predictions.first_batch(eval_files, shown, config.data.max_seq_length,
                                           masking, config.train.seed) if shown else None)
    if shown and shown_batch is None:
        logging.warning("config.data.eval_files hold fewer than config.train."
                        "eval_predictions=%d sequences: no predictions view", shown)

    # ------------------------------------------------------------ model, optimizer
    _check_same_run(config, workdir, vocab)
    trainer = Trainer(config, strategy, vocab.size, masking.max_predictions)

    # ------------------------------------------------------------ checkpoint (resume)
    # Order: variables exist (model and optimizer built) → restore → the data stream,
    # which starts after the batches the restored step has consumed (same seed, same order,
    # same masks: the run continues batch for batch).
    checkpoint_dir = os.path.join(workdir, "checkpoints")
    if not chief:  # other workers must save too (collectives); they write aside
        checkpoint_dir = os.path.join(workdir, "tmp", f"worker_{distribute.worker_id(strategy)}")
    checkpoint = tf.train.Checkpoint(step=trainer.step, model=trainer.model,
                                     optimizer=trainer.optimizer,
                                     **trainer.algorithm.checkpoint_items())
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir,
                                         max_to_keep=config.train.keep_checkpoints,
                                         step_counter=trainer.step)
    restored = _restore(trainer, checkpoint, os.path.join(workdir, "checkpoints"))
    trainer.algorithm.check_restored(workdir)
    step = int(trainer.step.numpy())
    iterator = iter(distributed_dataset(strategy, train_files, config, masking,
                                        training=True, step=step))

    # ------------------------------------------------------------ outputs
    if chief:
        tf.io.gfile.makedirs(workdir)
        writer.write_json_atomic({**config.to_dict(), "data_order": order.VERSION},
                                 os.path.join(workdir, "config.json"))
        vocab_copy = os.path.join(workdir, "vocab.txt")
        if os.path.abspath(config.data.vocab_file) != os.path.abspath(vocab_copy):
            tf.io.gfile.copy(config.data.vocab_file, vocab_copy + ".tmp", overwrite=True)
            tf.io.gfile.rename(vocab_copy + ".tmp", vocab_copy, overwrite=True)
        train_writer = tf.summary.create_file_writer(os.path.join(workdir, "logs", "train"))
        eval_writer = tf.summary.create_file_writer(os.path.join(workdir, "logs", "eval"))
        summaries.write_config(train_writer, config)
        summaries.write_hparams(os.path.join(workdir, "logs"), config)
    else:
        train_writer = eval_writer = tf.summary.create_noop_writer()

    # ------------------------------------------------------------ loop
    train = config.train
    tokens_per_step = trainer.global_batch * config.data.max_seq_length
    results = {}
    saved_step = step if restored else None
    last_time, last_step, start_time, start_step = time.time(), step, time.time(), step
    last_skipped = 0
    # The profile covers `profile_steps` steps after the first loop (its tracing and
    # compilation are not what a profile is for), traced by the chief.
    profile_steps = train.profile_steps
    profiled = not profile_steps
    handler = preemption.multi_worker_handler(strategy, manager)
    try:
        with preemption.SigtermWatcher(trainer.stop_requested,
                                       enabled=handler is None) as sigterm:
            while step < train.steps and not sigterm.received.is_set():
                # Run to the next log/checkpoint/eval boundary, at most steps_per_loop.
                # A loop never spans two stages of the algorithm (two_stage's switch).
                boundary = min(min(_next_multiple(step, n) for n in (
                    train.log_every, train.checkpoint_every, train.eval_every,
                    train.steps_per_loop)), trainer.algorithm.next_boundary(step))
                profiling = not profiled and step > start_step
                if profiling:  # every worker ends the loop there (they step together)
                    boundary = min(boundary, step + profile_steps)
                    profiled = True
                with _profiled(profiling and chief, os.path.join(workdir, "logs", "train"),
                               trainer.step), _naming_damaged(train_files, "train_files"):
                    trainer.start_loop(step)
                    trainer.run_loop(iterator, min(boundary, train.steps) - step)
                step = int(trainer.step.numpy())
                memory.release()  # what compilation and the steps freed, back to the OS
                _raise_if_nonfinite(trainer, manager)
                if handler is not None:  # saves and raises Preempted if a worker got SIGTERM
                    handler.save_checkpoint_if_preempted(checkpoint_number=step)
                if sigterm.received.is_set():
                    break

                if step % train.log_every == 0 or step == train.steps:
                    values = trainer.train_metrics.result()
                    trainer.train_metrics.reset()
                    now = time.time()
                    rate = (step - last_step) / max(now - last_time, 1e-9)
                    values.update(learning_rate=float(
                                      trainer.stage_optimizer().learning_rate),
                                  steps_per_sec=rate,
                                  examples_per_sec=rate * trainer.global_batch,
                                  tokens_per_sec=rate * tokens_per_step)
                    skipped = ""
                    if trainer.loss_scaling:
                        total = int(trainer.skipped_steps.numpy())
                        values["skipped_steps"] = total - last_skipped
                        values["loss_scale"] = float(
                            trainer.stage_optimizer().dynamic_scale)
                        skipped = (f" | skipped {total - last_skipped} step(s) (float16 "
                                   f"overflow; loss scale {values['loss_scale']:g})")
                        last_skipped = total
                    summaries.write_scalars(train_writer, values, step)
                    overall = (step - start_step) / max(now - start_time, 1e-9)
                    fields = " ".join(f"{label} {values[name]:.{decimals}f}" for
                                      label, name, decimals in trainer.objective.log_fields)
                    logging.info(
                        "step %d/%d (%.1f%%) loss %.4f %s | "
                        "%.2f steps/s %.0f ex/s ETA %s%s", step, train.steps,
                        100 * step / train.steps, values["loss"], fields, rate,
                        rate * trainer.global_batch,
                        progress.format_duration((train.steps - step) / max(overall, 1e-9)),
                        skipped)
                    last_time, last_step, results = now, step, values

                if step % train.checkpoint_every == 0 or step == train.steps:
                    path = manager.save(checkpoint_number=step)
                    saved_step = step
                    if chief:
                        logging.info("Saved %s", path)

                if eval_data is not None and (step % train.eval_every == 0
                                              or step == train.steps):
                    with _naming_damaged(eval_files, "eval_files"):
                        results = trainer.evaluate(eval_data, train.eval_steps)
                    memory.release()
                    summaries.write_scalars(eval_writer, results, step)
                    logging.info("eval at step %d: %s", step,
                                 " ".join(f"{k} {v:.4f}" for k, v in results.items()))
                    if shown_batch is not None:
                        _write_predictions(eval_writer, trainer, shown_batch, vocab, step)
                    last_time = time.time()  # evaluation time is not training time

            if sigterm.received.is_set():
                if saved_step != step:
                    path = manager.save(checkpoint_number=step)
                    logging.info("Saved %s", path)
                logging.warning("Stopped by SIGTERM at step %d/%d; the same command resumes "
                                "from there", step, train.steps)
    except preemption.Preempted:
        step = int(trainer.step.numpy())
        logging.warning("Preempted: saved a checkpoint at step %d/%d; the same command on "
                        "every worker resumes from there", step, train.steps)
    except _LOST_PEER as e:
        if handler is None:
            raise
        latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
        raise errors.RunError(
            f"lost contact with another worker near step {step} ("
            f"{_first_line(e.message)}): start every worker again with the same command "
            f"to resume from the last checkpoint ({latest or 'none yet: from step 0'})"
        ) from None
    except tf.errors.ResourceExhaustedError as e:
        latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
        raise errors.RunError(
            f"out of memory near step {step} ({_allocation_line(e.message)}): "
            f"config.train.batch_size={train.batch_size} at config.data.max_seq_length="
            f"{config.data.max_seq_length} needs more memory than this device has; the "
            "step's memory grows with both, so lower one of them, or keep the batch and "
            "raise config.train.accumulation_steps (micro-batches) or set "
            "config.train.remat=blocks (BENCHMARKS.md, 'Memory'). The last checkpoint is "
            f"kept ({latest or 'none yet'})") from None
    finally:
        train_writer.flush()
        eval_writer.flush()

    if not profiled and chief:
        logging.warning("config.train.profile_steps=%d: the run ended within its first loop "
                        "(config.train.steps_per_loop): nothing was profiled", profile_steps)
    if not chief:
        tf.io.gfile.rmtree(os.path.join(workdir, "tmp"))
    return results


def _write_predictions(writer, trainer, batch, vocab, step):
    """The predictions view of the first held-out sequences (the same ones, masks and
    sampling noise at every evaluation), as a text summary: what the model does to them."""
    uniform = predictions.noise(trainer.config.train.seed, *batch["masked_lm_ids"].shape)
    shown = predictions.views(trainer.predict, batch, vocab, uniform)
    with writer.as_default(step=step):
        tf.summary.text("predictions", predictions.markdown(shown))
    writer.flush()


# What a collective raises when a peer worker dies: its socket closes (Unavailable), or
# the coordination service misses its heartbeats and aborts every collective.
_LOST_PEER = (tf.errors.UnavailableError, tf.errors.AbortedError,
              tf.errors.DeadlineExceededError)


def _allocation_line(message: str) -> str:
    """The line of an out-of-memory error that says what could not be allocated."""
    lines = [l.strip() for l in message.splitlines() if l.strip()]
    return next((l for l in lines if "alloc" in l.lower()), _first_line(message))


def _first_line(message: str) -> str:
    lines = [l.strip() for l in message.splitlines() if l.strip()]
    return next((l.split("}}")[-1].strip() for l in lines if "}}" in l), lines[0] if lines else "")


# (section, key, the value of a config.json written before the key existed)
_RUN_IDENTITY = (("model", "objective", "electra"), ("train", "algorithm", "joint"),
                 ("train", "two_stage_generator_steps", 0))


def _check_same_run(config, workdir, vocab):
    """A workdir holds one run: resuming it with another model, objective, sequence
    length, batch size, seed or vocab would not continue it (or fail deep in restore)."""
    path = os.path.join(workdir, "config.json")
    if not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path) as f:
        saved = json.load(f)
    before = model_config.shape(ml_collections.ConfigDict(saved))
    now = model_config.shape(config)
    if before != now:
        old, new = _flat(before.to_dict()), _flat(now.to_dict())
        changed = [key for key in new if new[key] != old[key]]
        raise errors.UserError(
            ", ".join(f"{model_config.config_key(k)}={new[k]!r}" for k in changed)
            + f", but the run in {workdir} was started with "
            + ", ".join(repr(old[k]) for k in changed)
            + f" ({path}): use another --workdir, or the same model shape to resume")
    # What is trained: another objective has other variables and other losses.
    for section, key, default in _RUN_IDENTITY:
        before = saved.get(section, {}).get(key, default)
        now = config[section].get(key, default)
        if before != now:
            raise errors.UserError(
                f"config.{section}.{key}={now!r}, but the run in {workdir} was started with "
                f"{before!r} ({path}): use another --workdir, or the same value to resume")
    # Once it has trained (a converted workdir is at step 0), also what the position in
    # the data stream depends on.
    latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
    trained = latest and not latest.endswith("-0")
    for section, key in ((("data", "max_seq_length"), ("data", "shuffle_buffer"),
                          ("train", "batch_size"), ("train", "seed")) if trained else ()):
        before = saved.get(section, {}).get(key)
        now = config[section][key]
        if before is not None and before != now:
            raise errors.UserError(
                f"config.{section}.{key}={now!r}, but the run in {workdir} was started with "
                f"{before!r} ({path}): use another --workdir, or the same value to resume")
    if trained and saved.get("data_order") != order.VERSION:
        logging.warning(
            "The run in %s was started with an older data order (%s); it continues with "
            "this version's (%s): from %s on it reads other examples than the older version "
            "would have", workdir, saved.get("data_order", "a shuffle buffer"), order.VERSION,
            os.path.basename(latest))
    vocab_copy = os.path.join(workdir, "vocab.txt")
    if tf.io.gfile.exists(vocab_copy):
        if tokenizer.Vocab.load(vocab_copy).sha256 != vocab.sha256:
            raise errors.UserError(
                f"config.data.vocab_file={config.data.vocab_file!r} differs from the vocab "
                f"the run in {workdir} was started with ({vocab_copy})")


def _flat(d: dict, prefix: str = "") -> dict:
    """{"a.b": value} of a nested dict."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _restore(trainer, checkpoint, directory) -> str | None:
    """Restores the newest readable checkpoint of `directory`; returns its path.

    TF writes a checkpoint's files first and then, atomically, the `checkpoint` state
    file that names it, so a crash while saving leaves the previous one the latest. A
    checkpoint that cannot be read (a damaged file) is reported and the one before it is
    tried. A converted checkpoint (tools/convert_checkpoint.py) holds the step and the
    model only: it starts a fresh optimizer (and warm-up) on the converted weights.
    """
    state = tf.train.get_checkpoint_state(directory)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if state and state.model_checkpoint_path and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    paths = [p if os.path.isabs(p) else os.path.join(directory, p) for p in paths]
    for path in reversed(paths):
        try:
            saved = {name.split("/")[0] for name, _ in tf.train.list_variables(path)}
            items = trainer.algorithm.checkpoint_items()
            missing = sorted(set(items) - saved)
            restore = checkpoint if "optimizer" in saved and not missing else (
                tf.train.Checkpoint(step=trainer.step, model=trainer.model)
                if "optimizer" not in saved else tf.train.Checkpoint(
                    step=trainer.step, model=trainer.model, optimizer=trainer.optimizer,
                    **{k: v for k, v in items.items() if k in saved}))
            restore.restore(path).assert_existing_objects_matched()
            if missing and "optimizer" in saved:  # written before these items existed
                logging.warning("Checkpoint %s has no %s: starting it afresh", path,
                                ", ".join(missing))
        except (tf.errors.OpError, IndexError) as e:  # IndexError: a truncated data file
            logging.error("Cannot read checkpoint %s (%s): trying the one before it", path,
                          (str(e).strip().splitlines() or [type(e).__name__])[0])
            continue
        logging.info("Resumed from %s at step %d%s", path, int(trainer.step.numpy()),
                     "" if "optimizer" in saved else " (no optimizer state: a new one)")
        if "optimizer" not in saved:
            _warn_if_fresh_generator(os.path.dirname(directory), trainer.model)
        return path
    if paths:
        raise errors.RunError(f"none of the checkpoints in {directory} can be read "
                              f"({', '.join(os.path.basename(p) for p in paths)})")
    logging.info("No checkpoint in %s: starting from step 0", directory)
    return None


def _warn_if_fresh_generator(workdir, model):
    """A workdir converted from a discriminator alone (its converted.json, written by
    tools/convert_checkpoint.py) has a generator of fresh weights: say so."""
    path = os.path.join(workdir, "converted.json")
    if not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path) as f:
        converted = json.load(f)
    if converted.get("generator") == "fresh":
        logging.warning(
            "%s was converted from a discriminator alone (%s): the generator starts from "
            "fresh weights (hidden %d, %d layers) and trains from here with the converted "
            "discriminator", workdir, converted.get("source"),
            model.generator_size.hidden_size, model.generator_size.num_layers)


def _raise_if_nonfinite(trainer, manager):
    bad = trainer.nonfinite_step()
    if bad is None:
        return
    step, names = bad
    latest = manager.latest_checkpoint
    raise errors.RunError(
        f"{' and '.join(names)} not finite at step {step}: stopped without saving; "
        + (f"the last good checkpoint, {latest}, stays the latest. " if latest else
           "there is no checkpoint yet. ")
        + "Lower config.train.learning_rate or raise config.train.warmup_steps, or use "
        "float32 if this is float16 (config.train.mixed_precision)")


def _next_multiple(step: int, every: int) -> int:
    every = max(int(every), 1)
    return (step // every + 1) * every

