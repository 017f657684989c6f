"""The exact gelu, written as the original ELECTRA writes it:
gelu(x) = x · Φ(x) = ½ · x · (1 + erf(x / √2)).

Keras' exact gelu on TensorFlow is `tf.nn.gelu(approximate=False)`, which writes Φ with
erfc instead: ½ · x · erfc(−x / √2). The two are one function: in float32 they differ by
at most ~1e-6 for any x (far left, x < −4, where gelu is ~0, 1 + erf cancels and keeps
only its absolute precision). XLA compiles them differently: erfc expands into an
exponential, a division and a polynomial for each side of |x| = 1, and XLA:CPU gives
the exponential (which the gradient shares) a fusion of its own: one more pass over the
feed-forward's `[B, S, F]` pre-activation, and more arithmetic per element in the others.
erf is one rational polynomial. The training step of Small (batch 32, seq 128, CPU)
compiles 48 fusions over `[B, S, F]` tensors with this gelu against 60 with Keras' (one
fewer for each of the discriminator's 12 blocks), and its profile's events over those
tensors other than the matmuls take 16% less time (docs/benchmark-log.md, "The gelu as
the original writes it"). On an accelerator, where such fusions are bound by memory, a
pass fewer should count for more; that is not measured yet.

Half-precision inputs are computed in float32 and rounded once: in bfloat16, 1 + erf(x)
for negative x would cancel to a few bits (erf(−2.1) rounds to −0.996 or −1, so gelu(−3)
would be 45% off), and XLA computes erf in float32 anyway.

>>> import numpy as np
>>> x = np.array([-3.0, -1.0, 0.0, 1.0, 3.0], "float32")
>>> [round(float(v), 5) for v in gelu(x)]
[-0.00405, -0.15866, 0.0, 0.84134, 2.99595]
>>> bool(np.allclose(gelu(x), keras.activations.gelu(x, approximate=False), atol=1e-6))
True
"""

import math

import keras
import tensorflow as tf

_SQRT_HALF = 1.0 / math.sqrt(2.0)


@keras.saving.register_keras_serializable(package="electra_tf")
def gelu(x):
    """The exact gelu, ½ · x · (1 + erf(x / √2)), of `x` (the module docstring); the
    result has `x`'s dtype."""
    x = tf.convert_to_tensor(x)
    wide = tf.cast(x, tf.float32) if x.dtype in (tf.bfloat16, tf.float16) else x
    return tf.cast(0.5 * wide * (1.0 + tf.math.erf(wide * _SQRT_HALF)), x.dtype)
