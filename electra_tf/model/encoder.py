"""The ELECTRA encoder: shared embeddings, a projection, keras-hub TransformerEncoder blocks.

As in the original (and BERT): token + position + segment embeddings of width E, summed,
LayerNorm (epsilon 1e-12), dropout; a dense projection to the hidden width H when E != H;
then post-LayerNorm `keras_hub.layers.TransformerEncoder` blocks with exact (erf) gelu
(`activations.gelu`: the original's formula, one fusion a block fewer than Keras'
gelu) and truncated-normal(0.02) initialisation. No pooler: ELECTRA has none. Every
dropout is a `dropout.HashDropout` (same semantics as Keras', a cheaper mask: see that
module); the attention probabilities' rate is its own (`attention_dropout`). Each
block's attention core is `attention.core` (fewer passes over `[B, heads, S, S]`, the
same function as Keras'), and each block can recompute its feed-forward's activation,
its attention core and the attention's output projection in the backward pass
(`remat.prepare`; the training step chooses, `config.train.remat`). The attention's
projections run as 2-D matmuls (`projection.FlatEinsumDense`: one GEMM for each kernel's
gradient).

The generator and the discriminator are two `Encoder`s over one `Embeddings` object by
default (see `pretrainer` for the other weight sharings).

>>> import numpy as np
>>> embeddings = Embeddings(vocabulary_size=10, embedding_size=8)
>>> encoder = Encoder(embeddings, hidden_size=16, num_layers=1, num_heads=2,
...                   intermediate_size=32)
>>> inputs = {"token_ids": np.array([[2, 5, 3, 0]]), "segment_ids": np.zeros((1, 4), "int32"),
...           "padding_mask": np.array([[1, 1, 1, 0]])}
>>> encoder(inputs).shape
TensorShape([1, 4, 16])
"""

import keras
import keras_hub
import tensorflow as tf

from electra_tf import compat
from electra_tf.model import activations
from electra_tf.model import dropout as dropout_lib
from electra_tf.model import projection as projection_lib
from electra_tf.model import remat


def initializer(stddev: float = 0.02) -> keras.initializers.Initializer:
    """The original's initializer: truncated normal, stddev 0.02."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="electra_tf")
class Embeddings(keras.layers.Layer):
    """Token + position + segment embeddings, LayerNorm, dropout: `[B, S]` ids → `[B, S, E]`.

    `token_embedding` is a `keras_hub.layers.ReversibleEmbedding`, so the generator's MLM
    head can project back to the vocabulary with the same matrix.
    """

    def __init__(self, vocabulary_size: int, embedding_size: int,
                 max_sequence_length: int = 512, num_segments: int = 2,
                 dropout: float = 0.1, layer_norm_epsilon: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        if vocabulary_size <= 0 or embedding_size <= 0:
            raise ValueError("`vocabulary_size` and `embedding_size` must be positive. "
                             f"Received: `vocabulary_size={vocabulary_size}`, "
                             f"`embedding_size={embedding_size}`")
        self.vocabulary_size = vocabulary_size
        self.embedding_size = embedding_size
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon

        # === Layers ===
        self.token_embedding = keras_hub.layers.ReversibleEmbedding(
            vocabulary_size, embedding_size, tie_weights=True,
            embeddings_initializer=initializer(), dtype=self.dtype_policy,
            name="token_embedding")
        self.position_embedding = keras_hub.layers.PositionEmbedding(
            max_sequence_length, initializer=initializer(), dtype=self.dtype_policy,
            name="position_embedding")
        self.segment_embedding = keras.layers.Embedding(
            num_segments, embedding_size, embeddings_initializer=initializer(),
            dtype=self.dtype_policy, name="segment_embedding")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.dropout_layer = dropout_lib.HashDropout(dropout, dtype=self.dtype_policy,
                                                     name="dropout")

    def build(self, input_shape):
        # input_shape: [B, S] token ids.
        self.token_embedding.build(input_shape)
        self.segment_embedding.build(input_shape)
        embedded = tuple(input_shape) + (self.embedding_size,)
        self.position_embedding.build(embedded)
        self.layer_norm.build(embedded)
        self.built = True

    # === Forward ===
    def call(self, token_ids, segment_ids, training=None):
        return self.combine(self.token_embedding(token_ids), segment_ids, training)

    def combine(self, tokens, segment_ids, training=None):
        """Token vectors `[B, S, E]` + positions + segments → LayerNorm → dropout."""
        x = tokens + self.position_embedding(tokens) + self.segment_embedding(segment_ids)
        return self.dropout_layer(self.layer_norm(x), training=training)

    # === Config ===
    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "embedding_size": self.embedding_size,
            "max_sequence_length": self.max_sequence_length,
            "num_segments": self.num_segments,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        })
        return config


class DisentangledEmbeddings(keras.layers.Layer):
    """DeBERTaV3's gradient-disentangled embedding sharing (tie='gdes'): the
    discriminator's token vectors are stop_gradient(shared table) + its own delta table
    (zero at the start), so the RTD loss trains only the delta and the generator's MLM
    loss alone trains the shared table. Positions, segments and the LayerNorm are the
    shared layer's (as under tie='embeddings').

    The shared table enters as `stop_gradient(t) + 0 · t`: the same values, and a zero
    gradient rather than none, so fine-tuning's all-reduce and optimizer see one for every
    trainable variable (there the delta alone moves the summed table).
    """

    def __init__(self, shared: Embeddings, **kwargs):
        super().__init__(**kwargs)
        self.shared = shared
        self.embedding_size = shared.embedding_size
        # === Layers ===
        self.delta = keras.layers.Embedding(
            shared.vocabulary_size, shared.embedding_size, embeddings_initializer="zeros",
            dtype=self.dtype_policy, name="token_embedding_delta")

    def build(self, input_shape):
        if not self.shared.built:
            self.shared.build(input_shape)
        self.delta.build(input_shape)
        self.built = True

    # === Forward ===
    def call(self, token_ids, segment_ids, training=None):
        shared = self.shared.token_embedding(token_ids)           # [B, S, E]
        tokens = tf.stop_gradient(shared) + 0.0 * shared + self.delta(token_ids)
        return self.shared.combine(tokens, segment_ids, training)

    def token_table(self):
        """The discriminator's token table, shared + delta: `[V, E]` (export, conversion)."""
        return self.shared.token_embedding.embeddings + self.delta.embeddings


@keras.saving.register_keras_serializable(package="electra_tf")
class Encoder(keras.layers.Layer):
    """Embeddings (shared, passed in) → projection to H → L transformer blocks.

    Inputs: a dict of `token_ids`, `segment_ids` and `padding_mask`, each `[B, S]`.
    Output: the sequence output `[B, S, H]`.
    """

    def __init__(self, embeddings: Embeddings, hidden_size: int, num_layers: int,
                 num_heads: int, intermediate_size: int, dropout: float = 0.1,
                 layer_norm_epsilon: float = 1e-12, attention_dropout: float | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        if hidden_size % num_heads:
            raise ValueError("`hidden_size` must be a multiple of `num_heads`. Received: "
                             f"`hidden_size={hidden_size}`, `num_heads={num_heads}`")
        self.embeddings = embeddings
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        # On the attention probabilities; None: `dropout` (keras-hub's blocks' one rate).
        self.attention_dropout = dropout if attention_dropout is None else attention_dropout

        # === Layers ===
        self.projection = None
        if embeddings.embedding_size != hidden_size:
            self.projection = keras.layers.Dense(
                hidden_size, kernel_initializer=initializer(), dtype=self.dtype_policy,
                name="embeddings_projection")
        # One attribute per block, not a list: tf.train.Checkpoint does not see into the
        # lists Keras 3 tracks, and a list's blocks would be missing from checkpoints.
        for i in range(num_layers):
            # Made at the larger rate (Keras' Dropout has seeds only if made above 0);
            # `build` sets each dropout's own.
            setattr(self, f"transformer_layer_{i}", keras_hub.layers.TransformerEncoder(
                intermediate_dim=intermediate_size, num_heads=num_heads,
                dropout=max(dropout, self.attention_dropout),
                activation=activations.gelu,  # the exact (erf) one, as the original's
                layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=initializer(),
                dtype=self.dtype_policy, name=f"transformer_layer_{i}"))

    @property
    def blocks(self) -> list:
        return [getattr(self, f"transformer_layer_{i}") for i in range(self.num_layers)]

    def build(self, input_shape):
        # input_shape: {"token_ids": [B, S], ...}
        ids_shape = tuple(input_shape["token_ids"])
        if not self.embeddings.built:
            self.embeddings.build(ids_shape)
        if self.projection is not None:
            self.projection.build(ids_shape + (self.embeddings.embedding_size,))
        for block in self.blocks:
            block.build(ids_shape + (self.hidden_size,))
            parts = compat.encoder_block_parts(block)
            parts.attention_dropout.rate = parts.output_dropout.rate = self.dropout
            compat.set_attention_dropout(parts.attention, self.attention_dropout)
            dropout_lib.use_hash_dropout(block)  # Philox masks: ~15% of a CPU step
            projection_lib.use_flat_projections(block)  # one GEMM for each kernel's gradient
            remat.prepare(block)  # recomputes selectively under remat=selective
        self.built = True

    # === Forward ===
    def call(self, inputs, training=None):
        x = self.embeddings(inputs["token_ids"], inputs["segment_ids"], training=training)
        if self.projection is not None:
            x = self.projection(x)                               # [B, S, E] → [B, S, H]
        padding_mask = keras.ops.cast(inputs["padding_mask"], "bool")
        for block in self.blocks:  # each recomputed in the backward pass: remat=blocks
            x = remat.call_block(block, x, padding_mask, training)
        return x                                                 # [B, S, H]

    # === Config ===
    def get_config(self):
        config = super().get_config()
        config.update({
            "embeddings": keras.layers.serialize(self.embeddings),
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "attention_dropout": self.attention_dropout,
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config, embeddings=keras.layers.deserialize(config["embeddings"]))
        return cls(**config)
