"""config.model → ModelShape: presets fill defaults, explicit keys win, the resolved
shape is explicit and stable, old configs resolve as they trained, errors name keys."""

import ml_collections
import pytest

from configs import electra as electra_configs  # pylint: disable=g-bad-import-order
from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import sizes


@pytest.mark.parametrize("overrides, message", [
    ({"hidden_size": 96, "num_heads": 5},
     "config.model.hidden_size=96 is not a multiple of config.model.num_heads=5"),
    ({"max_position_embeddings": 16},
     "config.data.max_seq_length=32 is longer than the position table: "
     "config.model.max_position_embeddings=16"),
    ({"tie": "all", "generator_hidden_size": 32},
     "config.model.generator_hidden_size=32: config.model.tie='all' makes the generator "
     "the discriminator's encoder, of hidden_size=64"),
    ({"tie": "both"}, "config.model.tie='both': choose one of none, embeddings, all"),
    ({"generator_hidden_size": 200},  # 3 heads, one per 64 units
     "config.model.generator_hidden_size=200 is not a multiple of the generator's"),
    ({"generator_embedding_size": 16},
     "config.model.generator_embedding_size=16: config.model.tie='embeddings' shares"),
    ({"num_layers": -1}, "config.model.num_layers=-1: must be a whole number >= 0"),
    ({"tie": "all", "tie_embeddings": False}, "config.model.tie_embeddings=False "
     "contradicts config.model.tie='all'"),
])
def test_bad_shapes_are_errors_naming_the_keys(overrides, message):
    config = electra_configs.get_config("tiny")
    config.data.max_seq_length = 32
    config.model.update(overrides)
    with pytest.raises(errors.UserError) as raised:
        model_config.shape(config)
    assert str(raised.value).startswith(message), raised.value


@pytest.mark.parametrize("overrides, generator", [
    ({}, sizes.EncoderSize(64, 12, 1, 256, 128)),
    ({"hidden_size": 512, "num_heads": 8, "tie": "none"},
     sizes.EncoderSize(128, 12, 2, 512, 128)),                # tie=none: E = its hidden
    ({"generator_hidden_fraction": 1.0}, sizes.SIZES["small"]),
    ({"tie": "all"}, sizes.SIZES["small"]),
    ({"generator_hidden_size": 512, "generator_num_layers": 24},  # wider and deeper
     sizes.EncoderSize(512, 24, 8, 2048, 128)),
    ({"tie": "none", "generator_embedding_size": 96, "generator_num_heads": 2},
     sizes.EncoderSize(64, 12, 2, 256, 96)),
    ({"tie_embeddings": False}, sizes.EncoderSize(64, 12, 1, 256, 128)),  # the old spelling
])
def test_the_resolved_shape_is_explicit_and_resolves_to_itself(overrides, generator):
    config = electra_configs.get_config("small")
    config.model.update(overrides)
    shape = model_config.shape(config)
    assert shape.generator == generator
    resolved = model_config.resolve(config)
    assert model_config.shape(resolved) == shape
    assert model_config.shape(model_config.resolve(resolved)) == shape
    assert resolved.model.size == "small"  # the preset named, whatever the shape
    for field, value in vars(shape.generator).items():
        assert resolved.model[f"generator_{field}"] == value


def test_a_config_json_from_before_tie_resolves_as_it_trained():
    """tie_embeddings=False once gave the generator embeddings of the shared width; a
    run's old config.json, and the old command, still resolve to that shape."""
    legacy = electra_configs.get_config("small").to_dict()
    for key in list(legacy["model"]):
        if key.startswith("generator_") and "fraction" not in key or key in (
                "tie", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                "embedding_size", "max_position_embeddings"):
            del legacy["model"][key]
    legacy["model"]["tie_embeddings"] = False
    old = model_config.shape(ml_collections.ConfigDict(legacy))
    assert (old.tie, old.generator.embedding_size, old.max_positions) == ("none", 128, 512)
    command = electra_configs.get_config("small")
    command.model.tie_embeddings = False
    assert model_config.shape(command) == old


def test_config_keys_of_shape_paths():
    assert model_config.config_key("generator.hidden_size") == (
        "config.model.generator_hidden_size")
    assert model_config.config_key("discriminator.num_heads") == "config.model.num_heads"
    assert model_config.config_key("max_positions") == (
        "config.model.max_position_embeddings")
    assert model_config.config_key("tie") == "config.model.tie"


def test_an_earlier_config_json_gets_todays_defaults_for_the_keys_it_lacks():
    """`complete`'s table is configs/electra.py's defaults, for every size, but where the
    default is not what an earlier version ran with (Adam's bias correction, before the
    original's uncorrected update was the paper's sizes' default); a current config is
    complete already."""
    changed = {"train.adam_bias_correction": ("tiny",)}  # sizes whose default is the old
    for size in ("tiny", "small", "base", "large"):
        config = electra_configs.get_config(size)
        for key, value in model_config.EARLIER_DEFAULTS.items():
            section, field = key.split(".")
            same = key not in changed or size in changed[key]
            assert (config[section][field] == value) == same, (size, key)
        assert model_config.complete(config).to_dict() == config.to_dict()


def test_each_size_has_the_papers_pretraining_hyperparameters():
    """Table 6 of the paper: batch, steps, learning rate, generator width and the share
    of tokens masked (25% for Large)."""
    from configs import electra  # pylint: disable=g-import-not-at-top
    for size, expected in {"small": (128, 1_000_000, 5e-4, 0.25, 0.15),
                           "base": (256, 766_000, 2e-4, 1 / 3, 0.15),
                           "large": (2048, 400_000, 2e-4, 0.25, 0.25)}.items():
        config = electra.get_config(size)
        assert (config.train.batch_size, config.train.steps, config.train.learning_rate,
                config.model.generator_hidden_fraction, config.data.mask_prob) == expected
