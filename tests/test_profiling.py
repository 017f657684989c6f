"""profiling.LoopProfiler: config.train.profile_steps's profile, in the loop's steps (the
summary of a benchmark's profile: tests/test_benchmark.py)."""

import glob
import os

import tensorflow as tf

from electra_tf import profiling


class _Trainer:
    """What the profiler calls: a step counter and `run_loop`, whose calls it records."""

    def __init__(self):
        self.step = tf.Variable(0, dtype=tf.int64)
        self.calls = []
        self.weights = tf.Variable(tf.ones([32, 32]))

    def run_loop(self, iterator, num_steps):
        del iterator
        self.calls.append(num_steps)
        for _ in range(num_steps):
            self.weights.assign(tf.matmul(self.weights, self.weights) / 32.0)
            self.step.assign_add(1)


def test_profile_steps_are_traced_one_by_one_after_the_first_loop_across_loops(tmp_path):
    """5 profiled steps with loops of 4 steps: the first loop is not traced (it
    compiles), then 4 + 1 steps one at a time, the rest of the second loop as one, and
    the trace's summary counts the 5 steps."""
    trainer, logdir = _Trainer(), str(tmp_path / "logs")
    profiler = profiling.LoopProfiler(5, logdir, chief=True)
    for _ in range(4):
        profiler.run_loop(trainer, None, 4)
    profiler.stop(trainer)
    assert trainer.calls == [4, 1, 1, 1, 1, 1, 3, 4]
    summary = profiling.summarize(profiling.newest_trace(logdir))
    assert summary["steps"] == 5 and summary["step_wall_ms"] > 0
    assert len(glob.glob(os.path.join(logdir, "plugins", "profile", "*"))) == 1


def test_a_worker_steps_as_the_chief_does_and_only_the_chief_traces(tmp_path):
    trainer, logdir = _Trainer(), str(tmp_path / "logs")
    profiler = profiling.LoopProfiler(2, logdir, chief=False)
    for _ in range(3):
        profiler.run_loop(trainer, None, 3)
    profiler.stop(trainer)
    assert trainer.calls == [3, 1, 1, 1, 3]
    assert not os.path.exists(logdir)


def test_a_run_that_ends_in_its_first_loop_says_nothing_was_profiled(tmp_path,
                                                                     monkeypatch):
    warnings = []
    monkeypatch.setattr(profiling.logging, "warning", lambda *a: warnings.append(a))
    trainer = _Trainer()
    profiler = profiling.LoopProfiler(2, str(tmp_path / "logs"), chief=True)
    profiler.run_loop(trainer, None, 3)
    profiler.stop(trainer)
    assert trainer.calls == [3] and "nothing was profiled" in warnings[0][0]
    warnings.clear()
    profiling.LoopProfiler(0, str(tmp_path / "logs"), chief=True).stop(trainer)
    assert not warnings  # nothing asked


def test_a_profile_that_cannot_be_written_warns_and_the_run_goes_on(tmp_path, monkeypatch):
    """`stop` runs in the loop's `finally`: a failing profiler must not replace the run's
    own error (or end a run that had none)."""
    warnings = []
    monkeypatch.setattr(profiling.logging, "warning", lambda *a: warnings.append(a))
    trainer = _Trainer()
    profiler = profiling.LoopProfiler(1, str(tmp_path / "logs"), chief=True)
    profiler.run_loop(trainer, None, 2)  # the first loop: not traced
    real_stop = tf.profiler.experimental.stop

    def failing_stop():
        real_stop()
        raise tf.errors.UnavailableError(None, None, "the disk went away")
    monkeypatch.setattr(tf.profiler.experimental, "stop", failing_stop)
    profiler.run_loop(trainer, None, 2)  # traces one step, stops: fails, warns
    profiler.stop(trainer)  # again (the loop's `finally`): nothing more
    assert trainer.calls == [2, 1, 1]
    assert len(warnings) == 1 and "could not be written" in warnings[0][0]
