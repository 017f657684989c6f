"""Model sizes: the generator rule, bad inputs, and the paper's parameter counts."""

import numpy as np
import pytest

from electra_tf import errors
from electra_tf.model import pretrainer
from electra_tf.model import sizes


def test_small_generator_is_a_quarter():
    gen = sizes.generator_size(sizes.SIZES["small"], 0.25)
    assert (gen.hidden_size, gen.num_heads, gen.intermediate_size) == (64, 1, 256)
    assert gen.num_layers == 12
    assert gen.embedding_size == 128  # shared with the discriminator


def test_base_generator_is_a_third():
    gen = sizes.generator_size(sizes.SIZES["base"], 1 / 3)
    assert (gen.hidden_size, gen.num_heads, gen.intermediate_size) == (256, 4, 1024)
    assert gen.num_layers == 12
    assert gen.embedding_size == 768


def test_fraction_one_gives_the_discriminator_width():
    small = sizes.SIZES["small"]
    gen = sizes.generator_size(small, 1.0)
    assert gen == small


def test_layer_fraction():
    gen = sizes.generator_size(sizes.SIZES["small"], 0.25, layer_fraction=0.5)
    assert gen.num_layers == 6
    assert gen.hidden_size == 64
    # Never fewer than one layer.
    assert sizes.generator_size(sizes.SIZES["tiny"], 0.5, layer_fraction=0.01).num_layers == 1


@pytest.mark.parametrize("hidden,layers", [(0.0, 1.0), (-0.25, 1.0), (1.5, 1.0),
                                           (0.25, 0.0), (0.25, 1.01), (0.25, -1.0)])
def test_bad_fractions_raise_user_error(hidden, layers):
    with pytest.raises(errors.UserError, match="fraction"):
        sizes.generator_size(sizes.SIZES["small"], hidden, layer_fraction=layers)


def test_get_size():
    assert sizes.get_size("base") is sizes.SIZES["base"]
    with pytest.raises(errors.UserError, match="huge"):
        sizes.get_size("huge")


def test_every_table_fraction_gives_a_valid_generator():
    for name, fraction in sizes.GENERATOR_HIDDEN_FRACTION.items():
        gen = sizes.generator_size(sizes.SIZES[name], fraction)
        assert gen.hidden_size % gen.num_heads == 0, name
        assert gen.intermediate_size == 4 * gen.hidden_size
    # The released ELECTRA-Large generator: 256 units, 4 heads (paper Table 6: 1/4).
    large = sizes.generator_size(sizes.SIZES["large"], sizes.GENERATOR_HIDDEN_FRACTION["large"])
    assert (large.hidden_size, large.num_heads, large.num_layers) == (256, 4, 24)


def test_width_not_divisible_by_heads_is_a_user_error():
    # 1024 / 3 = 341 units would get 5 heads; the encoder could not be built.
    with pytest.raises(errors.UserError, match="341"):
        sizes.generator_size(sizes.SIZES["large"], 1 / 3)


def _discriminator_parameters(name):
    size = sizes.SIZES[name]
    model = pretrainer.ElectraPretrainer(30522, sizes.ModelShape(
        size, sizes.generator_size(size, sizes.GENERATOR_HIDDEN_FRACTION[name])))
    model.build_for(128, 19)
    return sum(int(np.prod(v.shape)) for v in model.discriminator_variables())


@pytest.mark.parametrize("name,expected", [("small", 13.5e6), ("base", 110e6)])
def test_discriminator_parameter_counts_match_the_paper(name, expected):
    count = _discriminator_parameters(name)
    assert abs(count - expected) / expected < 0.02, count
