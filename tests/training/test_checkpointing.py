"""Restoring the newest readable checkpoint (pre-training and fine-tuning alike), what a
pre-training checkpoint holds, a converted (model-only) checkpoint's restore, and the
resume checks against an earlier version's config.json. The run-identity checks are
exercised through the binary in tests/test_train.py and
tests/test_objectives_cli.py; a damaged checkpoint in a real run in
tests/test_reliability.py."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from electra_tf import errors
from electra_tf.data import pipeline
from electra_tf.training import algorithms
from electra_tf.training import checkpointing


class _Run:
    """What `restore` reads of a Trainer: step, model, optimizer, algorithm."""

    def __init__(self, weights=(0.0, 0.0), moment=0.0):
        self.step = tf.Variable(0, dtype=tf.int64)
        self.model = tf.Module()
        self.model.kernel = tf.Variable(weights)
        self.optimizer = tf.Module()
        self.optimizer.moment = tf.Variable(moment)
        self.algorithm = algorithms.joint.Joint(None)


def _save(directory, steps):
    """Checkpoints at `steps`, the weights [step, -step] and moment step at each."""
    run = _Run()
    manager = tf.train.CheckpointManager(checkpointing.checkpoint_of(run), directory,
                                         max_to_keep=None, step_counter=run.step)
    for step in steps:
        run.step.assign(step)
        run.model.kernel.assign([step, -step])
        run.optimizer.moment.assign(step)
        manager.save(checkpoint_number=step)


def _damage(directory, step):
    (data,) = glob.glob(os.path.join(directory, f"ckpt-{step}.data-*"))
    with open(data, "r+b") as f:
        f.truncate(3)


def test_a_checkpoint_holds_step_model_optimizer_by_those_names(tmp_path):
    """The names are the format: checkpoints of every earlier version restore by them."""
    _save(str(tmp_path), [1])
    saved = {name.split("/")[0] for name, _ in
             tf.train.list_variables(str(tmp_path / "ckpt-1"))}
    assert {"step", "model", "optimizer"} <= saved


def test_the_newest_readable_checkpoint_is_restored_past_a_damaged_one(tmp_path, caplog):
    directory = str(tmp_path)
    _save(directory, [1, 2, 3])
    _damage(directory, 3)
    run = _Run()
    path = checkpointing.restore(run, checkpointing.checkpoint_of(run), directory)
    assert path == os.path.join(directory, "ckpt-2")
    assert int(run.step.numpy()) == 2 and float(run.optimizer.moment.numpy()) == 2.0
    np.testing.assert_array_equal(run.model.kernel.numpy(), [2.0, -2.0])
    assert any(r.getMessage().startswith(f"Cannot read checkpoint {directory}/ckpt-3")
               for r in caplog.records), caplog.text
    # Listed no more (its files stay): a manager made now, as TF's multi-worker
    # preemption handler is given, restores ckpt-2 rather than the damaged one.
    checkpointing.forget_newer(directory, path)
    assert checkpointing.listed_checkpoints(directory) == [
        os.path.join(directory, f"ckpt-{step}") for step in (1, 2)]
    assert glob.glob(os.path.join(directory, "ckpt-3.*"))
    run = _Run()
    manager = tf.train.CheckpointManager(checkpointing.checkpoint_of(run), directory,
                                         max_to_keep=None)
    assert manager.restore_or_initialize() == path and int(run.step.numpy()) == 2


def test_a_relative_directory_restores_and_is_rewritten_relative(tmp_path, monkeypatch):
    """`--workdir=runs/x`: TF joins the state file's entries to the directory it is
    given; they are not joined again. The state file forget_newer writes stays
    relative, as CheckpointManager's: the run can move."""
    monkeypatch.chdir(tmp_path)
    directory = os.path.join("runs", "x", "checkpoints")
    _save(directory, [1, 2, 3])
    _damage(directory, 3)
    assert checkpointing.listed_checkpoints(directory) == [
        str(tmp_path / directory / f"ckpt-{step}") for step in (1, 2, 3)]
    run = _Run()
    path = checkpointing.restore(run, checkpointing.checkpoint_of(run), directory)
    assert path == str(tmp_path / directory / "ckpt-2")
    checkpointing.forget_newer(directory, path)
    with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
        assert f.read().splitlines()[:3] == [
            'model_checkpoint_path: "ckpt-2"', 'all_model_checkpoint_paths: "ckpt-1"',
            'all_model_checkpoint_paths: "ckpt-2"']
    moved = tmp_path / "moved"
    os.rename(tmp_path / "runs", moved)
    assert checkpointing.listed_checkpoints(str(moved / "x" / "checkpoints"))[-1] == str(
        moved / "x" / "checkpoints" / "ckpt-2")


def test_restore_newest_any_checkpoint(tmp_path):
    """What fine-tuning calls: any `tf.train.Checkpoint`, restored by the caller's
    function; none at all is (None, None); none readable is one RunError line."""
    directory = str(tmp_path)
    assert checkpointing.restore_newest(directory, lambda path: 1 / 0) == (None, None)
    _save(directory, [4, 5])
    run = _Run()
    checkpoint = tf.train.Checkpoint(step=run.step, model=run.model,
                                     optimizer=run.optimizer)
    _damage(directory, 5)
    path, _ = checkpointing.restore_newest(
        directory, lambda p: checkpoint.restore(p).assert_existing_objects_matched())
    assert path.endswith("ckpt-4") and int(run.step.numpy()) == 4
    _damage(directory, 4)
    with pytest.raises(errors.RunError, match=r"^none of the checkpoints in .* can be "
                       r"read \(ckpt-4, ckpt-5\)$"):
        checkpointing.restore_newest(
            directory, lambda p: checkpoint.restore(p).assert_existing_objects_matched())


def test_checkpoints_on_a_url_file_system_restore():
    """gs:// (a TPU run's workdir) as TF's `ram://` stands for it: the state file names
    ram://…/ckpt-N, which os.path.isabs calls relative; it must not be joined again."""
    directory = f"ram://checkpointing_test_{os.getpid()}/checkpoints"
    _save(directory, [1, 2])
    run = _Run()
    path = checkpointing.restore(run, checkpointing.checkpoint_of(run), directory)
    assert path == f"{directory}/ckpt-2" and int(run.step.numpy()) == 2
    np.testing.assert_array_equal(run.model.kernel.numpy(), [2.0, -2.0])
    # Falling back to ckpt-1 (as past a damaged ckpt-2) lists it relative, as locally.
    checkpointing.forget_newer(directory, f"{directory}/ckpt-1")
    with tf.io.gfile.GFile(f"{directory}/checkpoint") as f:
        assert f.read().splitlines()[:2] == ['model_checkpoint_path: "ckpt-1"',
                                             'all_model_checkpoint_paths: "ckpt-1"']
    assert checkpointing.listed_checkpoints(directory) == [f"{directory}/ckpt-1"]
    tf.io.gfile.rmtree(os.path.dirname(directory))


def test_a_converted_checkpoint_restores_the_model_and_keeps_a_fresh_optimizer(tmp_path):
    directory = str(tmp_path)
    converted = _Run(weights=(7.0, 8.0))
    tf.train.Checkpoint(step=converted.step, model=converted.model).save(
        os.path.join(directory, "ckpt"))
    run = _Run(moment=0.5)
    assert checkpointing.restore(run, checkpointing.checkpoint_of(run), directory)
    np.testing.assert_array_equal(run.model.kernel.numpy(), [7.0, 8.0])
    assert float(run.optimizer.moment.numpy()) == 0.5  # untouched: a new optimizer


def test_no_checkpoint_starts_from_step_0(tmp_path):
    run = _Run()
    assert checkpointing.restore(run, checkpointing.checkpoint_of(run), str(tmp_path)) is None
    assert int(run.step.numpy()) == 0


def test_a_resume_is_checked_against_the_runs_completed_config(tmp_path):
    """A trained run's config.json of an earlier version (lacking the later keys) resumes
    with the values that version ran with; another batch size, seed, optimizer (AdamW's
    and LAMB's slots have the same names), masking (a Large run of an earlier version
    masked 15%) or Adam update (an earlier run's was bias-corrected) is refused."""
    from configs import electra as electra_configs  # pylint: disable=g-import-not-at-top
    from electra_tf import model_config  # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    config = loop.validate(electra_configs.get_config("tiny"))
    earlier = config.to_dict()
    for key in model_config.EARLIER_DEFAULTS:
        section, field = key.split(".")
        earlier[section].pop(field, None)
    workdir = str(tmp_path / "run")
    workdir_lib.write_json(workdir, workdir_lib.CONFIG, earlier)
    _save(workdir_lib.checkpoints(workdir), [5])
    checkpointing.check_same_run(config, workdir, vocab=None)
    # A LAMB run has no bias-correction option to keep: not refused over it.
    lamb = loop.validate(config)
    lamb.train.optimizer, lamb.train.adam_bias_correction = "lamb", False
    lamb_run = str(tmp_path / "lamb")
    workdir_lib.write_json(lamb_run, workdir_lib.CONFIG, dict(earlier, train={
        **earlier["train"], "optimizer": "lamb"}))
    _save(workdir_lib.checkpoints(lamb_run), [5])
    checkpointing.check_same_run(lamb, lamb_run, vocab=None)
    for key, value in (("train.batch_size", 3), ("train.seed", 7), ("train.optimizer", "lamb"),
                       ("train.adam_bias_correction", False), ("data.mask_prob", 0.25),
                       ("data.whole_word_masking", True)):
        changed = loop.validate(config)
        section, field = key.split(".")
        changed[section][field] = value
        with pytest.raises(errors.UserError, match=rf"^config.{key}={value!r}, but the run in "
                                                   r".*run was started with"):
            checkpointing.check_same_run(changed, workdir, vocab=None)
    # A fine-tuning run's workdir is named as such, not the config given.
    tuned = str(tmp_path / "tuned")
    workdir_lib.write_json(tuned, workdir_lib.CONFIG, {"task": "sst2", "model": {}})
    with pytest.raises(errors.UserError, match=rf"^{tuned} holds a fine-tuning run \({tuned}"
                                               r"/config.json has no model.size\)"):
        checkpointing.check_same_run(config, tuned, vocab=None)


def test_a_run_whose_newest_checkpoint_is_gone_is_still_a_trained_run(tmp_path):
    """tf.train.latest_checkpoint says None where the newest checkpoint's files are gone,
    but restore goes on to the one before it: the checks of a trained run still hold."""
    from configs import electra as electra_configs  # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    config = loop.validate(electra_configs.get_config("tiny"))
    run = str(tmp_path / "run")
    workdir_lib.write_json(run, workdir_lib.CONFIG, config.to_dict())
    _save(workdir_lib.checkpoints(run), [3, 5])
    for name in os.listdir(workdir_lib.checkpoints(run)):
        if name.startswith("ckpt-5."):
            os.remove(os.path.join(workdir_lib.checkpoints(run), name))
    assert workdir_lib.latest_checkpoint(run) is None
    changed = loop.validate(config)
    changed.train.batch_size = 3
    with pytest.raises(errors.UserError, match=r"^config.train.batch_size=3, but the run"):
        checkpointing.check_same_run(changed, run, vocab=None)


def test_a_resume_on_other_hosts_is_said(tmp_path, caplog):
    """The data stream continues exactly only on the hosts that trained the checkpoint
    restored: another host count changes what each host reads (another replica count
    alone changes nothing: tests/data/test_pipeline.py). That layout is the one of the start that saved the checkpoint, not the
    last start's (which may have crashed before saving), and not the newest
    checkpoint's where an older one is restored (the newest damaged)."""
    from configs import electra as electra_configs  # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    config = loop.validate(electra_configs.get_config("tiny"))
    one, two_hosts = {"input_pipelines": 1, "replicas": 2}, {"input_pipelines": 2,
                                                             "replicas": 2}
    four = {"input_pipelines": 1, "replicas": 4}
    run = str(tmp_path / "run")

    def saved():
        return workdir_lib.read_json(run, workdir_lib.CONFIG) or {}

    def start(step, layout):
        """What the loop writes at a start at `step` on `layout`."""
        history = checkpointing.layouts(saved(), step, layout)
        workdir_lib.write_json(run, workdir_lib.CONFIG, {**config.to_dict(),
                                                         "layouts": history})
        return history

    def said(layout, step):
        caplog.clear()
        with caplog.at_level("WARNING"):
            checkpointing.warn_if_other_layout(run, saved(), layout, step,
                                               f"{run}/ckpt-{step}")
        return caplog.text
    workdir_lib.write_json(run, workdir_lib.CONFIG, config.to_dict())  # an earlier version's
    assert "trained" not in said(four, 5)  # it recorded no layout
    assert start(5, one) == [[5, one]]
    assert "trained" not in said(four, 5)  # ckpt-5 is older than every recorded start
    assert start(0, one) == [[0, one]]  # (a fresh run's)
    assert "trained" not in said(one, 5)
    assert "trained" not in said(four, 5)  # other replicas alone continue exactly
    text = said(two_hosts, 5)
    assert ("trained ckpt-5 with 1 input pipeline(s) (hosts) and 2 replica(s) and goes on "
            "with 2 and 2" in text and "some examples are read again" in text)
    # A start on two hosts that saves nothing before it stops: ckpt-5 is still one's.
    assert start(5, two_hosts) == [[0, one], [5, two_hosts]]
    assert "trained" not in said(one, 5)
    assert start(5, one) == [[0, one]]
    # Two hosts from 5 on: their ckpt-9 is theirs; ckpt-5, restored if ckpt-9 is
    # damaged, is still one's.
    start(5, two_hosts)
    assert "trained ckpt-9 with 2 input pipeline(s)" in said(one, 9)
    assert "trained" not in said(one, 5) and "trained ckpt-5 with 1" in said(two_hosts, 5)


def test_a_run_begun_by_a_version_that_masked_per_replica_is_told(caplog):
    """Its masks differ from here on only where it had several replicas per host (as
    recorded; else as this start has)."""
    one, two = ({"input_pipelines": 1, "replicas": n} for n in (1, 2))

    def said(saved, layout, step=5):
        caplog.clear()
        with caplog.at_level("WARNING"):
            checkpointing.warn_if_older_masks("run", saved, layout, step, "run/ckpt-5")
        return "masked each replica's batch on its own" in caplog.text

    assert said({}, two) and not said({}, one)  # no layout recorded: this start's
    assert said({"layouts": [[0, two]]}, one) and not said({"layouts": [[0, one]]}, two)
    assert not said({"data_masks": pipeline.MASKS}, two)  # this version's
    assert not said({}, two, step=0)  # a converted checkpoint: nothing trained on masks
