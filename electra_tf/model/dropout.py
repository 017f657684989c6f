"""Dropout whose mask comes from a counter-based integer hash instead of Philox.

Profiling ELECTRA-Small on CPU (tools/benchmark.py with --profile_dir) showed the dropout
masks taking ~15% of an XLA training step: TF's stateless RNG (Philox, which Keras'
`Dropout` uses through `tf.nn.experimental.stateless_dropout`) costs ~13 ns per element
on XLA:CPU, and one Small step draws ~64M of them (attention probabilities dominate).
`HashDropout` draws only two 32-bit seeds per call from the layer's `SeedGenerator` and
derives each element's keep/drop bit from a hash of (seed, element index): two rounds of
the murmur3 32-bit finaliser, a handful of integer ops that XLA fuses into the consumer
(~0.1 ns per element). The keep probability is exact to 2^-32; masks are
statistically independent across elements and calls (tests/model/test_dropout.py).
Under a distribution strategy every replica draws the same seeds, so replicas share masks
(on different examples), as with Keras' own `Dropout`.

Everything else is Keras' `Dropout`: same arguments, same `1 / (1 - rate)` scaling, a
no-op outside training. `noise_shape` is not supported (nothing here uses it).

>>> import numpy as np
>>> layer = HashDropout(0.5, seed=1)
>>> out = layer(np.ones((1000,), "float32"), training=True).numpy()
>>> sorted(set(out.tolist())), bool(0.45 < (out > 0).mean() < 0.55)
([0.0, 2.0], True)
>>> layer(np.ones((3,), "float32"), training=False).numpy().tolist()
[1.0, 1.0, 1.0]
"""

import keras
import tensorflow as tf

_MIX1 = 0x85EBCA6B  # murmur3 fmix32 constants
_MIX2 = 0xC2B2AE35
_GOLDEN = 0x9E3779B1


def _fmix32(h):
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))
    h *= tf.constant(_MIX1, tf.uint32)
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(13, tf.uint32)))
    h *= tf.constant(_MIX2, tf.uint32)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))


def random_bits(shape, seed) -> tf.Tensor:
    """uint32 bits of `shape`, a pure function of `seed` (two int32) and the position."""
    index = tf.range(tf.reduce_prod(shape), dtype=tf.int32)
    index = tf.bitcast(tf.reshape(index, shape), tf.uint32)
    seed = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    h = _fmix32(tf.bitwise.bitwise_xor(index * tf.constant(_GOLDEN, tf.uint32), seed[0]))
    return _fmix32(h + seed[1])


@keras.saving.register_keras_serializable(package="electra_tf")
class HashDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a cheap hash-based mask (see the module docstring)."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        if noise_shape is not None:
            raise ValueError("HashDropout does not support `noise_shape`. "
                             f"Received: `noise_shape={noise_shape}`")
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if self.rate >= 1:
            return tf.zeros_like(inputs)
        seed = keras.random.randint([2], -2**31, 2**31 - 1, dtype="int32",
                                    seed=self.seed_generator)
        bits = random_bits(tf.shape(inputs), seed)
        threshold = tf.constant(min(round(self.rate * 2**32), 2**32 - 1), tf.uint32)
        scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return tf.where(bits >= threshold, inputs * scale, tf.zeros_like(inputs))


def use_hash_dropout(layer: keras.layers.Layer) -> int:
    """Turns every plain `keras.layers.Dropout` inside `layer` (e.g. the attention-
    probability, attention-output and feed-forward dropouts of a keras-hub
    `TransformerEncoder`) into a `HashDropout`, in place; returns how many.

    Only the class changes: `HashDropout` adds no state and reads the same `rate` and
    `seed_generator`, so variables, checkpoints and configs' rates are untouched."""
    count = 0
    for sub in layer._flatten_layers(include_self=True):  # pylint: disable=protected-access
        if type(sub) is keras.layers.Dropout:  # pylint: disable=unidiomatic-typecheck
            if sub.noise_shape is not None:
                raise ValueError(f"{sub.path}: HashDropout does not support noise_shape")
            sub.__class__ = HashDropout
            count += 1
    return count
