"""The pre-trainer: shapes, shared embeddings, corruption, the stop-gradient, determinism."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import model_config
from electra_tf.model import losses
from electra_tf.model import pretrainer
from electra_tf.model import sizes
from tests import helpers

VOCAB, MASK, B, S, P = 40, 4, 2, 12, 3


def make_shape(tie="embeddings", generator=None):
    tiny = sizes.SIZES["tiny"]
    return sizes.ModelShape(tiny, generator or sizes.generator_size(tiny, 0.5),
                            max_positions=32, tie=tie)


def make_model(tie="embeddings", generator=None, **kwargs):
    keras.utils.set_random_seed(0)
    model = pretrainer.ElectraPretrainer(VOCAB, make_shape(tie, generator), **kwargs)
    return model.build_for(S, P)


@pytest.fixture(scope="module")
def model():
    return make_model()


def make_batch(seed=0, masked_token=None):
    """Row 0: 12 real tokens, 3 predictions; row 1: 8 real tokens, 2 + one padding one."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, (B, S)).astype("int32")
    ids[1, 8:] = 0
    mask = (ids != 0).astype("int32")
    positions = np.array([[1, 4, 7], [2, 5, 0]], "int32")
    weights = np.array([[1, 1, 1], [1, 1, 0]], "float32")
    if masked_token is not None:
        for row in range(B):
            ids[row, positions[row][weights[row] > 0]] = masked_token
    labels = np.take_along_axis(ids, positions, 1) * (weights > 0)
    masked = ids.copy()
    for row in range(B):
        masked[row, positions[row][weights[row] > 0]] = MASK
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
            "masked_input_ids": masked, "masked_lm_positions": positions,
            "masked_lm_ids": labels.astype("int32"), "masked_lm_weights": weights}


def uniform(seed=0):
    return np.random.default_rng(seed).random((B, P)).astype("float32")


def test_output_shapes_and_dtypes(model):
    out = helpers.forward(model, make_batch(), uniform=uniform(), training=False)
    assert tuple(out["mlm_logits"].shape) == (B, P, VOCAB)
    assert tuple(out["sampled_ids"].shape) == (B, P)
    assert tuple(out["corrupted_ids"].shape) == (B, S)
    assert tuple(out["is_replaced"].shape) == (B, S)
    assert tuple(out["disc_logits"].shape) == (B, S)
    for key in ("mlm_logits", "is_replaced", "disc_logits"):
        assert out[key].dtype == tf.float32
    assert np.all((out["sampled_ids"].numpy() >= 0) & (out["sampled_ids"].numpy() < VOCAB))


def test_embeddings_are_shared(model):
    assert model.generator.embeddings is model.discriminator.embeddings
    assert model.embeddings is model.discriminator.embeddings
    assert model.generator_head.token_embedding is model.embeddings.token_embedding
    # Only one token matrix among the model's variables.
    matrices = [v for v in model.weights if tuple(v.shape) == (VOCAB, 64)]
    assert len(matrices) == 1
    # The generator is narrower than E, so it projects; the discriminator does not.
    assert model.generator.projection is not None and model.discriminator.projection is None


def test_untied_embeddings_are_distinct():
    tiny = sizes.SIZES["tiny"]
    # tie='none': the generator's own embeddings at its own width (the original's
    # untied_generator_embeddings), so no projection in the generator.
    generator = dataclasses.replace(sizes.generator_size(tiny, 0.5), embedding_size=32)
    untied = make_model(tie="none", generator=generator)
    assert untied.generator.embeddings is not untied.discriminator.embeddings
    assert untied.discriminator.embeddings is untied.embeddings
    assert untied.generator_head.token_embedding is untied.generator.embeddings.token_embedding
    assert (untied.generator_head.token_embedding
            is not untied.discriminator.embeddings.token_embedding)
    matrices = [tuple(v.shape) for v in untied.weights if v.shape[:1] == (VOCAB,)]
    assert matrices == [(VOCAB, 64), (VOCAB, 32), (VOCAB,)]  # + the MLM output bias
    assert untied.generator.projection is None
    # The product does not include the generator's embeddings.
    product = {id(v) for v in untied.discriminator_variables()}
    assert id(untied.generator.embeddings.token_embedding.embeddings) not in product


def test_tie_all_makes_the_generator_the_discriminator_encoder():
    tiny = sizes.SIZES["tiny"]
    tied = make_model(tie="all", generator=tiny)
    assert tied.generator is tied.discriminator
    embedded = make_model()
    # Only the MLM head is the generator's own: the encoder's weights are counted once.
    own = len(embedded.generator.weights) - len(embedded.embeddings.weights)
    assert len(tied.weights) == len(embedded.weights) - own
    outputs = helpers.forward(tied, make_batch(), uniform=uniform(), training=False)
    assert outputs["mlm_logits"].shape == (B, P, VOCAB)


@pytest.mark.parametrize("tie", ["embeddings", "all"])
def test_shared_layers_draw_other_dropout_masks_in_each_pass(tie):
    """In a seeded context the generator's pass folds in a salt: the shared embeddings (and
    every block under tie='all') must not reuse the discriminator's masks."""
    model = make_model(tie, generator=sizes.SIZES["tiny"] if tie == "all" else None)
    dropped = []  # the embeddings' dropout masks, one per pass: generator, discriminator
    original = model.embeddings.dropout_layer.call

    def spy(inputs, training=False):
        out = original(inputs, training=training)
        dropped.append(out.numpy() == 0)
        return out

    model.embeddings.dropout_layer.call = spy
    for _ in range(2):
        helpers.forward(model, make_batch(), uniform=uniform(), seed=tf.constant([3, 4]),
                        training=True)
    generator, discriminator, generator_again, discriminator_again = dropped
    assert (generator != discriminator).any()
    np.testing.assert_array_equal(generator, generator_again)  # functions of the seed
    np.testing.assert_array_equal(discriminator, discriminator_again)


def test_variables_keep_their_order():
    """Keras lists variables, and the optimizer stores its slots, in attribute order:
    checkpoints written before `ModelShape` restore only if it never changes."""
    model = make_model()
    scopes = []
    for v in model.trainable_variables:
        scope = v.path.split("/")[1]
        if not scopes or scopes[-1] != scope:
            scopes.append(scope)
    # (The shared embeddings' variables are created on the generator's first call.)
    # Checked against the code before ModelShape: the same 80 paths in the same order.
    assert scopes == ["generator", "generator_predictions", "discriminator",
                      "discriminator_predictions"]
    assert model.trainable_variables[0].path.endswith("embeddings/token_embedding/embeddings")


def test_is_replaced_and_corruption(model):
    batch = make_batch(seed=1)
    for seed in range(3):
        out = helpers.forward(model, batch, uniform=uniform(seed), training=False)
        corrupted = out["corrupted_ids"].numpy()
        expected = (corrupted != batch["input_ids"]) * batch["input_mask"]
        np.testing.assert_array_equal(out["is_replaced"].numpy(), expected)
        # Positions not masked are exactly the (masked) input.
        chosen = np.zeros((B, S), bool)
        for row in range(B):
            chosen[row, batch["masked_lm_positions"][row][batch["masked_lm_weights"][row] > 0]] = 1
        np.testing.assert_array_equal(corrupted[~chosen], batch["masked_input_ids"][~chosen])
        # Masked positions hold the samples; nothing is left as [MASK].
        sampled = out["sampled_ids"].numpy()
        for row in range(B):
            for p in range(P):
                if batch["masked_lm_weights"][row, p] > 0:
                    assert corrupted[row, batch["masked_lm_positions"][row, p]] == sampled[row, p]
        # Padding never counts as replaced.
        assert not np.any(out["is_replaced"].numpy()[batch["input_mask"] == 0])


def test_sampling_the_original_is_not_a_replacement():
    model = make_model()
    batch = make_batch(seed=2, masked_token=7)
    bias = model.generator_head._bias  # pylint: disable=protected-access
    forced = np.zeros(VOCAB, "float32")
    forced[7] = 1e4
    bias.assign(forced)
    out = helpers.forward(model, batch, uniform=uniform(), training=False)
    weighted = batch["masked_lm_weights"] > 0
    assert np.all(out["sampled_ids"].numpy()[weighted] == 7)
    assert not np.any(out["is_replaced"].numpy())   # all samples equal the originals
    # Force another token: exactly the masked positions are replaced.
    forced[:] = 0
    forced[9] = 1e4
    bias.assign(forced)
    out = helpers.forward(model, batch, uniform=uniform(), training=False)
    assert out["is_replaced"].numpy().sum() == weighted.sum()


def test_disallow_correct_never_samples_the_original():
    model = make_model(disallow_correct=True)
    batch = make_batch(seed=2, masked_token=7)
    forced = np.zeros(VOCAB, "float32")
    forced[7] = 20.0
    model.generator_head._bias.assign(forced)  # pylint: disable=protected-access
    for seed in range(3):
        out = helpers.forward(model, batch, uniform=uniform(seed), training=False)
        weighted = batch["masked_lm_weights"] > 0
        assert not np.any(out["sampled_ids"].numpy()[weighted] == 7)
        assert out["is_replaced"].numpy().sum() == weighted.sum()


def test_rtd_loss_does_not_train_the_generator(model):
    batch = make_batch(seed=3)
    product = {id(v) for v in model.discriminator_variables()}
    generator_only = [v for layer in (model.generator, model.generator_head)
                      for v in layer.trainable_weights if id(v) not in product]
    assert any("transformer_layer" in v.path for v in generator_only)
    assert any("generator_predictions" in v.path for v in generator_only)
    shared = model.embeddings.token_embedding.embeddings
    with tf.GradientTape(persistent=True) as tape:
        out = helpers.forward(model, batch, uniform=uniform(), training=True)
        _, values = losses.pretraining_loss(out, batch, disc_weight=50.0)
    rtd = tape.gradient(values["rtd_loss"], generator_only)
    mlm = tape.gradient(values["mlm_loss"], generator_only)
    for variable, grad in zip(generator_only, rtd):
        assert grad is None or not np.any(tf.convert_to_tensor(grad).numpy()), variable.path
    nonzero = [g is not None and np.any(tf.convert_to_tensor(g).numpy()) for g in mlm]
    assert all(nonzero), [v.path for v, n in zip(generator_only, nonzero) if not n]
    # The discriminator and the shared embeddings do learn from the RTD loss.
    disc = tape.gradient(values["rtd_loss"],
                         [shared] + model.discriminator_head.trainable_weights)
    assert all(g is not None and np.any(tf.convert_to_tensor(g).numpy()) for g in disc)
    shared_mlm = tape.gradient(values["mlm_loss"], shared)
    assert shared_mlm is not None and np.any(tf.convert_to_tensor(shared_mlm).numpy())


def test_inference_is_deterministic_for_a_fixed_uniform(model):
    batch = make_batch(seed=4)
    first = helpers.forward(model, batch, uniform=uniform(1), training=False)
    second = helpers.forward(model, batch, uniform=uniform(1), training=False)
    for key in first:
        np.testing.assert_array_equal(first[key].numpy(), second[key].numpy())
    # Training mode applies dropout.
    noisy = helpers.forward(model, batch, uniform=uniform(1), training=True)
    assert not np.allclose(noisy["disc_logits"].numpy(), first["disc_logits"].numpy())


def test_invalid_arguments():
    tiny = sizes.SIZES["tiny"]
    with pytest.raises(ValueError, match="temperature"):
        pretrainer.ElectraPretrainer(VOCAB, make_shape(), temperature=0.0)
    with pytest.raises(ValueError, match="embedding_size"):  # tied, of another width
        pretrainer.ElectraPretrainer(VOCAB, make_shape(
            generator=sizes.generator_size(sizes.SIZES["small"], 0.25)))
    with pytest.raises(ValueError, match="tie='all'"):  # all: the discriminator's shape
        pretrainer.ElectraPretrainer(VOCAB, make_shape("all"))
    with pytest.raises(ValueError, match="num_heads"):
        pretrainer.ElectraPretrainer(VOCAB, make_shape(
            generator=dataclasses.replace(tiny, num_heads=3)))


def test_calling_the_model_on_a_batch_says_what_to_call(model):
    """The objective drives the model: `model(batch)` says so, built or not, and the
    pair `build` takes survives Keras' build config."""
    fresh = pretrainer.ElectraPretrainer(VOCAB, make_shape())
    for m in (fresh, model):
        with pytest.raises(TypeError, match=r"build_for\(seq_length, num_predictions\).*"
                                            r"model.objective.forward\(model, batch, "
                                            r"context\)"):
            m(make_batch())
    assert not fresh.built
    fresh.build_from_config(model.get_build_config())
    assert len(fresh.weights) == len(model.weights)


def test_model_config_builds_the_configured_model():
    import importlib.util  # pylint: disable=g-import-not-at-top
    import pathlib  # pylint: disable=g-import-not-at-top
    path = pathlib.Path(__file__).resolve().parents[2] / "configs" / "electra.py"
    spec = importlib.util.spec_from_file_location("electra_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("tiny")
    config.model.disc_weight = 20.0
    model = model_config.pretrainer(config, vocabulary_size=VOCAB)
    assert model.discriminator_size == sizes.SIZES["tiny"]
    assert model.generator_size.hidden_size == round(
        64 * config.model.generator_hidden_fraction)
    assert model.shape.tie == config.model.tie == "embeddings"
    clone = pretrainer.ElectraPretrainer.from_config(model.get_config())
    assert clone.shape == model.shape
    assert (clone.objective.name, clone.objective.disc_weight) == ("electra", 20.0)
    assert clone.get_config() == model.get_config()


def test_a_model_only_checkpoint_restores_every_variable(tmp_path):
    """tf.train.Checkpoint(model=...) alone must reach every variable (a regression: the
    transformer blocks once sat in a list, which Keras 3 hides from TF checkpoints, so
    only the optimizer's slot list saved them)."""
    saved = make_model()
    rng = np.random.default_rng(0)
    for v in saved.weights:  # values a fresh model cannot have by chance
        v.assign(rng.normal(size=v.shape).astype("float32"))
    path = tf.train.Checkpoint(model=saved).write(str(tmp_path / "ckpt"))
    fresh = make_model()
    tf.train.Checkpoint(model=fresh).read(path).assert_consumed()
    assert len(fresh.weights) == len(saved.weights)
    for a, b in zip(saved.weights, fresh.weights):
        assert a.path.split("/", 1)[1] == b.path.split("/", 1)[1]  # model names differ
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
