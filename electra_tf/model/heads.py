"""Output heads: the generator's masked-LM head and the discriminator's RTD head.

>>> import numpy as np
>>> from electra_tf.model import encoder
>>> embeddings = encoder.Embeddings(vocabulary_size=10, embedding_size=8)
>>> embeddings.build((1, 4))
>>> mlm = masked_lm_head(embeddings)
>>> mlm(np.zeros((1, 4, 16), "float32"), mask_positions=np.array([[1, 2]])).shape
TensorShape([1, 2, 10])
>>> ReplacedTokenHead(hidden_size=16)(np.zeros((1, 4, 16), "float32")).shape
TensorShape([1, 4])
"""

import keras
import keras_hub
import tensorflow as tf

from electra_tf import compat
from electra_tf import config_check
from electra_tf import errors
from electra_tf.model import activations
from electra_tf.model import encoder


# The projection onto the vocabulary multiplies by a table padded with zero rows to a
# multiple of this: matrix units (tensor cores, TPUs' MXUs) and their libraries' kernels
# run whole tiles, and 30,522 tokens is none (the H200 profile's three slow float32
# GEMMs, BENCHMARKS.md "GPU"). A CPU's GEMMs have no such tiles: there the training step
# runs unpadded (`padding_multiple`, config.train.vocabulary_padding=auto).
VOCABULARY_MULTIPLE = 128
PADDINGS = config_check.CHOICES["train.vocabulary_padding"]


def padded_vocabulary(vocabulary_size: int, multiple: int = VOCABULARY_MULTIPLE) -> int:
    """`vocabulary_size` rounded up to a multiple of `multiple`.

    >>> padded_vocabulary(30522), padded_vocabulary(30522, multiple=1)
    (30592, 30522)
    """
    return -(-vocabulary_size // multiple) * multiple


def padding_multiple(mode: str, device_kind: str) -> tuple[int, str]:
    """(the multiple the projection onto the vocabulary is padded to, why) for
    config.train.vocabulary_padding=`mode` on `device_kind` ('cpu', 'gpu' or 'tpu'):
    `tiles` pads to `VOCABULARY_MULTIPLE`, `none` not at all, `auto` pads on a GPU or
    TPU and not on a CPU, where the padded table's copy and the slice's padded gradient
    are all the padding brings (2.5% of a Small step on 2 cores: BENCHMARKS.md, "Where a
    CPU step goes").

    >>> padding_multiple("auto", "gpu")[0], padding_multiple("auto", "cpu")[0]
    (128, 1)
    """
    errors.check_choice("config.train.vocabulary_padding", mode, PADDINGS, error=ValueError)
    if mode != "auto":
        return (VOCABULARY_MULTIPLE if mode == "tiles" else 1), "as configured"
    if device_kind in ("gpu", "tpu"):
        return VOCABULARY_MULTIPLE, (
            f"auto on a {device_kind.upper()}: whole {VOCABULARY_MULTIPLE}-wide tiles "
            "for its matrix units")
    return 1, (f"auto on a {device_kind.upper()}: its GEMMs have no tiles to fill, and "
               "the padding's copies cost it time")


class MaskedLMHead(keras_hub.layers.MaskedLMHead):
    """keras-hub's `MaskedLMHead` (exactly the original's `get_masked_lm_output`), whose
    output bias also works under a mixed precision policy, and whose matmul runs on the
    vocabulary padded to `padded_vocabulary` (zero rows appended to the table in the
    step, not to the variables: checkpoints, exports and conversions keep the real
    vocabulary), to a multiple of the call's `vocabulary_multiple` (the step context's,
    chosen for the device; `VOCABULARY_MULTIPLE` unless given). The padded columns of
    the logits are sliced off before the bias: the logits, and so the losses, samples,
    metrics and gradients, are the real vocabulary's, and no padded id can be sampled.

    keras-hub adds its float32 bias to float16/bfloat16
    outputs (its layer does not autocast), which TF refuses: the `AddV2` of a half and
    a float tensor. Here the bias is added in float32, so the logits, which a softmax
    reads next, come out float32. Same variables, same names, same float32 results. Its
    variables are read as stored (`compat.no_autocast`) whether or not a mixed-precision
    layer's call encloses the head: the bias is not rounded to the compute dtype.
    """

    def call(self, inputs, mask_positions, vocabulary_multiple=None):
        with compat.no_autocast():
            return self._logits(inputs, mask_positions,
                                vocabulary_multiple or VOCABULARY_MULTIPLE)

    def _logits(self, inputs, mask_positions, multiple):
        # [batch, P, H] by int32 indices: Keras' take_along_axis casts them to int64 and
        # broadcasts them to [batch, P, H] (int64 is emulated on TPUs).
        x = tf.gather(inputs, tf.cast(mask_positions, tf.int32), batch_dims=1)
        parts = compat.masked_lm_head_parts(self)  # keras-hub's private sublayers
        x = parts.intermediate_layer_norm(parts.intermediate_dense(x))
        if self.token_embedding is not None:
            # The tied table in the compute dtype: Keras' embeddings do not autocast, and
            # `token_embedding(x, reverse=True)` would multiply in float32 under a
            # bfloat16 policy (a float32 GEMM onto the vocabulary:
            # tests/training/test_bfloat16.py).
            table = keras.ops.cast(self.token_embedding.embeddings, x.dtype)  # [V, E]
            kernel = keras.ops.transpose(table)                              # [E, V]
        else:
            kernel = keras.ops.cast(parts.kernel, x.dtype)                   # [E, V]
        vocabulary = kernel.shape[-1]
        padding = padded_vocabulary(vocabulary, multiple) - vocabulary
        if padding:
            kernel = keras.ops.pad(kernel, [[0, 0], [0, padding]])       # [E, V']
        outputs = keras.ops.matmul(x, kernel)                             # [B, P, V']
        if padding:
            outputs = outputs[..., :vocabulary]                           # [B, P, V]
        outputs = keras.ops.cast(outputs, "float32") + keras.ops.cast(parts.bias, "float32")
        return outputs if self.activation is None else self.activation(outputs)


def masked_lm_head(embeddings: encoder.Embeddings, layer_norm_epsilon: float = 1e-12,
                   dtype=None, name: str = "generator_predictions"):
    """The generator head: gather masked positions → dense to E + gelu + LayerNorm → the
    (tied) token embedding matrix transposed + an output bias (`MaskedLMHead`)."""
    return MaskedLMHead(
        token_embedding=embeddings.token_embedding, intermediate_activation=activations.gelu,
        layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=encoder.initializer(),
        dtype=dtype, name=name)


class ReplacedTokenHead(keras.layers.Layer):
    """The discriminator head: dense(H, gelu) → dense(1): `[B, S, H]` → logits `[B, S]`."""

    def __init__(self, hidden_size: int, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        # === Layers ===
        self.dense = keras.layers.Dense(hidden_size, activation=activations.gelu,
                                        kernel_initializer=encoder.initializer(),
                                        dtype=self.dtype_policy, name="dense")
        self.logits = keras.layers.Dense(1, kernel_initializer=encoder.initializer(),
                                         dtype=self.dtype_policy, name="logits")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.logits.build(tuple(input_shape[:-1]) + (self.hidden_size,))
        self.built = True

    # === Forward ===
    def call(self, sequence_output):
        return keras.ops.squeeze(self.logits(self.dense(sequence_output)), axis=-1)

    # === Config ===
    def get_config(self):
        config = super().get_config()
        config.update({"hidden_size": self.hidden_size})
        return config
