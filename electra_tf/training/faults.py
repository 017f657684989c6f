"""Faults of a pre-training run, each turned into one line that says what happened and
what to do (WORKSPACE.md, "Faults"): a step whose losses or gradient norm are not finite,
a lost peer worker, a step out of memory, a damaged shard read inside the compiled loop.
"""

import contextlib

import tensorflow as tf

from electra_tf import errors
from electra_tf import workdir as workdir_lib
from electra_tf.data import pipeline

# What a collective raises when a peer worker dies: its socket closes (Unavailable), or
# the coordination service misses its heartbeats and aborts every collective.
LOST_PEER = (tf.errors.UnavailableError, tf.errors.AbortedError,
             tf.errors.DeadlineExceededError)


def raise_if_nonfinite(trainer, manager) -> None:
    """RunError naming the first step whose losses or gradient norm were not finite (the
    loop stopped after it, before saving: the last good checkpoint stays the latest)."""
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


def lost_peer(error: tf.errors.OpError, step: int, workdir: str) -> errors.RunError:
    """The error for a collective that failed because another worker is gone."""
    latest = workdir_lib.latest_checkpoint(workdir)
    return errors.RunError(
        f"lost contact with another worker near step {step} ("
        f"{_first_line(error.message)}): start every worker again with the same command "
        f"to resume from the last checkpoint ({latest or 'none yet: from step 0'})")


def out_of_memory(error: tf.errors.ResourceExhaustedError, step: int, config,
                  workdir: str) -> errors.RunError:
    """The error for a step that does not fit: the allocation, the batch and length that
    set the step's memory, what lowers it at the same batch, and the last checkpoint."""
    latest = workdir_lib.latest_checkpoint(workdir)
    return errors.RunError(
        f"out of memory near step {step} ({_allocation_line(error.message)}): "
        f"config.train.batch_size={config.train.batch_size} at config.data.max_seq_length="
        f"{config.data.max_seq_length} needs more memory than this device has; the "
        "step's memory grows with both, so lower one of them, or keep the batch and "
        "raise config.train.accumulation_steps (micro-batches) or set "
        "config.train.remat=blocks (BENCHMARKS.md, 'Memory'). The last checkpoint is "
        f"kept ({latest or 'none yet'})")


@contextlib.contextmanager
def naming_damaged(files, key):
    """A record that fails to read inside the compiled loop is a `DataLossError` that
    names no file: read the files through to name it."""
    try:
        yield
    except tf.errors.DataLossError as e:
        error = pipeline.damaged_data_error(files, e)
        raise errors.UserError(f"config.data.{key}: {error}{pipeline.DAMAGED_HINT}; the "
                               "last checkpoint is kept") from None


def _allocation_line(message: str) -> str:
    """The line of an out-of-memory error that says what could not be allocated."""
    lines = [l.strip() for l in message.splitlines() if l.strip()]
    return next((l for l in lines if "alloc" in l.lower()), _first_line(message))


def _first_line(message: str) -> str:
    lines = [l.strip() for l in message.splitlines() if l.strip()]
    return next((l.split("}}")[-1].strip() for l in lines if "}}" in l), lines[0] if lines else "")
