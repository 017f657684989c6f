"""The encoder: exact gelu, LayerNorm epsilon, the projection, padding, config."""

import math

import keras
import keras_hub
import numpy as np
import pytest

from electra_tf.model import encoder
from electra_tf.model import heads
from tests import helpers


def make_encoder(embedding_size=8, hidden_size=16, num_layers=2, vocab=20, seed=0):
    keras.utils.set_random_seed(seed)
    embeddings = encoder.Embeddings(vocabulary_size=vocab, embedding_size=embedding_size,
                                    max_sequence_length=32)
    return encoder.Encoder(embeddings, hidden_size=hidden_size, num_layers=num_layers,
                           num_heads=2, intermediate_size=32)


def inputs(ids, mask, segments=None):
    ids = np.asarray(ids, "int32")
    return {"token_ids": ids,
            "segment_ids": np.zeros_like(ids) if segments is None else np.asarray(segments,
                                                                                  "int32"),
            "padding_mask": np.asarray(mask, "int32")}


def tanh_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def test_blocks_use_exact_erf_gelu():
    enc = make_encoder()
    enc(inputs([[2, 5, 3, 0]], [[1, 1, 1, 0]]))  # keras-hub makes the sublayers in build
    x = np.linspace(-4.0, 4.0, 161).astype("float32")
    # The test can tell the two apart.
    assert np.max(np.abs(helpers.exact_gelu(x) - tanh_gelu(x))) > 1e-4
    assert len(enc.blocks) == 2
    for block in enc.blocks:
        assert isinstance(block, keras_hub.layers.TransformerEncoder)
        # remat.prepare applies the gelu at the output Dense's input (the same function).
        assert block._feedforward_intermediate_dense.activation is keras.activations.linear  # pylint: disable=protected-access
        activation = block._feedforward_output_dense.input_activation  # pylint: disable=protected-access
        np.testing.assert_allclose(np.asarray(activation(x)), helpers.exact_gelu(x),
                                   atol=1e-6)
    # The heads too.
    rtd = heads.ReplacedTokenHead(hidden_size=16)
    np.testing.assert_allclose(np.asarray(rtd.dense.activation(x)), helpers.exact_gelu(x),
                               atol=1e-6)
    mlm = heads.masked_lm_head(enc.embeddings)
    np.testing.assert_allclose(np.asarray(mlm.intermediate_activation(x)), helpers.exact_gelu(x),
                               atol=1e-6)


def test_layer_norm_epsilon_everywhere():
    enc = make_encoder()
    enc(inputs([[2, 5, 3, 0]], [[1, 1, 1, 0]]))
    norms = [layer for layer in enc._flatten_layers()  # pylint: disable=protected-access
             if isinstance(layer, keras.layers.LayerNormalization)]
    assert len(norms) == 1 + 2 * 2  # embeddings + two per block
    assert all(layer.epsilon == 1e-12 for layer in norms)
    assert enc.embeddings.layer_norm.epsilon == 1e-12
    assert all(not block.normalize_first for block in enc.blocks)  # post-LN, as BERT


def test_projection_only_when_widths_differ():
    projected = make_encoder(embedding_size=8, hidden_size=16)
    assert projected.projection is not None
    out = projected(inputs([[2, 5, 3, 0]], [[1, 1, 1, 0]]))
    assert tuple(out.shape) == (1, 4, 16)
    assert tuple(projected.projection.kernel.shape) == (8, 16)

    same = make_encoder(embedding_size=16, hidden_size=16)
    assert same.projection is None
    out = same(inputs([[2, 5, 3, 0]], [[1, 1, 1, 0]]))
    assert tuple(out.shape) == (1, 4, 16)
    assert not any("projection" in v.path for v in same.weights)


def test_padding_does_not_change_real_tokens():
    enc = make_encoder()
    real = [2, 7, 9, 11, 3]
    padded = enc(inputs([real + [0, 0, 0]], [[1] * 5 + [0] * 3]), training=False)
    garbage = enc(inputs([real + [17, 4, 13]], [[1] * 5 + [0] * 3],
                         segments=[[0] * 5 + [1, 1, 1]]), training=False)
    unpadded = enc(inputs([real], [[1] * 5]), training=False)
    np.testing.assert_allclose(np.asarray(padded)[:, :5], np.asarray(garbage)[:, :5],
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(padded)[:, :5], np.asarray(unpadded), atol=1e-5)
    # ... while unmasking those positions does change them (the mask is what matters).
    unmasked = enc(inputs([real + [17, 4, 13]], [[1] * 8]), training=False)
    assert np.max(np.abs(np.asarray(unmasked)[:, :5] - np.asarray(garbage)[:, :5])) > 1e-3


def test_hidden_must_divide_by_heads():
    embeddings = encoder.Embeddings(vocabulary_size=10, embedding_size=8)
    with pytest.raises(ValueError, match="num_heads"):
        encoder.Encoder(embeddings, hidden_size=15, num_layers=1, num_heads=2,
                        intermediate_size=8)


def test_config_round_trip():
    enc = make_encoder()
    batch = inputs([[2, 5, 3, 0]], [[1, 1, 1, 0]])
    expected = enc(batch, training=False)
    config = enc.get_config()
    clone = encoder.Encoder.from_config(config)
    assert isinstance(clone.embeddings, encoder.Embeddings)
    assert clone.embeddings is not enc.embeddings
    assert clone.get_config() == config
    assert clone.embeddings.get_config() == enc.embeddings.get_config()
    clone(batch, training=False)
    assert [tuple(v.shape) for v in clone.weights] == [tuple(v.shape) for v in enc.weights]
    clone.set_weights(enc.get_weights())
    np.testing.assert_allclose(np.asarray(clone(batch, training=False)), np.asarray(expected),
                               atol=1e-6)
    # Keras' generic (de)serialization finds the classes too.
    again = keras.layers.deserialize(keras.layers.serialize(enc))
    assert isinstance(again, encoder.Encoder) and again.num_layers == 2


def test_the_output_projection_passes_through_only_what_the_attention_projected():
    """Under selective recomputation the attention applies its output projection inside
    its recomputed core and Keras' `MultiHeadAttention.call` then applies it again: the
    `OutputProjection` returns the very tensor it was handed, once, and refuses any
    other (Keras having changed what it calls) instead of skipping it silently."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from electra_tf.model import remat  # pylint: disable=g-import-not-at-top
    model = make_encoder()
    model(inputs([[1, 2, 3, 0]], [[1, 1, 1, 0]]))
    projection = model.blocks[0]._self_attention_layer._output_dense  # pylint: disable=protected-access
    assert isinstance(projection, remat.OutputProjection) and projection.plain
    context = tf.random.normal([1, 4, 2, 8])  # [B, S, heads, head size]
    projected = projection(context)  # Keras' EinsumDense when nothing is pending
    weights = remat.weights_as_tensors(projection)
    np.testing.assert_allclose(projected.numpy(), projection.project(context, *weights),
                               rtol=1e-6)
    projection.pass_through(projected)
    assert projection(projected) is projected  # [B, S, H]: passed through once
    assert projection(context).shape == projected.shape  # then projecting again
    projection.pass_through(projected)
    with pytest.raises(ValueError, match="expected the output"):
        projection(tf.identity(projected))
    assert projection._projected is None  # pylint: disable=protected-access
