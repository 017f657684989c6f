"""The fine-tuning model: the pre-trained discriminator encoder + the original's task head.

    [CLS] vector of the discriminator's sequence output → dropout(0.1) → dense(num_labels)

(one unit, no activation, for STS-B's regression, trained on the score / 5 as the
original), as the original ELECTRA's classification tasks. Only the discriminator is
restored from a pre-training run; the generator is never built into the classifier.

Layer-wise learning-rate decay (the original's `layerwise_lr_decay`): a variable at depth
d trains at `lr · decay^(num_layers + 2 − d)`, with the embeddings (and their projection)
at depth 0, transformer block i at depth i + 1 and the task head at num_layers + 2 (the
full rate). `layer_depths` assigns the depths; `LayerwiseAdamW` applies them, to the Adam
update and to the decoupled weight decay alike.

>>> import numpy as np
>>> from electra_tf.model import encoder
>>> embeddings = encoder.Embeddings(vocabulary_size=20, embedding_size=8)
>>> enc = encoder.Encoder(embeddings, hidden_size=8, num_layers=2, num_heads=2,
...                       intermediate_size=16)
>>> model = Classifier(enc, num_labels=3)
>>> inputs = {"input_ids": np.array([[2, 5, 3]]), "input_mask": np.ones((1, 3), "int32"),
...           "segment_ids": np.zeros((1, 3), "int32")}
>>> model(inputs).shape
TensorShape([1, 3])
>>> sorted(set(layer_depths(model).values()))
[0, 1, 2, 4]
"""

import keras
import tensorflow as tf

from electra_tf import compat
from electra_tf.model import activations
from electra_tf.model import encoder as encoder_lib
from electra_tf.training import optimizer as optimizer_lib


class Classifier(keras.Model):
    """Discriminator encoder → [CLS] → dropout → dense(num_labels): logits `[B, labels]`."""

    def __init__(self, encoder: encoder_lib.Encoder, num_labels: int, dropout: float = 0.1,
                 seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.num_labels = num_labels
        self.head_dropout = keras.layers.Dropout(dropout, name="task_dropout")
        # The original's tf.layers.dense default: Glorot-uniform (Keras' default too),
        # seeded: the same run's head starts the same under any strategy.
        self.head = keras.layers.Dense(
            num_labels, kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
            name="task_output")

    def call(self, inputs, training=None):
        sequence = self.encoder({"token_ids": inputs["input_ids"],
                                 "segment_ids": inputs["segment_ids"],
                                 "padding_mask": inputs["input_mask"]}, training=training)
        cls = self.head_dropout(sequence[:, 0], training=training)
        return tf.cast(self.head(cls), tf.float32)


def layer_depths(model) -> dict[str, int]:
    """{variable path: depth} for every trainable variable (see the module docstring)."""
    enc = model.encoder
    top = enc.num_layers + 2
    depths = {}
    for v in enc.embeddings.trainable_weights:
        depths[v.path] = 0
    if enc.projection is not None:
        for v in enc.projection.trainable_weights:
            depths[v.path] = 0
    for i, block in enumerate(enc.blocks):
        for v in block.trainable_weights:
            depths[v.path] = i + 1
    for v in model.trainable_weights:  # the task's head: everything not the encoder's
        depths.setdefault(v.path, top)
    return depths


def learning_rate_multipliers(model, decay: float) -> dict[str, float]:
    """{variable path: decay^(num_layers + 2 − depth)}."""
    top = model.encoder.num_layers + 2
    return {path: decay ** (top - depth) for path, depth in layer_depths(model).items()}


class QuestionAnswerer(keras.Model):
    """The original ELECTRA's SQuAD head on the discriminator encoder.

    Spans lie in the context (segment 1) or at [CLS] (no answer in this window). Start:
    dense(1) per token. End, predicted jointly: dense(512, GELU) then dense(1) on
    [the start token's vector; each token's vector], with the gold start in training and
    each of the `beam_size` best starts otherwise. Answerability: dense(512, GELU) then
    dense(1) on [the [CLS] vector; the start-probability-weighted sum of the vectors], a
    logit of "impossible".

    Training (inputs hold `start_positions`): `start_logits`, `end_logits` [B, S],
    `answerable_logit` [B]. Otherwise: `start_top_log_probs`, `start_top_index` [B, K],
    `end_top_log_probs`, `end_top_index` [B, K, K], `answerable_logit` [B].
    """

    def __init__(self, encoder: encoder_lib.Encoder, beam_size: int = 20,
                 seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.beam_size = beam_size

        def dense(units, name, activation=None):
            return keras.layers.Dense(
                units, activation=activation, name=name,
                kernel_initializer=keras.initializers.GlorotUniform(seed=seed))
        self.start_head = dense(1, "qa_start")
        self.end_hidden = dense(512, "qa_end_hidden", activations.gelu)
        self.end_head = dense(1, "qa_end")
        self.answerable_hidden = dense(512, "qa_answerable_hidden", activations.gelu)
        self.answerable_head = dense(1, "qa_answerable")

    def _end_logits(self, start_vectors, sequence, penalty):
        """End logits [B, S] for start vectors [B, H], or [B, K, S] for a beam [B, K, H]."""
        if start_vectors.shape.rank == 3:
            sequence = tf.repeat(sequence[:, None], start_vectors.shape[1], axis=1)
            penalty = penalty[:, None]
        starts = tf.repeat(tf.expand_dims(start_vectors, -2), sequence.shape[-2], axis=-2)
        hidden = self.end_hidden(tf.concat([starts, sequence], -1))
        return tf.squeeze(self.end_head(hidden), -1) + penalty

    def call(self, inputs, training=None):
        sequence = tf.cast(self.encoder({"token_ids": inputs["input_ids"],
                                         "segment_ids": inputs["segment_ids"],
                                         "padding_mask": inputs["input_mask"]},
                                        training=training), tf.float32)
        seq = sequence.shape[1]
        allowed = tf.cast(inputs["input_mask"] * inputs["segment_ids"], tf.float32)
        allowed += tf.one_hot(0, seq)                          # [CLS]: no answer here
        penalty = 1000.0 * (allowed - 1.0)
        start_logits = tf.squeeze(self.start_head(sequence), -1) + penalty
        start_p = tf.nn.softmax(start_logits)
        pooled = tf.concat([sequence[:, 0], tf.einsum("bs,bsh->bh", start_p, sequence)], -1)
        answerable = tf.squeeze(self.answerable_head(self.answerable_hidden(pooled)), -1)
        if "start_positions" in inputs:
            start_vectors = tf.gather(sequence, inputs["start_positions"], batch_dims=1)
            return {"start_logits": start_logits, "answerable_logit": answerable,
                    "end_logits": self._end_logits(start_vectors, sequence, penalty)}
        k = min(self.beam_size, seq)
        start_top_log_probs, start_top_index = tf.nn.top_k(tf.nn.log_softmax(start_logits), k)
        start_vectors = tf.gather(sequence, start_top_index, batch_dims=1)   # [B, K, H]
        end_log_probs = tf.nn.log_softmax(self._end_logits(start_vectors, sequence, penalty))
        end_top_log_probs, end_top_index = tf.nn.top_k(end_log_probs, k)    # [B, K, K]
        return {"start_top_log_probs": start_top_log_probs,
                "start_top_index": start_top_index, "end_top_log_probs": end_top_log_probs,
                "end_top_index": end_top_index, "answerable_logit": answerable}


def qa_loss(outputs: dict, batch: dict, answerable_weight: float = 0.5) -> tf.Tensor:
    """The original's per-window loss [B]: the mean of the start and end cross-entropies,
    + answerable_weight · the sigmoid cross-entropy of "impossible"."""
    start = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=batch["start_positions"], logits=outputs["start_logits"])
    end = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=batch["end_positions"], logits=outputs["end_logits"])
    impossible = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(batch["is_impossible"], tf.float32), logits=outputs["answerable_logit"])
    return (start + end) / 2.0 + answerable_weight * impossible


class LayerwiseAdamW(optimizer_lib.AdamW):
    """AdamW whose learning rate (and weight decay) is scaled per variable.

    multipliers: {variable path: factor}; variables not listed train at the full rate.
    Gradients arrive already summed over replicas (as in pre-training).
    """

    def __init__(self, multipliers: dict[str, float], **kwargs):
        super().__init__(**kwargs)
        self._multiplier_by_path = dict(multipliers)
        self._decay_rate = self.weight_decay
        self.weight_decay = None  # applied in update_step, at the variable's own rate
        self._multipliers = []
        self._decays = []

    def build(self, var_list):
        super().build(var_list)
        self._multipliers = [self._multiplier_by_path.get(v.path, 1.0) for v in var_list]
        # Keras' exclusion lookup (exclude_from_weight_decay), not its decay: see __init__.
        self._decays = [bool(self._decay_rate) and compat.decays(self, v) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        index = compat.variable_index(self, variable)
        lr = tf.cast(learning_rate, variable.dtype) * self._multipliers[index]
        if self._decays[index]:
            variable.assign_sub(variable * tf.cast(self._decay_rate, variable.dtype) * lr)
        return super().update_step(gradient, variable, lr)
