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
(the recomputation re-enters the `dropout.seeded` context of the forward call).
"""

import contextlib
import threading

import tensorflow as tf

from electra_tf.model import dropout as dropout_lib

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
    `blocks()`. The recomputation runs in the `dropout.seeded` context of the forward
    call (captured here: the backward pass is traced after that context has closed), so
    it draws the same masks; without one, masks would be drawn afresh: an error."""
    if not (training and getattr(_ACTIVE, "value", False)):
        return block(x, padding_mask=padding_mask, training=training)
    seeded_by = dropout_lib.current()
    if seeded_by is None:
        raise ValueError(f"{block.name}: recomputing a block in training needs "
                         "`dropout.seeded` (stateless masks), or its dropout would differ")

    def run(inputs):
        with dropout_lib.seeded(*seeded_by):
            return block(inputs, padding_mask=padding_mask, training=training)
    return tf.recompute_grad(run)(x)
