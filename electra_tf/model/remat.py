"""Activation recomputation (`config.train.remat`): what the backward pass computes again
instead of keeping it from the forward pass.

- `selective` (what `auto` picks on a CPU): the two parts of a block that hold the most
  memory for the least compute (the largest buffers at the step's peak in XLA's buffer
  assignment; BENCHMARKS.md, "Memory"):
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
    with `HashDropout` in a step context with a seed (`model/context.py`), whose masks
    are functions of the step, not of a state, so the recomputation draws the same
    masks; elsewhere it keeps them.
  Both go through `tf.recompute_grad`, which makes the recomputation's input depend on
  the incoming gradient: with a plain `tf.custom_gradient` XLA merged the copy with the
  forward's (common subexpressions) or scheduled it in the forward pass, and kept the
  activations after all (XLA's optimization barrier did not stop it).
- `blocks`: each transformer block keeps only its input, and the backward pass runs the
  block again (one more forward pass of the blocks).
- `none`: nothing is recomputed.
- `auto` (the default; `choose`, resolved once by the trainer): `none` on a GPU or TPU
  whose memory holds what the step keeps with nothing recomputed (`activation_bytes`,
  an estimate from the shape, the batch and the sequence length, with headroom), else
  `selective`; `selective` on CPUs, where it is the fastest and the leanest
  (BENCHMARKS.md, "Memory"). The log line and the benchmark's JSON give the choice and
  the estimate.

The layers read the mode from the active step context (`context.active().remat`,
`model/context.py`: the training step's context, entered by the model around each encoder
pass, which also seeds the dropout masks); with `remat="none"` (evaluation's and the
predictions view's contexts) or without a context (export, fine-tuning) nothing is
recomputed. Forward values are the same in every mode; gradients the same up to float
rounding.

Why not Keras' `RematScope` for `blocks`: on the TensorFlow backend it wraps `call` in
`tf.recompute_grad` with the keyword arguments (`padding_mask`, `training`), which
`tf.custom_gradient` refuses in a `tf.function` ("supports keywords arguments only when
eager execution is enabled"). Here the block's only argument is its input; the mask and
`training` are closed over. The recomputed pass draws the same dropout masks, since
`HashDropout`'s masks are functions of (step seed, layer, position), not of a state
(the recomputation re-enters the step context of the forward call).

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

import math

import keras
import tensorflow as tf

from electra_tf import compat
from electra_tf import config_check
from electra_tf import errors
from electra_tf.model import activations
from electra_tf.model import attention
from electra_tf.model import context as context_lib
from electra_tf.model import dropout as dropout_lib
from electra_tf.model import projection as projection_lib

MODES = context_lib.REMAT_MODES  # a step context's `remat`
CHOICES = config_check.CHOICES["train.remat"]  # auto, then MODES
# `auto` chooses `none` where the estimate takes at most this share of what the weights
# and optimizer state leave of the device's memory: XLA's temporaries, the allocator's
# fragmentation and the input pipeline's buffers need the rest.
HEADROOM = 0.6


def check_remat(mode: str) -> None:
    """A one-line `UserError` unless `config.train.remat` (`mode`) is one of `CHOICES`
    (the trainer calls it before `choose`; the pre-training `validate` checks the list in
    `config_check` first)."""
    errors.check_choice("config.train.remat", mode, CHOICES)


def _mode() -> str:
    """The active step context's recomputation mode; `none` without one."""
    context = context_lib.active()
    return "none" if context is None else context.remat


def activation_bytes(encoders, batch: int, seq_len: int, value_bytes: int,
                     logits: int = 0) -> int:
    """What one replica's step keeps for the backward pass with nothing recomputed, in
    bytes: per block of each encoder in `encoders` (`EncoderSize`s), Korthikanti et al.
    (2022)'s count per sequence, with the feed-forward's width F in place of 4H:
    S·(9H + 2F) values (the blocks' inputs, Q, K, V, the context, the feed-forward's two
    [S, F] tensors, the LayerNorms' inputs) and S²·heads·2 values (the attention
    probabilities before and after dropout), plus a byte per dropout mask element
    (S·H·2 + S²·heads); then `logits` float32 values (the vocabulary projections' logits
    and their softmax, `[B, P, V]` each) once.

    >>> from electra_tf.model import sizes
    >>> round(activation_bytes([sizes.SIZES["base"]], 32, 512, 2) / 2**30, 1)  # GiB
    10.7
    """
    total = 0
    for size in encoders:
        h, f, heads = size.hidden_size, size.intermediate_size, size.num_heads
        values = seq_len * (9 * h + 2 * f) + 2 * seq_len**2 * heads
        masks = 2 * seq_len * h + seq_len**2 * heads
        total += size.num_layers * batch * (values * value_bytes + masks)
    return total + 4 * logits


def choose(mode: str, device_kind: str, memory_bytes: int | None, activations: int,
           state_bytes: int) -> tuple[str, str]:
    """(the recomputation to run, why) for `config.train.remat=mode` on a replica of
    `device_kind` ('cpu', 'gpu' or 'tpu') with `memory_bytes` of memory (None: unknown),
    whose step keeps `activations` bytes with nothing recomputed (`activation_bytes`)
    beside `state_bytes` of weights, gradients and optimizer state. A mode other than
    `auto` is kept as given.

    >>> choose("auto", "gpu", 80 * 2**30, 10 * 2**30, 2**30)[0]
    'none'
    >>> choose("auto", "cpu", None, 10 * 2**30, 2**30)[0]
    'selective'
    """
    errors.check_choice("mode", mode, CHOICES, ValueError)
    if mode != "auto":
        return mode, "as configured"
    estimate = f"activations ~{_size(activations)} estimated"
    if device_kind not in ("gpu", "tpu"):
        return "selective", (f"auto on a {device_kind.upper()}: selective is the fastest "
                             f"and the leanest there ({estimate})")
    if memory_bytes is None:
        return "selective", f"auto: the {device_kind.upper()}'s memory is unknown ({estimate})"
    room = HEADROOM * (memory_bytes - state_bytes)
    verdict = "fit" if activations <= room else "do not fit"
    chosen = "none" if activations <= room else "selective"
    return chosen, (f"auto: {estimate} {verdict} in {HEADROOM:.0%} of the "
                    f"{device_kind.upper()}'s {_size(memory_bytes)} less "
                    f"{_size(state_bytes)} of weights and optimizer state")


def _size(num_bytes: int) -> str:
    return (f"{num_bytes / 2**30:.1f} GiB" if num_bytes >= 2**30
            else f"{num_bytes / 2**20:.1f} MiB")


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
        if type(projection) in (keras.layers.EinsumDense,  # noqa: E721
                                projection_lib.FlatEinsumDense):
            compat.swap_class(projection, OutputProjection)


@keras.saving.register_keras_serializable(package="electra_tf")
class ActivationFirstDense(keras.layers.Dense):
    """`keras.layers.Dense` of `input_activation(inputs)`: `activation(x) · W + b`. Under
    a step context's `remat="selective"` in training its gradient keeps `x` only (the module
    docstring). No activation after, no LoRA, no quantization (the feed-forward's output
    Dense has none of them)."""

    def __init__(self, units, input_activation=activations.gelu, **kwargs):
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
    """Keras' `MultiHeadAttention` with our attention core (`attention.core`: fewer
    passes over `[B, heads, S, S]`, the same function), whose core and output projection
    (an `OutputProjection`) are recomputed in the backward pass under
    a step context's `remat="selective"` in training, with `HashDropout` and the
    context's seed (the module docstring). Keras' own core where ours does not apply (attention scores
    returned, a causal mask, Keras' stateful `Dropout`, other attention axes)."""

    def attention_core(self, query, key, value, attention_mask=None, training=None,
                       return_attention_scores=False, use_causal_mask=False):
        dropout = compat.attention_dropout(self)
        hashed = isinstance(dropout, dropout_lib.HashDropout)
        if (return_attention_scores or use_causal_mask or len(query.shape) != 4
                or tuple(self.attention_axes) != (1,)
                or not (self.dropout == 0 or hashed) or dropout.rate >= 1):
            return self.keras_attention_core(
                query, key, value, attention_mask=attention_mask, training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask)

        def parent(q, k, v):
            return self.core(q, k, v, attention_mask, training)

        captured = context_lib.active()
        if (not training or captured is None or captured.remat != "selective"
                or captured.seed is None):
            return parent(query, key, value), None
        projection = self.output_dense
        if not (isinstance(projection, OutputProjection) and projection.plain
                and not compat.attention_gated(self)):
            return _recompute(parent, captured, query, key, value), None

        # The output projection too, so that its input (the context, [B, S, H]) is not
        # kept for its kernel's gradient either: the recomputed ·V is then used, not
        # dropped (~1% more of Small's FLOPs), and `call` passes the result through the
        # projection untouched.
        def projected_core(q, k, v, kernel, *bias):
            return projection.project(parent(q, k, v), kernel, *bias)
        output = _recompute(projected_core, captured, query, key, value,
                            *weights_as_tensors(projection))
        projection.pass_through(output)
        return output, None


    def core(self, query, key, value, attention_mask, training):
        """The context `[B, T, heads, head]`: `attention.core` with this layer's scale
        and dropout."""
        dropout = compat.attention_dropout(self)
        return attention.core(
            query, key, value, attention_mask, scale=1.0 / math.sqrt(self.key_dim),
            dropout=dropout if isinstance(dropout, dropout_lib.HashDropout) else None,
            training=training)


@keras.saving.register_keras_serializable(package="electra_tf")
class OutputProjection(compat.SkippableInputCheck, projection_lib.FlatEinsumDense):
    """The attention's output `EinsumDense`, which `SelectiveAttention` may apply itself
    inside its recomputed core: it then hands the result to `pass_through`, and the
    next call (`MultiHeadAttention.call` applying the projection) must be given that
    very tensor, and returns it unchanged; any other input then is an error, not a
    silent skip. Otherwise a `FlatEinsumDense` (`model/projection.py`)."""

    _projected = None  # the tensor the next call passes through

    def pass_through(self, projected) -> None:
        self._projected = projected

    @property
    def plain(self) -> bool:
        """No activation, LoRA or quantization: `project` is the whole layer."""
        return (self.activation in (None, keras.activations.linear)
                and not self.lora_enabled and not self.quantization_mode)

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


def _recompute(fn, captured, *args):
    """`fn(*args)` through `tf.recompute_grad`, the recomputation in the step context
    `captured` of the forward call (captured by the caller: the backward pass is traced
    after that context has closed), so that it draws the same masks."""
    def run(*inputs):
        with context_lib.entered(captured):
            return fn(*inputs)
    return tf.recompute_grad(run)(*args)


def call_block(block, x, padding_mask, training):
    """`block(x, padding_mask=..., training=...)`, recomputed in the backward pass under
    a step context's `remat="blocks"`, with the same dropout masks (`_recompute`);
    without the context's seed masks would be drawn afresh: an error."""
    if not (training and _mode() == "blocks"):
        return block(x, padding_mask=padding_mask, training=training)
    captured = context_lib.active()
    if captured.seed is None:
        raise ValueError(f"{block.name}: recomputing a block in training needs a step "
                         "context's seed (stateless masks), or its dropout would differ")
    return _recompute(lambda inputs: block(inputs, padding_mask=padding_mask,
                                           training=training), captured, x)
