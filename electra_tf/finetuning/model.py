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


def layer_depths(model: Classifier) -> dict[str, int]:
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
    for v in model.head.trainable_weights:
        depths[v.path] = top
    missing = [v.path for v in model.trainable_weights if v.path not in depths]
    if missing:
        raise ValueError(f"no layer depth for {missing}")
    return depths


def learning_rate_multipliers(model: Classifier, decay: float) -> dict[str, float]:
    """{variable path: decay^(num_layers + 2 − depth)}."""
    top = model.encoder.num_layers + 2
    return {path: decay ** (top - depth) for path, depth in layer_depths(model).items()}


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
        self._decays = [bool(self._decay_rate) and self._use_weight_decay(v) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        lr = tf.cast(learning_rate, variable.dtype) * self._multipliers[index]
        if self._decays[index]:
            variable.assign_sub(variable * tf.cast(self._decay_rate, variable.dtype) * lr)
        return super().update_step(gradient, variable, lr)
