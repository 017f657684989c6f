"""training/loop.py's `validate`: the checks a pre-training run makes before anything
runs, in one place, which the loop and the comparison tool's plan both call (the loop's
end-to-end behaviour: tests/test_train.py)."""

import os

import pytest

from configs import electra as electra_configs
from electra_tf import errors
from electra_tf.experiments import variants
from electra_tf.training import loop
from tests import helpers


def test_validate_resolves_the_shape_and_names_a_bad_key():
    config = electra_configs.get_config("tiny")
    resolved = loop.validate(config)
    assert resolved.model.hidden_size == 64 and config.model.get("hidden_size", 0) != 64
    for key, value, message in (
            ("train.learning_rate", -1.0, r"config.train.learning_rate=-1.0"),
            ("train.generator", "frozen", r"config.train.generator='frozen' with "
                                          r"config.model.tie='embeddings'"),
            ("train.algorithm", "alternating", r"config.train.algorithm='alternating'"),
            ("model.temperature_schedule", "step", r"temperature_schedule='step'")):
        bad = electra_configs.get_config("tiny")
        section, field = key.split(".")
        bad[section][field] = value
        with pytest.raises(errors.UserError, match=message):
            loop.validate(bad)


def test_the_loop_and_the_plan_validate_through_it(monkeypatch, tmp_path):
    calls = []

    def refusing(config):
        calls.append(config)
        raise errors.UserError("refused")
    monkeypatch.setattr(loop, "validate", refusing)
    workdir = str(tmp_path / "run")
    with pytest.raises(errors.UserError, match="refused"):
        loop.train_and_evaluate(electra_configs.get_config("tiny"), workdir)
    assert len(calls) == 1 and not os.path.exists(workdir)  # nothing written
    vocab = helpers.write_vocab(str(tmp_path))
    with pytest.raises(errors.UserError, match=r"--variant=a:train.seed=1: refused"):
        variants.plan(electra_configs.get_config("tiny"), vocab,
                      variants.expand(specs=["a:train.seed=1", "b:train.seed=2"]))
    assert len(calls) == 2


def test_validate_refuses_each_value_before_the_loop_writes(tmp_path):
    """The checks that need no device are validate's: the loop refuses these before
    it reads data or writes the workdir (the Trainer does not check them again)."""
    for key, value, message in (
            ("train.remat", "all", "config.train.remat='all': choose one of auto, none, "
                                   "selective, blocks"),
            ("train.xla_scope", "everything", "config.train.xla_scope='everything': choose "
                                              "one of auto, whole_step, forward_backward"),
            ("train.vocabulary_padding", "128", "config.train.vocabulary_padding='128': "
                                                "choose one of auto, none, tiles"),
            ("train.accumulation_steps", 0, "config.train.accumulation_steps=0: must be a "
                                            "whole number >= 1"),
            ("train.two_stage_generator_steps", -1,
             "config.train.two_stage_generator_steps=-1: must be a whole number >= 0 (0: "
             "half of train.steps)")):
        bad = electra_configs.get_config("tiny")
        section, field = key.split(".")
        bad[section][field] = value
        if field == "two_stage_generator_steps":
            bad.train.algorithm = "two_stage"
        workdir = str(tmp_path / field)
        with pytest.raises(errors.UserError) as raised:
            loop.train_and_evaluate(bad, workdir)
        assert str(raised.value) == message
        assert not os.path.exists(workdir)


def test_a_config_of_an_earlier_version_validates_as_it_ran():
    """A config.json written before the later keys existed resolves to today's config
    with the defaults those keys have (model.attention_dropout: model.dropout)."""
    from electra_tf import model_config  # pylint: disable=g-import-not-at-top
    config = electra_configs.get_config("tiny")
    config.model.dropout = config.model.attention_dropout = 0.2
    earlier = config.to_dict()
    for key in [*model_config.EARLIER_DEFAULTS, "model.attention_dropout"]:
        section, field = key.split(".")
        del earlier[section][field]
    completed = model_config.complete(earlier)
    assert completed.to_dict() == config.to_dict()
    assert loop.validate(completed).to_dict() == loop.validate(config).to_dict()


def test_validate_checks_the_choices_the_trainer_and_strategy_resolve(tmp_path):
    """The optimizer, mixed precision and strategy named are checked before anything
    is built, against the lists their makers use (`config_check.CHOICES`; a variant
    fails at planning)."""
    for key, value, message in (
            ("train.optimizer", "adamx", "config.train.optimizer='adamx': choose one of "
                                         "adamw, lamb"),
            ("train.mixed_precision", "fp8", "config.train.mixed_precision='fp8': choose "
                                             "one of auto, float32, bfloat16, float16"),
            ("runtime.strategy", "gpu", "config.runtime.strategy='gpu': choose one of "
                                        "auto, tpu, mirrored, multi_worker, one_device")):
        bad = electra_configs.get_config("tiny")
        section, field = key.split(".")
        bad[section][field] = value
        with pytest.raises(errors.UserError) as raised:
            loop.validate(bad)
        assert str(raised.value) == message
    vocab = helpers.write_vocab(str(tmp_path))
    with pytest.raises(errors.UserError, match=r"--variant=a:train.optimizer=adamx: "
                                               r"config.train.optimizer"):
        variants.plan(electra_configs.get_config("tiny"), vocab,
                      variants.expand(specs=["a:train.optimizer=adamx"]))


def test_held_out_data_smaller_than_a_batch_is_refused_before_training(data, tmp_path):
    """At the start, not at the first evaluation (which may come hours later)."""
    config = electra_configs.get_config("tiny")
    config.data.update(train_files=data["train"], eval_files=data["eval"],
                       vocab_file=data["vocab"], max_seq_length=32)
    config.train.update(batch_size=2048, steps=1, jit_compile=False)
    workdir = str(tmp_path / "run")
    with pytest.raises(errors.UserError) as raised:
        loop.train_and_evaluate(config, workdir)
    assert str(raised.value) == ("config.data.eval_files: fewer examples than one global "
                                 "batch (2048)")
    assert not os.path.exists(os.path.join(workdir, "checkpoints"))
