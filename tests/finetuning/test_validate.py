"""finetuning/loop.py's `validate`: the checks a fine-tuning run makes before anything
runs, in one place, which the loop and the comparison tool (`experiments/compare.py`)
both call (the loop's end-to-end errors: test_finetune.py)."""

import os
import re

import ml_collections
import pytest

from configs import finetune as finetune_configs  # pylint: disable=g-bad-import-order
from electra_tf import errors
from electra_tf import workdir as workdir_lib
from electra_tf.finetuning import loop


def test_validate_returns_a_checked_copy_and_names_a_bad_key():
    config = finetune_configs.get_config("squad2")
    resolved = loop.validate(config)
    assert resolved.to_dict() == config.to_dict() and resolved is not config
    for key, value, message in (
            ("train.batch_size", 0, "config.train.batch_size=0: must be a whole number >= 1"),
            ("data.doc_stride", 0, "config.data.doc_stride=0: must be a whole number >= 1"),
            ("predict_test", True, "config.predict_test: SQuAD's test set is hidden"),
            ("task", "squad3", "config.task='squad3': choose one of"),
            ("runtime.strategy", "gpu", "config.runtime.strategy='gpu': choose one of")):
        bad = finetune_configs.get_config("squad2")
        section, _, field = key.rpartition(".")
        (bad[section] if section else bad)[field] = value
        with pytest.raises(errors.UserError, match=message.replace("(", r"\(")):
            loop.validate(bad)


def test_the_task_fields_a_config_lacks_are_the_tasks_defaults(tmp_path):
    """A config.json of an earlier version lacks the fields a task added later: the
    loop's config and an exported run's (`run_task`) have the task's defaults."""
    config = finetune_configs.get_config("conll2003")
    earlier = config.to_dict()
    del earlier["data"]["stride"], earlier["model"]["label_scheme"]
    assert loop.validate(ml_collections.ConfigDict(earlier)).to_dict() == config.to_dict()
    workdir_lib.write_json(str(tmp_path), workdir_lib.CONFIG, earlier)
    assert loop.run_task(str(tmp_path)).config.to_dict() == config.to_dict()


def test_the_loop_and_the_comparison_validate_through_it(monkeypatch, tmp_path):
    """Each refuses a bad config by `validate` before it writes or pre-trains anything."""
    real, calls = loop.validate, []
    monkeypatch.setattr(loop, "validate", lambda config: calls.append(config) or real(config))
    bad = finetune_configs.get_config("sst2")
    bad.train.batch_size = 0
    workdir = str(tmp_path / "run")
    with pytest.raises(errors.UserError, match="config.train.batch_size=0"):
        loop.finetune(bad, workdir)
    assert len(calls) == 1 and not os.path.exists(workdir)
    from electra_tf.experiments import compare  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop as pretraining  # pylint: disable=g-import-not-at-top
    pretrained = []
    monkeypatch.setattr(pretraining, "train_and_evaluate",
                        lambda config, workdir: pretrained.append(workdir))
    with pytest.raises(errors.UserError, match="config.train.batch_size=0"):
        compare.run([object()], bad, str(tmp_path / "out"), "sst2", None, "a")
    assert len(calls) == 2 and not pretrained  # before any pre-training


def test_a_resume_compares_with_the_runs_completed_config(tmp_path):
    """A field the run's config.json lacks (written before the field existed) had the
    task's default: a resume with another value is refused before anything is read."""
    config = finetune_configs.get_config("conll2003")
    earlier = config.to_dict()
    del earlier["data"]["stride"]  # the run ran with the default, 0
    workdir = str(tmp_path / "run")
    workdir_lib.write_json(workdir, workdir_lib.CONFIG, earlier)
    config.data.stride = 8
    with pytest.raises(errors.UserError, match=r"^config.data.stride=8 differs from the run "
                                               r"in .*run \(0\); resume with the same value"):
        loop.finetune(config, workdir)


def test_a_resume_with_another_schedule_is_refused(tmp_path):
    """The warm-up and decay are rebuilt from the config at every start: another value on
    resume would make the rate jump at the restored step, and config.json misreport the
    run. A rate left to the pre-trained model (0) is compared once filled."""
    saved = finetune_configs.get_config("sst2")
    saved.train.learning_rate, saved.train.layerwise_lr_decay = 1e-3, 0.8  # as filled
    workdir = str(tmp_path / "run")
    workdir_lib.write_json(workdir, workdir_lib.CONFIG, saved.to_dict())
    # The defaults (rates 0) pass on to the pre-trained model, which fills them.
    with pytest.raises(errors.UserError, match="^config.init_checkpoint is empty"):
        loop.finetune(finetune_configs.get_config("sst2"), workdir)
    for key, value in (("epochs", 4.0), ("learning_rate", 5e-4), ("layerwise_lr_decay", 0.9),
                       ("warmup_proportion", 0.2), ("weight_decay", 0.0), ("clip_norm", 0.5)):
        config = finetune_configs.get_config("sst2")
        config.train[key] = value
        with pytest.raises(errors.UserError, match=(
                rf"^config.train.{key}={value} differs from the run in {re.escape(workdir)} "
                rf"\({saved.train[key]}\); resume with the same value or use a new "
                "--workdir$")):
            loop.finetune(config, workdir)
