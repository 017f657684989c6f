"""Crashes and preemption, end to end: a real `python -m electra_tf.train` killed with
SIGKILL or stopped with SIGTERM resumes to exactly the weights of an uninterrupted run."""

import glob
import json
import os
import random
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 60
# Checkpoints every 10 steps, loops of 5: a kill lands between checkpoints, so the
# resumed run redoes steps the killed one had already trained.
# Two micro-batches per step, blocks recomputed: kills land inside the micro-batch loop
# too (the plain step's exact resume is tests/test_shapes.py's, 10 + 10 steps).
RUN = ("--config.data.eval_files=", "--config.train.checkpoint_every=10",
       "--config.train.steps_per_loop=5", "--config.train.log_every=10",
       "--config.train.keep_checkpoints=2", "--config.train.seed=3",
       "--config.train.accumulation_steps=2", "--config.train.remat=blocks")


@pytest.fixture(scope="module")
def first_run(data, tmp_path_factory):
    """A run (`_command`) that nothing interrupts, and a second run on its workdir started
    a moment after it with another learning rate, which must refuse (once per module):
    {"workdir", "pid" (the first's), "second" (the second's CompletedProcess)}."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    workdir, log_path = str(directory / "run"), str(directory / "first.log")
    with open(log_path, "w") as log:
        first = _start(data, workdir, log)
        _wait_for(lambda: os.path.exists(os.path.join(workdir, "lock.json")), first)
        second = subprocess.run(
            _command(data, workdir) + ["--config.train.learning_rate=0.01"], cwd=ROOT,
            capture_output=True, text=True, timeout=600)
        assert first.wait(timeout=600) == 0, open(log_path).read()[-3000:]
    # Refused, it wrote nothing here (the busy-workdir test checks its error and the
    # workdir): the other tests may take the run as uninterrupted.
    assert second.returncode == 2, second.stderr[-3000:]
    return {"workdir": workdir, "pid": first.pid, "second": second}


@pytest.fixture(scope="module")
def uninterrupted(first_run):
    """The final checkpoint of the run that nothing interrupts (`first_run`)."""
    return tf.train.latest_checkpoint(os.path.join(first_run["workdir"], "checkpoints"))


def _command(data, workdir, run=RUN):
    return helpers.train_command(data, workdir, *run, steps=STEPS)


def _run(data, workdir, run=RUN):
    return subprocess.run(_command(data, workdir, run), cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def _start(data, workdir, log, run=RUN):
    return subprocess.Popen(_command(data, workdir, run), cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)


def _wait_for(predicate, process, timeout=300):
    deadline = time.time() + timeout
    while not predicate():
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.time() < deadline, "timed out waiting for the run"
        time.sleep(0.05)


def _checkpoint_steps(workdir):
    state = tf.train.get_checkpoint_state(os.path.join(workdir, "checkpoints"))
    if state is None:
        return []
    return [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


def _variables(path):
    reader = tf.train.load_checkpoint(path)
    # save_counter counts saves (the stopped run saved once more): bookkeeping, not state.
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def _assert_same_checkpoint(a, b):
    """Every variable (model, optimizer slots, step), bit for bit."""
    va, vb = _variables(a), _variables(b)
    assert va.keys() == vb.keys()
    assert any("optimizer" in name for name in va)
    different = [name for name in va if not np.array_equal(va[name], vb[name])]
    assert not different, f"{len(different)} of {len(va)} variables differ: {different[:5]}"


@pytest.mark.slow  # three training processes; each draw's determinism has a fast test
def test_sigkill_at_a_random_moment_then_resume_is_exact(data, uninterrupted, tmp_path):
    _assert_same_checkpoint(_kill_and_resume(data, str(tmp_path / "run"), RUN), uninterrupted)


# The algorithms and objectives the issues name, killed too (mlm, two_stage after its
# switch, adversarial): their own state through a kill, with the plain step (the
# micro-batches and recomputation are the joint run's above) and the uninterrupted run
# beside the killed one. A frozen generator's resume is training/test_generator_init.py's.
KILLED = {"mlm": ("--config.model.objective=mlm",),
          "two_stage": ("--config.train.algorithm=two_stage",
                        "--config.train.two_stage_generator_steps=5",
                        "--config.model.generator_hidden_fraction=1.0",
                        "--config.model.tie=none"),
          "adversarial": ("--config.train.algorithm=adversarial",)}


@pytest.mark.slow  # two training processes at once, then a third
@pytest.mark.parametrize("name", KILLED)
def test_each_algorithm_resumes_exactly_after_sigkill(data, tmp_path, name):
    run = (*RUN[:6], *KILLED[name])
    with open(tmp_path / "uninterrupted.log", "w") as log:
        reference = _start(data, str(tmp_path / "uninterrupted"), log, run)
        try:
            # 2 intervals of the 4 left: the reference may end first and speed it up.
            final = _kill_and_resume(data, str(tmp_path / "run"), run, intervals=2)
            assert reference.wait(timeout=600) == 0, (
                tmp_path / "uninterrupted.log").read_text()[-3000:]
        finally:
            reference.kill()
    _assert_same_checkpoint(final, tf.train.latest_checkpoint(
        str(tmp_path / "uninterrupted" / "checkpoints")))


def _kill_and_resume(data, workdir, run, intervals=3):
    """Kills `run` at a random moment after its second checkpoint and resumes it with the
    same command; its last checkpoint."""
    with open(os.path.join(os.path.dirname(workdir), "killed.log"), "w") as log:
        process = _start(data, workdir, log, run)
        # Once two checkpoints exist, kill at a random moment of the next `intervals`
        # checkpoint intervals (measured: machines differ several-fold), before the run's
        # end: inside a loop, between loops or while a checkpoint is being written.
        _wait_for(lambda: 10 in _checkpoint_steps(workdir), process)
        first = time.time()
        _wait_for(lambda: 20 in _checkpoint_steps(workdir), process)
        interval = time.time() - first
        delay = random.Random().uniform(0.0, intervals * interval)
        print(f"killed {delay:.2f} s after step 20 (interval {interval:.2f} s)")
        time.sleep(delay)
        process.kill()
        process.wait()
    killed_at = max(_checkpoint_steps(workdir), default=0)
    assert killed_at < STEPS, "the run finished before the kill"

    # The killed run's lock (its pid gone) is taken over: the same command just resumes.
    assert os.path.exists(os.path.join(workdir, "lock.json"))
    result = _run(data, workdir, run)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Resumed from" in result.stderr and "Taking over" in result.stderr
    assert not os.path.exists(os.path.join(workdir, "lock.json"))
    final = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
    assert final.endswith(f"ckpt-{STEPS}")
    return final


@pytest.mark.slow  # tests/training/test_faults.py covers the mid-loop stop in process
def test_sigterm_saves_at_the_next_step_and_exits_0_then_resume_is_exact(
        data, uninterrupted, tmp_path):
    workdir = str(tmp_path / "run")
    log_path = tmp_path / "terminated.log"
    with open(log_path, "w") as log:
        process = _start(data, workdir, log)
        _wait_for(lambda: 10 in _checkpoint_steps(workdir), process)
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=120)
    output = log_path.read_text()
    assert returncode == 0, output[-3000:]
    assert "Stopped by SIGTERM at step" in output
    stopped_at = int(output.split("Stopped by SIGTERM at step ")[1].split("/")[0])
    assert 10 <= stopped_at < STEPS
    # The checkpoint is at the step the loop stopped after, not at a loop boundary.
    assert max(_checkpoint_steps(workdir)) == stopped_at

    result = _run(data, workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ckpt-{stopped_at}" in result.stderr
    _assert_same_checkpoint(
        tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")), uninterrupted)


@pytest.mark.slow  # tests/training/test_faults.py covers the stop and the names in process
def test_nonfinite_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(
        data, tmp_path):
    # A peak learning rate of 1e30 with no warm-up: step 1 makes the weights huge, step
    # 2's LayerNorm overflows. Step 2 is a checkpoint boundary; it must not be saved.
    workdir = str(tmp_path / "run")
    result = subprocess.run(
        helpers.train_command(data, workdir, "--config.train.learning_rate=1e30",
                              "--config.train.warmup_steps=0", "--config.data.eval_files=",
                              "--config.train.checkpoint_every=1",
                              "--config.train.steps_per_loop=5", steps=10),
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "not finite at step 2" in last, last
    assert "ckpt-1" in last and "Traceback" not in result.stderr
    assert _checkpoint_steps(workdir)[-1] == 1


@pytest.mark.slow
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(data, uninterrupted,
                                                                 tmp_path):
    """A half-written checkpoint that the state file does not name is never read; one
    the state file names but that cannot be read (a damaged disk) is reported and the
    one before it restores, and the run retrains to the same weights."""
    workdir = tmp_path / "run"
    shutil.copytree(os.path.dirname(os.path.dirname(uninterrupted)), workdir)
    checkpoints = workdir / "checkpoints"
    assert _checkpoint_steps(str(workdir)) == [50, 60]
    (checkpoints / "ckpt-70.index").write_bytes(b"half-written")  # a crash while saving
    data_file = next(checkpoints.glob("ckpt-60.data-*"))
    data_file.write_bytes(data_file.read_bytes()[:1000])

    result = _run(data, str(workdir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Cannot read checkpoint {checkpoints / 'ckpt-60'}" in result.stderr
    assert f"Resumed from {checkpoints / 'ckpt-50'} at step 50" in result.stderr
    _assert_same_checkpoint(str(checkpoints / "ckpt-60"), uninterrupted)


@pytest.mark.slow  # three training processes; the stream's own test is fast (test_order.py)
def test_a_run_resumed_at_a_forged_billionth_step_continues_exactly(data, tmp_path):
    """Resuming at step 10^9 (16·10^9 records in: re-reading them would take hours) starts
    at once, and a run resumed at 10^9 + 2 ends with the variables of one that went on.

    At 10^9 of 10^9 + 4 steps the decayed learning rate is 0 in float32, so the weights
    stay; the optimizer's moments take every batch's gradients, and they are compared."""
    far = 10**9
    start = str(tmp_path / "start")
    result = subprocess.run(
        helpers.train_command(data, start, *RUN[:1], "--config.train.checkpoint_every=2",
                              steps=2), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    helpers.forge_step(os.path.join(start, "checkpoints"), far)

    def train(workdir):
        result = subprocess.run(
            helpers.train_command(data, workdir, *RUN[:1], "--config.train.checkpoint_every=2",
                                  "--config.train.keep_checkpoints=3", steps=far + 4),
            cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    through = str(tmp_path / "through")
    shutil.copytree(start, through)
    assert f"ckpt-{far}" in train(through).stderr  # resumed at the forged step
    assert _checkpoint_steps(through)[-2:] == [far + 2, far + 4]

    resumed = str(tmp_path / "resumed")
    shutil.copytree(through, resumed)
    checkpoints = os.path.join(resumed, "checkpoints")
    for f in glob.glob(os.path.join(checkpoints, f"ckpt-{far + 4}.*")):
        os.remove(f)
    tf.compat.v1.train.update_checkpoint_state(checkpoints, os.path.join(checkpoints, f"ckpt-{far + 2}"))
    assert f"ckpt-{far + 2}" in train(resumed).stderr

    final = os.path.join(through, "checkpoints", f"ckpt-{far + 4}")
    _assert_same_checkpoint(os.path.join(checkpoints, f"ckpt-{far + 4}"), final)
    # Not vacuous: the four steps moved the optimizer's moments.
    before, after = (_variables(os.path.join(start, "checkpoints", f"ckpt-{far}")),
                     _variables(final))
    moments = [n for n in after if "optimizer" in n and n.endswith("VARIABLE_VALUE")
               and after[n].dtype.kind == "f" and after[n].size > 1]
    assert moments and sum(not np.array_equal(before[n], after[n]) for n in moments) > 10


@pytest.mark.slow  # the lock's own tests are fast (test_workdir.py)
def test_a_second_run_on_a_busy_workdir_refuses_and_the_first_keeps_its_own(first_run):
    """Started a moment after the first with another learning rate, the second run exits
    2 naming the first; the first ends with its own config, checkpoints and events."""
    # first_run checks that the second run exited 2.
    workdir, second = first_run["workdir"], first_run["second"]
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {workdir} is in use by another run "
                           f"(pid {first_run['pid']} ")
    assert "Traceback" not in second.stderr
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["train"]["learning_rate"] == 2e-3  # the tiny config's, not 0.01
    assert _checkpoint_steps(workdir)[-1] == STEPS
    events = glob.glob(os.path.join(workdir, "logs", "train", "events.out.tfevents.*"))
    assert len(events) == 1  # one run wrote the TensorBoard log
    assert not os.path.exists(os.path.join(workdir, "lock.json"))
