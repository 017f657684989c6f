"""Activation recomputation of the transformer blocks (`config.train.remat=blocks`).

Inside `blocks()` (entered where the training step traces the model, as `dropout.seeded`
is), `Encoder` runs each transformer block through `tf.recompute_grad`: the forward pass
keeps only the block's input, and the backward pass runs the block again to get what its
gradient needs. A block's activations (Q, K, V, the `[B, heads, S, S]` attention
probabilities, the FFN's `[B, S, F]` GELU input and output) then live for one block at a
time instead of all of them at once, for one more forward pass of the blocks.

Why not Keras' `RematScope`: on the TensorFlow backend it wraps `call` in
`tf.recompute_grad` with the keyword arguments (`padding_mask`, `training`), which
`tf.custom_gradient` refuses in a `tf.function` ("supports keywords arguments only when
eager execution is enabled"). Here the block's only argument is its input; the mask and
`training` are closed over. The recomputed pass draws the same dropout masks, since
`HashDropout`'s masks are functions of (step seed, layer, position), not of a state
(the gradient must be taken inside `dropout.seeded`, which the trainer does).
"""

import contextlib
import threading

import tensorflow as tf

_ACTIVE = threading.local()


@contextlib.contextmanager
def blocks(enabled: bool = True):
    """Within the block (while tracing), `Encoder`s recompute their transformer blocks."""
    previous = getattr(_ACTIVE, "value", False)
    _ACTIVE.value = enabled
    try:
        yield
    finally:
        _ACTIVE.value = previous


def call_block(block, x, padding_mask, training):
    """`block(x, padding_mask=..., training=...)`, recomputed in the backward pass inside
    `blocks()`."""
    if not (training and getattr(_ACTIVE, "value", False)):
        return block(x, padding_mask=padding_mask, training=training)
    return tf.recompute_grad(
        lambda inputs: block(inputs, padding_mask=padding_mask, training=training))(x)
