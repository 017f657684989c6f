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
Two sources for the seeds:
- Inside an encoder pass of a training step (the active `context.StepContext`, whose
  `seed` the trainer derives from (run seed, step)), a layer's seed is a stateless
  function of that seed and the layer's `stream` number (`number_streams`), and the
  element index is offset by `block * size` (the context's `block`: which block of
  `size` elements of the global batch this call holds: the replica, or with gradient
  accumulation replica · N + micro-batch), so the mask of every element of
  the GLOBAL batch is a pure function of (run seed, step, layer, position): a resumed
  run draws exactly the masks of an uninterrupted one, and one replica or many draw the
  same masks for the same examples. The global index is 64-bit (a call's `block * size`
  passes 2^32 in ELECTRA-Large's attention probabilities at batch 2048, where a 32-bit
  index would give replicas 0 and 4 of eight the same masks); one call holds under 2^31
  elements.
- Elsewhere (no active context, or one without a seed), two 32-bit seeds per call from
  the layer's `SeedGenerator`, as Keras' `Dropout` would draw (every replica draws the
  same seeds then).

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

from electra_tf import compat
from electra_tf.model import context as context_lib

_MIX1 = 0x85EBCA6B  # murmur3 fmix32 constants
_MIX2 = 0xC2B2AE35
_GOLDEN = 0x9E3779B1
_MIX_HIGH = 0x27D4EB2F  # xxHash32's PRIME32_4: mixes the index's high word


def _fmix32(h):
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))
    h *= tf.constant(_MIX1, tf.uint32)
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(13, tf.uint32)))
    h *= tf.constant(_MIX2, tf.uint32)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(16, tf.uint32)))



def random_bits(shape, seed, offset=0) -> tf.Tensor:
    """uint32 bits of `shape`, a pure function of `seed` (two int32) and the position
    plus `offset` (an int64 below 2^63: the 64-bit element index; at offsets below 2^32
    the bits are those of a 32-bit index)."""
    index = tf.range(tf.reduce_prod(shape), dtype=tf.int32)
    index = tf.bitcast(tf.reshape(index, shape), tf.uint32)
    seed = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    high = None
    if not (isinstance(offset, int) and offset == 0):
        offset = tf.cast(offset, tf.int64)
        low_offset = tf.cast(offset % 2**32, tf.uint32)
        index += low_offset
        # The carry out of the low word: the index's high word, per element.
        high = (tf.cast(offset // 2**32, tf.uint32)
                + tf.cast(index < low_offset, tf.uint32))
    h = _fmix32(tf.bitwise.bitwise_xor(index * tf.constant(_GOLDEN, tf.uint32), seed[0]))
    h += seed[1]
    if high is not None:
        h += high * tf.constant(_MIX_HIGH, tf.uint32)
    return _fmix32(h)


@keras.saving.register_keras_serializable(package="electra_tf")
class HashDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a cheap hash-based mask (see the module docstring)."""

    stream = None  # set by `number_streams`; also for a swapped Dropout (no __init__ ran)

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        if noise_shape is not None:
            raise ValueError("HashDropout does not support `noise_shape`. "
                             f"Received: `noise_shape={noise_shape}`")
        super().__init__(rate, seed=seed, **kwargs)
        self.stream = None  # set by `number_streams`

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if self.rate >= 1:
            return tf.zeros_like(inputs)
        scale = tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return tf.where(self.keep_mask(inputs)(inputs), inputs * scale, tf.zeros_like(inputs))

    def keep_mask(self, inputs):
        """The mask of this call on `inputs`, as a function: `keep(like)`, for a tensor
        `like` of `inputs`' shape, gives the bool mask of the elements kept, the same at
        every call (one draw of the seeds): a backward pass can draw it again instead
        of keeping it (`attention.core`)."""
        if (inputs.shape.num_elements() or 0) >= 2**31:
            raise ValueError(f"{self.path}: HashDropout indexes under 2^31 elements per "
                             f"call; got shape {inputs.shape}")
        context = context_lib.active()
        if context is None or context.seed is None:
            seed = keras.random.randint([2], -2**31, 2**31 - 1, dtype="int32",
                                        seed=self.seed_generator)
            offset = 0
        else:
            if self.stream is None:
                raise ValueError(f"{self.path}: a HashDropout in a seeded step context "
                                 "needs a stream number: call `number_streams(model)` once "
                                 "built")
            step_seed = tf.cast(context.seed, tf.int64)
            seed = tf.random.stateless_uniform(
                [2], tf.random.experimental.stateless_fold_in(step_seed, self.stream,
                                                              alg="philox"),
                minval=None, maxval=None, dtype=tf.int32, alg="philox")
            offset = tf.cast(context.block, tf.int64) * tf.size(inputs, out_type=tf.int64)
        threshold = tf.constant(min(round(self.rate * 2**32), 2**32 - 1), tf.uint32)

        def keep(like):
            # A Shape op, not `tf.shape`'s constant: TF's constant folding before XLA
            # would otherwise compute every dropout's element index on the host and hand
            # it to XLA as a constant (BENCHMARKS.md, "Memory"); from a Shape op XLA gets
            # an iota, which it fuses into the mask.
            return random_bits(compat.unfolded_shape(like), seed, offset) >= threshold
        return keep


def use_hash_dropout(layer: keras.layers.Layer) -> int:
    """Turns every plain `keras.layers.Dropout` inside `layer` (e.g. the attention-
    probability, attention-output and feed-forward dropouts of a keras-hub
    `TransformerEncoder`) into a `HashDropout`, in place; returns how many.

    Only the class changes: `HashDropout` adds no state and reads the same `rate` and
    `seed_generator`, so variables, checkpoints and configs' rates are untouched."""
    count = 0
    for sub in compat.sublayers(layer):
        if type(sub) is keras.layers.Dropout:  # pylint: disable=unidiomatic-typecheck
            if sub.noise_shape is not None:
                raise ValueError(f"{sub.path}: HashDropout does not support noise_shape")
            compat.swap_class(sub, HashDropout)
            count += 1
    return count


def number_streams(model: keras.layers.Layer) -> int:
    """Gives every `HashDropout` in `model` its own `stream` (0, 1, ... in the model's
    layer order, the same in every run); returns how many."""
    count = 0
    for sub in compat.sublayers(model):
        if isinstance(sub, HashDropout):
            sub.stream = count
            count += 1
    return count

