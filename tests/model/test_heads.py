"""model/heads.py's MLM head projects onto the vocabulary padded to a multiple of 128 and
gives the real vocabulary's logits and gradients; the device chooses the padding."""

import re

import pytest

import keras
import numpy as np
import tensorflow as tf

from electra_tf import compat
from electra_tf.model import encoder
from electra_tf.model import heads

V, E, H = 37, 8, 16  # 37 tokens: padded to 128


def _head(dtype="float32"):
    keras.utils.set_random_seed(0)
    embeddings = encoder.Embeddings(vocabulary_size=V, embedding_size=E, dtype=dtype)
    embeddings.build((2, 6))
    head = heads.masked_lm_head(embeddings, dtype=dtype)
    sequence = tf.constant(np.random.default_rng(0).normal(size=(2, 6, H)), tf.float32)
    positions = tf.constant([[1, 2, 5], [0, 3, 4]])
    head(sequence, mask_positions=positions)
    return head, embeddings, sequence, positions


def _unpadded(head, embeddings, sequence, positions):
    """The head's function with the real table, as keras-hub computes it."""
    parts = compat.masked_lm_head_parts(head)
    x = tf.gather(sequence, positions, batch_dims=1)
    x = parts.intermediate_layer_norm(parts.intermediate_dense(x))
    return tf.matmul(x, embeddings.token_embedding.embeddings, transpose_b=True) + parts.bias


def test_padded_projection_gives_the_real_vocabularys_logits_and_gradients():
    head, embeddings, sequence, positions = _head()
    assert heads.padded_vocabulary(V) == 128 and heads.padded_vocabulary(128) == 128
    table = embeddings.token_embedding.embeddings
    assert tuple(table.shape) == (V, E)  # the variables keep the real vocabulary
    results = []
    for project in (head, lambda s, mask_positions: _unpadded(head, embeddings, s,
                                                              mask_positions)):
        with tf.GradientTape() as tape:
            logits = project(sequence, mask_positions=positions)
            loss = tf.reduce_sum(tf.nn.log_softmax(logits) * np.arange(V) / V)
        results.append((logits, tape.gradient(loss, [table] + head.trainable_variables)))
    (logits, grads), (want, want_grads) = results
    assert logits.shape == (2, 3, V)  # no padded id to sample, score or predict
    np.testing.assert_allclose(logits, want, rtol=1e-6, atol=1e-6)
    for got, expected in zip(grads, want_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(got), tf.convert_to_tensor(expected),
                                   rtol=1e-5, atol=1e-6)


def test_every_matmul_onto_the_vocabulary_is_padded():
    """Compiled forward and backward (bfloat16): the projection, its gradient by the
    table and by the input all run on 128 columns, none on the real 37."""
    head, embeddings, sequence, positions = _head("mixed_bfloat16")
    variables = [embeddings.token_embedding.embeddings] + head.trainable_variables

    @tf.function(jit_compile=True)
    def step(s):
        with tf.GradientTape() as tape:
            tape.watch(s)
            loss = tf.reduce_sum(tf.nn.log_softmax(head(s, mask_positions=positions)))
        return tape.gradient(loss, [s] + variables)

    hlo = step.experimental_get_compiler_ir(sequence)(stage="hlo")
    dots = [line for line in hlo.splitlines() if re.search(r"= \S+ dot\(", line)]
    vocabulary = [d for d in dots if re.search(rf"\b({V}|128)\b", d.split("dot(")[1])]
    assert len(vocabulary) == 3, vocabulary  # logits, d/d table, d/d input
    assert all("128" in d and not re.search(rf"\b{V}\b", d) for d in vocabulary), vocabulary


def test_the_device_chooses_the_padding():
    assert heads.padding_multiple("auto", "gpu")[0] == 128
    assert heads.padding_multiple("auto", "tpu")[0] == 128
    multiple, reason = heads.padding_multiple("auto", "cpu")
    assert multiple == 1 and "CPU" in reason
    assert heads.padding_multiple("tiles", "cpu") == (128, "as configured")
    assert heads.padding_multiple("none", "gpu") == (1, "as configured")
    with pytest.raises(ValueError, match="auto, none, tiles"):
        heads.padding_multiple("128", "cpu")


def test_an_unpadded_call_gives_the_padded_logits_and_gradients_without_padding():
    """`vocabulary_multiple=1` (a CPU's step): the padded call's logits and gradients,
    and every matmul onto the vocabulary on its real 37 columns."""
    head, embeddings, sequence, positions = _head()
    variables = [embeddings.token_embedding.embeddings] + head.trainable_variables

    @tf.function(jit_compile=True)
    def step(s, multiple):
        with tf.GradientTape() as tape:
            logits = head(s, mask_positions=positions, vocabulary_multiple=multiple)
            loss = tf.reduce_sum(tf.nn.log_softmax(logits) * np.arange(V) / V)
        return logits, tape.gradient(loss, variables)

    (padded, padded_grads), (unpadded, unpadded_grads) = step(sequence, 128), step(sequence, 1)
    np.testing.assert_allclose(unpadded, padded, rtol=1e-6, atol=1e-6)
    for got, expected in zip(unpadded_grads, padded_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(got), tf.convert_to_tensor(expected),
                                   rtol=1e-5, atol=1e-6)
    hlo = step.experimental_get_compiler_ir(sequence, 1)(stage="hlo")
    dots = [line for line in hlo.splitlines() if re.search(r"= \S+ dot\(", line)]
    vocabulary = [d for d in dots if re.search(rf"\b({V}|128)\b", d.split("dot(")[1])]
    assert len(vocabulary) == 3, vocabulary
    assert not any(re.search(r"\b128\b", d) for d in vocabulary), vocabulary
    assert " pad(" not in hlo
