"""Activation recomputation (`config.train.remat`): what the backward pass computes again
instead of keeping it from the forward pass.

- `selective` (the default): the two parts of a block that hold the most memory for the
  least compute (the largest buffers at the step's peak in XLA's buffer assignment;
  BENCHMARKS.md, "Memory"):
  - the feed-forward's `[B, S, F]` tensors (the pre-activation, the exact gelu's
    intermediates, the activation that the second Dense reads). `ActivationFirstDense`
    applies the gelu at the second Dense's input instead of the first's output
    (`prepare`: the same function of the same values) and recomputes it in the backward
    pass: one elementwise pass, and the pre-activation is all that is kept.
  - the attention probabilities, before and after dropout (`[B, heads, S, S]`).
    `SelectiveAttention` recomputes the attention core (QKᵀ, softmax, dropout, ·V) from
    Q, K and V, which are kept anyway, as Megatron-LM's selective recomputation does
    (Korthikanti et al., 2022), and the output projection with it (`OutputProjection`),
    so that the context it reads (`[B, S, H]`) is not kept for its kernel's gradient
    either (two more `[B, heads, S, S]` matmuls per block, ~3% of Small's FLOPs). Only
    with `HashDropout` inside `dropout.seeded`, whose masks are functions of the step,
    not of a state, so the recomputation draws the same masks; elsewhere it keeps them.
  Both go through `tf.recompute_grad`, which makes the recomputation's input depend on
  the incoming gradient: with a plain `tf.custom_gradient` XLA merged the copy with the
  forward's (common subexpressions) or scheduled it in the forward pass, and kept the
  activations after all (XLA's optimization barrier did not stop it).
- `blocks`: each transformer block keeps only its input, and the backward pass runs the
  block again (one more forward pass of the blocks).
- `none`: nothing is recomputed.

Inside `recomputing(mode)` (entered where the training step traces the model, as
`dropout.seeded` is) the layers read the mode; outside it (evaluation, export,
fine-tuning) nothing is recomputed. Forward values are the same in every mode; gradients
the same up to float rounding.

Why not Keras' `RematScope` for `blocks`: on the TensorFlow backend it wraps `call` in
`tf.recompute_grad` with the keyword arguments (`padding_mask`, `training`), which
`tf.custom_gradient` refuses in a `tf.function` ("supports keywords arguments only when
eager execution is enabled"). Here the block's only argument is its input; the mask and
`training` are closed over. The recomputed pass draws the same dropout masks, since
`HashDropout`'s masks are functions of (step seed, layer, position), not of a state
(the recomputation re-enters the `dropout.seeded` context of the forward call).

>>> import numpy as np
>>> import keras_hub
>>> block = keras_hub.layers.TransformerEncoder(intermediate_dim=8, num_heads=2)
>>> block.build((1, 3, 4))
>>> x = np.random.default_rng(0).normal(size=(1, 3, 4)).astype("float32")
>>> before = block(x).numpy()
>>> prepare(block)
>>> parts = compat.encoder_block_parts(block)
>>> type(parts.output_dense).__name__, type(parts.attention.output_dense).__name__
('ActivationFirstDense', 'OutputProjection')
>>> bool(np.allclose(block(x).numpy(), before, atol=1e-6))
True
"""

import contextlib
import threading

import keras
import tensorflow as tf

from electra_tf import compat
from electra_tf.model import dropout as dropout_lib

MODES = ("none", "selective", "blocks")
_MODE = threading.local()


@contextlib.contextmanager
def recomputing(mode: str):
    """Within the block (while tracing), the model recomputes what `mode` says."""
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {', '.join(MODES)}. Received: `mode={mode!r}`")
    previous = _mode()
    _MODE.value = mode
    try:
        yield
    finally:
        _MODE.value = previous


def _mode() -> str:
    return getattr(_MODE, "value", "none")


def prepare(block) -> None:
    """Makes a built keras-hub `TransformerEncoder` recompute selectively, in place: its
    feed-forward's gelu moves to the output Dense (an `ActivationFirstDense`), its
    attention becomes a `SelectiveAttention` with an `OutputProjection`. Only classes and
    where the activation is applied change: variables, checkpoints and the block's
    config are untouched."""
    parts = compat.encoder_block_parts(block)
    first, second, attention = parts.intermediate_dense, parts.output_dense, parts.attention
    if type(second) is not ActivationFirstDense:  # pylint: disable=unidiomatic-typecheck
        if type(second) is not keras.layers.Dense or second.activation not in (  # noqa: E721
                None, keras.activations.linear):
            raise ValueError(f"{block.name}: expected a plain output Dense. Received: "
                             f"`{type(second).__name__}` with {second.activation}")
        compat.swap_class(second, ActivationFirstDense)
        second.input_activation = first.activation
        first.activation = keras.activations.linear
    if type(attention) is keras.layers.MultiHeadAttention:  # noqa: E721
        compat.swap_class(attention, SelectiveAttention)
        projection = attention.output_dense
        if type(projection) is keras.layers.EinsumDense:  # noqa: E721
            compat.swap_class(projection, OutputProjection)


@keras.saving.register_keras_serializable(package="electra_tf")
class ActivationFirstDense(keras.layers.Dense):
    """`keras.layers.Dense` of `input_activation(inputs)`: `activation(x) · W + b`. Under
    `recomputing("selective")` in training its gradient keeps `x` only (the module
    docstring). No activation after, no LoRA, no quantization (the feed-forward's output
    Dense has none of them)."""

    def __init__(self, units, input_activation="gelu", **kwargs):
        super().__init__(units, **kwargs)
        if self.activation not in (None, keras.activations.linear):
            raise ValueError("ActivationFirstDense applies `input_activation` to its inputs "
                             f"and nothing after. Received: `activation={self.activation}`")
        self.input_activation = keras.activations.get(input_activation)

    def call(self, inputs, training=None):
        weights = weights_as_tensors(self)
        if not (training and _mode() == "selective"):
            return self._dense(inputs, *weights)
        # The recomputed matmul's output is unused in the backward pass, and dropped.
        return tf.recompute_grad(self._dense)(inputs, *weights)

    def _dense(self, inputs, kernel, *bias):
        x = keras.ops.matmul(self.input_activation(inputs), kernel)
        return keras.ops.add(x, bias[0]) if bias else x

    def quantize(self, *args, **kwargs):
        raise NotImplementedError("ActivationFirstDense has no quantized path")

    def get_config(self):
        config = super().get_config()
        config.update({"input_activation": keras.activations.serialize(
            self.input_activation)})
        return config


class SelectiveAttention(compat.AttentionCoreHook, keras.layers.MultiHeadAttention):
    """Keras' `MultiHeadAttention` whose attention core (scores, softmax, dropout, ·V)
    and output projection (an `OutputProjection`) are recomputed in the backward pass
    under `recomputing("selective")` in training, with `HashDropout` inside
    `dropout.seeded` (the module docstring); Keras' own core otherwise."""

    def attention_core(self, query, key, value, attention_mask=None, training=None,
                       return_attention_scores=False, use_causal_mask=False):
        seeded_by = dropout_lib.current()
        stateless = self.dropout == 0 or isinstance(compat.attention_dropout(self),
                                                    dropout_lib.HashDropout)
        if (not training or _mode() != "selective" or return_attention_scores
                or use_causal_mask or seeded_by is None or not stateless):
            return self.keras_attention_core(
                query, key, value, attention_mask=attention_mask, training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask)
        parent = self.keras_attention_core
        projection = self.output_dense
        if not (isinstance(projection, OutputProjection) and projection.plain
                and not compat.attention_gated(self)):
            def core(q, k, v):
                return parent(q, k, v, attention_mask=attention_mask, training=training)[0]
            return _recompute(core, seeded_by, query, key, value), None

        # The output projection too, so that its input (the context, [B, S, H]) is not
        # kept for its kernel's gradient either: the recomputed ·V is then used, not
        # dropped (~1% more of Small's FLOPs), and `call` passes the result through the
        # projection untouched.
        def projected_core(q, k, v, kernel, *bias):
            context = parent(q, k, v, attention_mask=attention_mask, training=training)[0]
            return projection.project(context, kernel, *bias)
        output = _recompute(projected_core, seeded_by, query, key, value,
                            *weights_as_tensors(projection))
        projection.pass_through(output)
        return output, None


@keras.saving.register_keras_serializable(package="electra_tf")
class OutputProjection(compat.SkippableInputCheck, keras.layers.EinsumDense):
    """The attention's output `EinsumDense`, which `SelectiveAttention` may apply itself
    inside its recomputed core: it then hands the result to `pass_through`, and the
    next call (`MultiHeadAttention.call` applying the projection) must be given that
    very tensor, and returns it unchanged; any other input then is an error, not a
    silent skip. Otherwise Keras' `EinsumDense`."""

    _projected = None  # the tensor the next call passes through

    def pass_through(self, projected) -> None:
        self._projected = projected

    @property
    def plain(self) -> bool:
        """No activation, LoRA or quantization: `project` is the whole layer."""
        return (self.activation in (None, keras.activations.linear)
                and not self.lora_enabled and not self.quantization_mode)

    def project(self, inputs, kernel, *bias):
        x = keras.ops.einsum(self.equation, inputs, kernel)
        return keras.ops.add(x, bias[0]) if bias else x

    def checks_input(self) -> bool:
        return self._projected is None  # else `call` checks that it is that [B, S, H] tensor

    def call(self, inputs, training=None):
        projected, self._projected = self._projected, None
        if projected is None:
            return super().call(inputs, training=training)
        if inputs is not projected:
            raise ValueError(f"{self.name}: expected the output that the attention "
                             "projected in its recomputed core. Received another tensor: "
                             "Keras' MultiHeadAttention.call no longer applies the "
                             "projection right after `_compute_attention`")
        return inputs


def weights_as_tensors(layer) -> tuple:
    """A `Dense`'s or `EinsumDense`'s kernel (and bias), read as tensors in the compute
    dtype (autocast under a mixed precision policy, inside the layer's call):
    recompute_grad differentiates them like any input."""
    kernel = tf.convert_to_tensor(layer.kernel)
    return (kernel,) if layer.bias is None else (kernel, tf.convert_to_tensor(layer.bias))


def _recompute(fn, seeded_by, *args):
    """`fn(*args)` through `tf.recompute_grad`, the recomputation in the `dropout.seeded`
    context `seeded_by` of the forward call (captured by the caller: the backward pass is
    traced after that context has closed), so that it draws the same masks."""
    def run(*inputs):
        with dropout_lib.seeded(*seeded_by):
            return fn(*inputs)
    return tf.recompute_grad(run)(*args)


def call_block(block, x, padding_mask, training):
    """`block(x, padding_mask=..., training=...)`, recomputed in the backward pass under
    `recomputing("blocks")`, with the same dropout masks (`_recompute`); without a
    `dropout.seeded` context masks would be drawn afresh: an error."""
    if not (training and _mode() == "blocks"):
        return block(x, padding_mask=padding_mask, training=training)
    seeded_by = dropout_lib.current()
    if seeded_by is None:
        raise ValueError(f"{block.name}: recomputing a block in training needs "
                         "`dropout.seeded` (stateless masks), or its dropout would differ")
    return _recompute(lambda inputs: block(inputs, padding_mask=padding_mask,
                                           training=training), seeded_by, x)
