"""Faults inside the compiled training loop (trainer.py, faults.py): a non-finite step
stops the loop at that step; float16 overflows are skipped and counted; SIGTERM stops a
long loop mid-call; a step out of memory is a one-line error naming the batch size and
sequence length; a lost peer is one line naming its cause."""

import os
import signal
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf import errors
from electra_tf.training import distribute
from electra_tf.training import faults
from electra_tf.training import loop
from electra_tf.training import preemption
from electra_tf.training import trainer as trainer_lib
from tests import helpers

VOCAB, SEQ, P, BATCH = 40, 16, 3, 4


def _trainer(mixed_precision="float32"):
    config = electra_configs.get_config("tiny")
    config.data.max_seq_length = SEQ
    config.train.batch_size = BATCH
    config.train.mixed_precision = mixed_precision
    config.train.warmup_steps = 0
    config.runtime.strategy = "one_device"
    config.train.jit_compile = False  # the loop's logic is the same; tracing is faster
    strategy = distribute.get_strategy(config.runtime)
    trainer = trainer_lib.Trainer(config, strategy, VOCAB, P)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, VOCAB, (BATCH, SEQ)).astype(np.int32)
    positions = np.tile(np.arange(1, P + 1, dtype=np.int32), (BATCH, 1))
    masked = ids.copy()
    np.put_along_axis(masked, positions, 4, axis=1)
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids),
             "segment_ids": np.zeros_like(ids), "masked_input_ids": masked,
             "masked_lm_positions": positions,
             "masked_lm_ids": np.take_along_axis(ids, positions, axis=1),
             "masked_lm_weights": np.ones((BATCH, P), np.float32)}
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    return trainer, iter(strategy.experimental_distribute_dataset(dataset))


def _run(trainer, iterator, steps):
    trainer.train_loop(iterator, tf.constant(steps))
    return int(trainer.step.numpy())


def _inside_xla(trainer, monkeypatch):
    """Gives `trainer` the loop of the whole step (`Trainer._replica_loop`, its `while`
    carrying the non-finite bits and skipped steps out to the host), run as TPUStrategy
    is given it: not compiled here."""
    xla_loop = trainer._compile_xla_loop  # pylint: disable=protected-access
    monkeypatch.setattr(trainer, "_compile_loop",
                        lambda stage: xla_loop(stage, jit_compile=False))


@pytest.mark.parametrize("inside_xla", [False, True])
def test_a_nonfinite_step_stops_the_loop_there_and_is_named(inside_xla, monkeypatch):
    trainer, iterator = _trainer()
    if inside_xla:
        _inside_xla(trainer, monkeypatch)
    assert _run(trainer, iterator, 2) == 2 and trainer.nonfinite_step() is None
    embeddings = trainer.model.embeddings.trainable_variables[0]
    embeddings.assign(tf.fill(embeddings.shape, np.nan))
    # Five steps asked; the third one is not finite and the loop ends after it.
    assert _run(trainer, iterator, 5) == 3
    step, names = trainer.nonfinite_step()
    assert step == 3 and "mlm_loss" in names and "rtd_loss" in names
    assert _run(trainer, iterator, 5) == 3  # stays stopped


@pytest.mark.parametrize("inside_xla", [False, True])
def test_float16_overflows_are_skipped_and_counted_not_fatal(inside_xla, monkeypatch):
    """Inside XLA the 3 steps are one launch (`steps_per_loop` 10): its `while` sums
    the skipped steps."""
    trainer, iterator = _trainer("float16")
    assert trainer.loss_scaling and trainer.config.train.steps_per_loop >= 3
    if inside_xla:
        _inside_xla(trainer, monkeypatch)
    # A loss scale of 2^100 overflows every float16 gradient: the optimizer skips the
    # update (and halves the scale) instead of applying infinities.
    trainer.optimizer.dynamic_scale.assign(2.0 ** 100)
    before = [v.numpy().copy() for v in trainer.model.trainable_variables]
    assert _run(trainer, iterator, 3) == 3
    assert trainer.nonfinite_step() is None
    assert int(trainer.skipped_steps.numpy()) == 3
    assert float(trainer.optimizer.dynamic_scale.numpy()) == 2.0 ** 97
    # Their norms (inf) are not TensorBoard's grad_norm: no step of the three had one.
    values = trainer.train_metrics.result()
    assert "grad_norm" not in values and np.isfinite(values["loss"])
    for b, v in zip(before, trainer.model.trainable_variables):
        np.testing.assert_array_equal(b, v.numpy())


def test_sigterm_stops_a_long_loop_after_the_current_step():
    trainer, iterator = _trainer()
    _run(trainer, iterator, 1)  # traced and compiled: the timing below is steps only
    with preemption.SigtermWatcher(trainer.stop_requested) as watcher:
        killer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
        killer.start()
        start = time.time()
        # Without the watcher thread the flag would be set only after this call returns.
        step = _run(trainer, iterator, 1_000_000)
        killer.join()
    assert watcher.received.is_set()
    assert 1 < step < 1_000_000 and time.time() - start < 60
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored
    assert _run(trainer, iterator, 10) == step  # the flag holds until the run ends


def test_a_tpu_has_the_watcher_and_a_handler_that_saves_nothing_is_said(monkeypatch):
    """TF's handler serves multi-worker runs; a TPU (one client process, where TF's
    handler saves nothing outside Google) has SigtermWatcher; on a Google Cloud CPU VM,
    where the handler saves nothing either and one worker alone cannot save, the log says
    what a SIGTERM costs."""
    from unittest import mock  # pylint: disable=g-import-not-at-top
    for strategy in (tf.distribute.get_strategy(), mock.Mock(spec=tf.distribute.TPUStrategy)):
        assert preemption.multi_worker_handler(strategy, None) is None
    made, warnings = [], []
    monkeypatch.setattr(tf.distribute.experimental, "PreemptionCheckpointHandler",
                        lambda *args, **kwargs: made.append(args) or "handler")
    monkeypatch.setattr(preemption.logging, "warning", lambda *a: warnings.append(a))
    workers = mock.Mock(spec=tf.distribute.MultiWorkerMirroredStrategy)
    for saves in (True, False):
        monkeypatch.setattr(preemption.compat, "preemption_handler_saves",
                            lambda handler, saves=saves: saves)
        assert preemption.multi_worker_handler(workers, None) == "handler"
    assert len(made) == 2 and len(warnings) == 1
    assert "saves nothing on a Google Cloud CPU VM: a SIGTERM there loses" in warnings[0][0]


@pytest.mark.parametrize("inside_xla", [False, True])
def test_the_stop_flag_is_read_before_every_step(inside_xla, monkeypatch):
    """Inside XLA: before every launch (of up to `steps_per_loop` steps)."""
    trainer, iterator = _trainer()
    if inside_xla:
        _inside_xla(trainer, monkeypatch)
    trainer.stop_requested.assign(True)
    assert _run(trainer, iterator, 5) == 0
    trainer.stop_requested.assign(False)
    assert _run(trainer, iterator, 2) == 2


def test_mixed_precision_trains(precision="bfloat16"):
    """bfloat16 (the default on TPUs and Ampere+ GPUs): keras-hub's MaskedLMHead alone
    failed there (a float32 bias added to bfloat16 logits; model/heads.py)."""
    trainer, iterator = _trainer(precision)
    assert trainer.policy == f"mixed_{precision}"
    assert _run(trainer, iterator, 2) == 2
    values = trainer.train_metrics.result()
    assert np.isfinite(values["loss"]) and np.isfinite(values["grad_norm"])
    assert trainer.nonfinite_step() is None


def test_out_of_memory_names_the_batch_and_length_and_keeps_the_checkpoint(tmp_path,
                                                                          monkeypatch):
    # What XLA:CPU raised for Small at seq 512, batch 128 (BENCHMARKS.md, "Memory"). A
    # real one needs more memory than a test machine has, so the loop raises it here.
    message = ("Graph execution error:\n\nOut of memory while trying to allocate "
               "30.36GiB.\nHint: If you want to see a list of allocated tensors ...")

    def out_of_memory(iterator, num_steps):
        raise tf.errors.ResourceExhaustedError(None, None, message)
    monkeypatch.setattr(trainer_lib.Trainer, "_compile_loop",
                        lambda self, stage: out_of_memory)
    vocab = helpers.write_vocab(str(tmp_path))
    config = electra_configs.get_config("tiny")
    config.data.train_files = helpers.make_data(str(tmp_path), vocab, max_seq_length=32)
    config.data.vocab_file = vocab.path
    config.data.max_seq_length = 32
    config.train.batch_size = 4
    config.train.steps = 2
    config.train.jit_compile = False
    config.runtime.strategy = "one_device"
    with pytest.raises(errors.RunError) as raised:
        loop.train_and_evaluate(config, str(tmp_path / "run"))
    text = str(raised.value)
    assert text.startswith("out of memory near step 0 (Out of memory while trying to "
                           "allocate 30.36GiB.)"), text
    assert "config.train.batch_size=4 at config.data.max_seq_length=32" in text
    assert "config.train.accumulation_steps" in text and "remat=blocks" in text
    assert "last checkpoint is kept (none yet)" in text and "\n" not in text


def test_the_first_loop_runs_its_compiling_step_alone_under_trimming(monkeypatch):
    """Trainer.run_loop: the first loop of a stage runs its first step (the one that
    traces and compiles) in a call of its own under memory.trimming(), later loops in one
    call; the steps and their results are those of a single call."""
    import contextlib

    from electra_tf.training import memory
    trimmed = []  # the trainer's step when each trimming() block began and ended
    real = memory.trimming
    split, split_iterator = _trainer()

    @contextlib.contextmanager
    def recording(*args, **kwargs):
        start = int(split.step.numpy())
        with real(*args, **kwargs):
            yield
        trimmed.append((start, int(split.step.numpy())))

    monkeypatch.setattr(trainer_lib.memory, "trimming", recording)
    split.run_loop(split_iterator, 5)
    split.run_loop(split_iterator, 3)
    assert int(split.step.numpy()) == 8
    assert trimmed == [(0, 1)]  # the first step alone, once

    whole, whole_iterator = _trainer()
    assert _run(whole, whole_iterator, 8) == 8
    for a, b in zip(split.model.trainable_variables, whole.model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_a_lost_peer_is_one_line_naming_the_cause_and_the_last_checkpoint(tmp_path):
    error = tf.errors.UnavailableError(
        None, None, "Collective ops is aborted by: ...\n\n{{function_node "
        "__inference_loop_123}} Socket closed\n\t [[{{node CollectiveReduceV2}}]]")
    text = str(faults.lost_peer(error, 7, str(tmp_path)))
    assert text == ("lost contact with another worker near step 7 (Socket closed): start "
                    "every worker again with the same command to resume from the last "
                    "checkpoint (none yet: from step 0)")
