"""model/activations.py: the original's exact gelu is Keras' exact gelu (values and
gradients, to float rounding), rounds half precision once, and compiles to fewer passes
over the feed-forward's tensors."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model import activations
from tests import helpers


def test_float32_values_and_gradients_are_keras_exact_gelus():
    x = tf.constant(np.linspace(-12.0, 12.0, 48001), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = activations.gelu(x)
        keras_gelu = keras.activations.gelu(x, approximate=False)
    assert ours.dtype == tf.float32
    np.testing.assert_allclose(ours.numpy(), keras_gelu.numpy(), rtol=0, atol=1.5e-6)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(),
                               tape.gradient(keras_gelu, x).numpy(), rtol=0, atol=1e-6)
    sample = np.linspace(-6.0, 6.0, 97)
    np.testing.assert_allclose(activations.gelu(sample.astype("float32")).numpy(),
                               helpers.exact_gelu(sample), rtol=0, atol=1.5e-6)


@pytest.mark.parametrize("dtype, ulp", [(tf.bfloat16, 2.0 ** -8), (tf.float16, 2.0 ** -11)])
def test_half_precision_is_rounded_once(dtype, ulp):
    """Within one rounding of the true value (or 1e-6, float32's own cancellation of
    1 + erf(x) far left, where gelu(x) is ~0), also where 1 + erf(x) cancels in the
    input's precision: the formula computed in bfloat16 is 45% off at x = −3."""
    x = np.linspace(-5.0, 5.0, 81)
    x = tf.cast(x, dtype).numpy().astype(np.float64)  # exactly representable inputs
    ours = activations.gelu(tf.constant(x, dtype))
    assert ours.dtype == dtype
    truth = helpers.exact_gelu(x)
    np.testing.assert_allclose(ours.numpy().astype(np.float64), truth,
                               rtol=ulp, atol=1e-6)
    # The test can tell: the same formula in `dtype` throughout.
    narrow = tf.constant(x, dtype)
    naive = 0.5 * narrow * (1.0 + tf.math.erf(narrow * tf.constant(math.sqrt(0.5), dtype)))
    assert np.max(np.abs(naive.numpy().astype(np.float64) - truth) /
                  np.maximum(np.abs(truth), 1e-30)) > 10 * ulp


def test_fewer_passes_over_the_feed_forward():
    """XLA:CPU's compiled forward and backward of a feed-forward, gelu(x·W₁ + b)·W₂: the
    fusions that read or write an `[N, F]` tensor. Keras' gelu (erfc: an exponential, a
    division, a polynomial each side of |x| = 1) gets one more: the exponential, which
    the gradient shares, in a fusion of its own (5 fusions against 4)."""
    rows, width, inner = 56, 24, 88
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(rows, width)), tf.float32)
    w1 = tf.constant(rng.normal(size=(width, inner)) * 0.2, tf.float32)
    b1 = tf.constant(rng.normal(size=(inner,)) * 0.2, tf.float32)
    w2 = tf.constant(rng.normal(size=(inner, width)) * 0.2, tf.float32)

    def passes(gelu):
        @tf.function(jit_compile=True)
        def step(x, w1, b1, w2):
            with tf.GradientTape() as tape:
                tape.watch([x, w1, b1, w2])
                y = tf.reduce_sum(tf.square(tf.matmul(gelu(tf.matmul(x, w1) + b1), w2)))
            return tape.gradient(y, [x, w1, b1, w2])

        hlo = step.experimental_get_compiler_ir(x, w1, b1, w2)(stage="optimized_hlo")
        return len(helpers.fusions_over(hlo, (rows, inner))), step(x, w1, b1, w2)

    keras_count, keras_grads = passes(lambda v: keras.activations.gelu(v, approximate=False))
    count, grads = passes(activations.gelu)
    for ours, theirs in zip(grads, keras_grads):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
    assert (count, keras_count) == (4, 5), (count, keras_count)
