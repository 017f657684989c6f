"""HashDropout: Keras Dropout's semantics with a hash-based mask, used everywhere."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model import context
from electra_tf.model import dropout
from electra_tf.model import pretrainer
from electra_tf.model import sizes


def masks(layer, shape, calls):
    ones = np.ones(shape, "float32")
    return np.stack([layer(ones, training=True).numpy() > 0 for _ in range(calls)])


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_keep_fraction_and_scale(rate):
    layer = dropout.HashDropout(rate, seed=3)
    out = layer(np.ones((64, 128, 128), "float32"), training=True).numpy()
    n = out.size
    kept = (out > 0).mean()
    # 6 binomial standard deviations: a wrong threshold by 1% of the rate fails.
    assert abs(kept - (1 - rate)) < 6 * np.sqrt(rate * (1 - rate) / n)
    np.testing.assert_allclose(np.unique(out), [0.0, 1 / (1 - rate)], rtol=1e-6)


def test_not_applied_outside_training_and_at_rate_zero():
    x = np.arange(6, dtype="float32")
    np.testing.assert_array_equal(dropout.HashDropout(0.3)(x, training=False), x)
    np.testing.assert_array_equal(dropout.HashDropout(0.0)(x, training=True), x)


def test_masks_are_independent_across_elements_and_calls():
    m = masks(dropout.HashDropout(0.5, seed=0), (256, 256), calls=4).astype("float64")
    centred = m - m.mean()
    def corr(a, b):
        return float((a * b).mean() / np.sqrt((a * a).mean() * (b * b).mean()))
    # Neighbours in a row, in a column, and the same element in successive calls.
    n = m[0].size
    bound = 5 / np.sqrt(n)
    assert abs(corr(centred[0, :, :-1], centred[0, :, 1:])) < bound
    assert abs(corr(centred[0, :-1], centred[0, 1:])) < bound
    for i in range(3):
        assert abs(corr(centred[i], centred[i + 1])) < bound
    assert not np.array_equal(m[0], m[1])


def test_same_seed_same_masks_and_xla_agrees():
    a = masks(dropout.HashDropout(0.1, seed=7), (8, 33), calls=2)
    b = masks(dropout.HashDropout(0.1, seed=7), (8, 33), calls=2)
    np.testing.assert_array_equal(a, b)
    bits = tf.function(dropout.random_bits, jit_compile=True)
    seed = tf.constant([5, -9], tf.int32)
    np.testing.assert_array_equal(bits(tf.constant([8, 33]), seed),
                                  dropout.random_bits(tf.constant([8, 33]), seed))


def test_the_element_index_is_64_bit():
    """ELECTRA-Large's attention probabilities at batch 2048 hold 2^33 elements: a 32-bit
    index made replicas 0 and 4 of eight draw the same masks."""
    seed = tf.constant([5, -9], tf.int32)
    def bits(n, offset):
        return dropout.random_bits(tf.constant([n]), seed, offset).numpy()
    # Below 2^32 an offset only shifts the index, and the bits are the 32-bit index's
    # (masks drawn before the index was 64-bit are unchanged: those bits, pinned).
    np.testing.assert_array_equal(bits(8, 5), bits(13, 0)[5:])
    np.testing.assert_array_equal(
        dropout.random_bits(tf.constant([2, 3]), seed, 7).numpy(),
        np.array([[3955611795, 4225510321, 1344306686],
                  [2562142626, 1290684061, 1875957179]], np.uint32))
    # A call across 2^32 carries into the high word: its halves are the calls on each side.
    np.testing.assert_array_equal(bits(8, 2**32 - 3),
                                  np.concatenate([bits(3, 2**32 - 3), bits(5, 2**32)]))
    # 2^32 and 2^33 on are other bits, not a repeat of 0 on.
    a, b, c = (bits(1 << 16, o).astype("int64") for o in (0, 2**32, 2**33))
    assert len({tuple(a), tuple(b), tuple(c)}) == 3
    for x, y in ((a, b), (a, c), (b, c)):
        agree = np.mean((x >= 2**31) == (y >= 2**31))  # one bit, as a rate-0.5 mask
        assert abs(agree - 0.5) < 5 * 0.5 / np.sqrt(x.size)
    xla = tf.function(dropout.random_bits, jit_compile=True)
    for offset in (2**32 - 3, 2**33 + 7):  # a carry; a high word of 2
        np.testing.assert_array_equal(
            xla(tf.constant([8]), seed, tf.constant(offset, tf.int64)), bits(8, offset))
    # The layer's offset is block · size in 64 bits: block 2^26 of 64 elements is 2^32.
    layer = dropout.HashDropout(0.5)
    layer.stream = 0
    step = context.StepContext.for_step(1, 2, training=True)
    def mask(block):
        with context.entered(step.for_block(block)):
            return layer(np.ones((8, 8), "float32"), training=True).numpy() > 0
    assert not np.array_equal(mask(0), mask(2**26))
    np.testing.assert_array_equal(mask(2**26), mask(2**26))


def test_noise_shape_is_refused():
    with pytest.raises(ValueError, match="noise_shape"):
        dropout.HashDropout(0.1, noise_shape=(1, 4))


def test_every_dropout_of_the_pretrainer_is_a_hash_dropout():
    keras.utils.set_random_seed(0)
    tiny = sizes.SIZES["tiny"]
    model = pretrainer.ElectraPretrainer(
        50, sizes.ModelShape(tiny, sizes.generator_size(tiny, 0.5))).build_for(8, 2)
    layers = model._flatten_layers()  # pylint: disable=protected-access
    found = [layer for layer in layers if isinstance(layer, keras.layers.Dropout)]
    assert found and all(type(layer) is dropout.HashDropout for layer in found)
    # Embeddings 1 + per block: attention probabilities, attention output, feed-forward.
    assert len(found) == 1 + 3 * 2 * tiny.num_layers
    assert {layer.rate for layer in found} == {0.1}
