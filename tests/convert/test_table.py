"""The table (`convert.table`): every tensor of the original's checkpoint lands in its
place in our model, which then computes the original's equations (in NumPy)."""

import os

import numpy as np
import pytest

from electra_tf.convert import table
from electra_tf.convert import tf1
from tests.convert import originals


def test_tf1_every_tensor_lands_in_its_place(original, weights, model):
    assert weights.spec == table.ModelSpec(original["vocab"].size, originals.TINY_SHAPE)
    assert weights.vocab_file == os.path.join(original["dir"], "vocab.txt")
    assert sorted(weights.ignored) == sorted(originals.NOT_WEIGHTS)
    originals.assert_same_tensors(weights.tensors, original["tensors"])
    placed = set()
    for name, array in original["tensors"].items():
        variable = originals.where_in_ours(model, name)
        np.testing.assert_array_equal(variable.numpy().reshape(array.shape), array,
                                      err_msg=name)
        placed.add(id(variable))
    assert placed == {id(v) for v in model.weights}  # and nothing of ours is left over


def test_tf1_converted_model_computes_the_original(original, model):
    t = original["tensors"]
    rng = np.random.default_rng(1)
    ids = rng.integers(5, original["vocab"].size, (2, 12))
    segments = np.zeros_like(ids)
    segments[:, 6:] = 1
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    inputs = {"token_ids": ids.astype("int32"), "segment_ids": segments.astype("int32"),
              "padding_mask": mask.astype("int32")}

    # Discriminator: replaced-token logits [B, S].
    sequence = originals.reference_encoder(t, "electra", originals.TINY, ids, segments, mask)
    expected = originals.dense(
        originals.gelu(originals.dense(sequence, t, "discriminator_predictions/dense")), t,
        "discriminator_predictions/dense_1")[..., 0]
    ours = model.discriminator_head(model.discriminator(inputs, training=False)).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)

    # Generator: MLM logits [B, P, V] at P positions (tied output embeddings + bias).
    positions = np.array([[1, 4, 7], [0, 2, 8]])
    hidden = originals.reference_encoder(t, "generator", originals.GENERATOR, ids, segments,
                                         mask)
    hidden = np.take_along_axis(hidden, positions[..., None], axis=1)
    hidden = originals.layer_norm(
        originals.gelu(originals.dense(hidden, t, "generator_predictions/dense")), t,
        "generator_predictions/LayerNorm")
    expected = (hidden @ t["electra/embeddings/word_embeddings"].T
                + t["generator_predictions/output_bias"])
    ours = model.generator_head(model.generator(inputs, training=False),
                                mask_positions=positions.astype("int32")).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(originals.SHAPES))
def test_any_shape_computes_the_original(name, tmp_path):
    shape = originals.SHAPES[name]
    original = originals.write_original(tmp_path, shape, junk=())
    weights = tf1.TF1().read(original["dir"], num_heads=shape.discriminator.num_heads)
    model = table.build_pretrainer(weights.spec)
    table.load_into(table.pretrainer_slots(model), weights)
    t = original["tensors"]
    rng = np.random.default_rng(1)
    ids = rng.integers(5, original["vocab"].size, (2, 12))
    segments = (np.arange(12) >= 6).astype("int64")[None].repeat(2, 0)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    inputs = {"token_ids": ids.astype("int32"), "segment_ids": segments.astype("int32"),
              "padding_mask": mask.astype("int32")}
    sequence = originals.reference_encoder(t, "electra", shape.discriminator, ids, segments,
                                           mask)
    expected = originals.dense(
        originals.gelu(originals.dense(sequence, t, "discriminator_predictions/dense")), t,
        "discriminator_predictions/dense_1")[..., 0]
    ours = model.discriminator_head(model.discriminator(inputs, training=False)).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)

    scope = "electra" if shape.tie == "all" else "generator"
    embeddings = "generator/embeddings" if shape.tie == "none" else "electra/embeddings"
    positions = np.array([[1, 4, 7], [0, 2, 8]])
    hidden = originals.reference_encoder(t, scope, shape.generator, ids, segments, mask,
                                         embeddings)
    hidden = np.take_along_axis(hidden, positions[..., None], axis=1)
    hidden = originals.layer_norm(
        originals.gelu(originals.dense(hidden, t, "generator_predictions/dense")), t,
        "generator_predictions/LayerNorm")
    expected = (hidden @ t[f"{embeddings}/word_embeddings"].T
                + t["generator_predictions/output_bias"])
    ours = model.generator_head(model.generator(inputs, training=False),
                                mask_positions=positions.astype("int32")).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)
