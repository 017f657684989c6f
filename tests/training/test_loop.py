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
