"""The tagging model: the discriminator encoder, dropout and a dense layer per token (the
original ELECTRA's tagging head), and its loss.

>>> import numpy as np
>>> from electra_tf.model import encoder
>>> embeddings = encoder.Embeddings(vocabulary_size=20, embedding_size=8)
>>> enc = encoder.Encoder(embeddings, hidden_size=8, num_layers=2, num_heads=2,
...                       intermediate_size=16)
>>> model = Tagger(enc, num_labels=5)
>>> inputs = {"input_ids": np.array([[2, 5, 3]]), "input_mask": np.ones((1, 3), "int32"),
...           "segment_ids": np.zeros((1, 3), "int32")}
>>> model(inputs).shape
TensorShape([1, 3, 5])
>>> from electra_tf.finetuning import model as finetuning_model  # layer-wise rates
>>> sorted(set(finetuning_model.layer_depths(model).values()))
[0, 1, 2, 4]
"""

import tensorflow as tf

from electra_tf.finetuning import model as finetuning_model


class Tagger(finetuning_model.Classifier):
    """The classifier's layers (encoder, dropout, dense(num_labels)) at every position
    instead of [CLS]: logits `[B, S, labels]`. `encoder` is the attribute
    `finetuning.model.layer_depths` reads (layer-wise rates)."""

    def call(self, inputs, training=None):
        sequence = self.encoder({"token_ids": inputs["input_ids"],
                                 "segment_ids": inputs["segment_ids"],
                                 "padding_mask": inputs["input_mask"]}, training=training)
        sequence = self.head_dropout(sequence, training=training)
        return tf.cast(self.head(sequence), tf.float32)


def tagging_loss(logits, labels, label_mask):
    """Per-row loss [B]: the cross-entropy of each labelled piece (a word's first, in the
    window that owns it), summed over the row as the original sums over the sentence.
    logits [B, S, L]; labels, label_mask [B, S]."""
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_sum(losses * tf.cast(label_mask, tf.float32), axis=-1)
