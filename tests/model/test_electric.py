"""ELECTRIC (`model/objectives/electric.py`): the two-tower cloze generator never reads the
token it predicts, every sampled position is noise, the discriminator's logit is its
energy + log q + log(p / (1 − p)), and the noise term carries no gradient."""

import math

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf import compat
from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import context
from electra_tf.model import flops
from electra_tf.model import objectives
from electra_tf.model.objectives import base
from electra_tf.training import predictions
from tests import helpers
from tests.model import test_objectives

V, S, P = test_objectives.V, test_objectives.S, test_objectives.P


@pytest.fixture(scope="module")
def model():
    return test_objectives.build("electric")


def _uniform():
    return np.full((2, P), 0.5, "float32")


def test_the_towers_never_read_the_token_they_predict(model):
    b = test_objectives.batch()
    before = helpers.forward(model, b, uniform=_uniform(), training=False)["cloze_logits"].numpy()
    t = 3
    changed = dict(b, input_ids=b["input_ids"].copy())
    changed["input_ids"][:, t] = (changed["input_ids"][:, t] + 7) % (V - 5) + 5
    after = helpers.forward(model, changed, uniform=_uniform(), training=False)["cloze_logits"].numpy()
    np.testing.assert_array_equal(after[:, t], before[:, t])  # q at t: not moved at all
    for neighbour in (t - 1, t + 1):  # the positions that read token t did move
        assert np.abs(after[:, neighbour] - before[:, neighbour]).max() > 1e-4


def test_no_candidate_reads_its_own_token_at_any_position(model):
    """Every real token but the last of each row ([SEP]: its right neighbour is padding
    or wraps around), two segments and padding in the batch, in training too (dropout on
    and seeded): q at t never moves when token t changes."""
    b = test_objectives.batch()
    b["segment_ids"][0, 4:] = 1
    seed = tf.constant([3, 4], tf.int64)

    def cloze(batch):
        with context.entered(context.StepContext(seed=seed)):
            return model.generator({"token_ids": batch["input_ids"],
                                    "segment_ids": batch["segment_ids"],
                                    "padding_mask": batch["input_mask"]},
                                   training=True).numpy()
    before = cloze(b)
    for row in range(2):
        for t in range(1, int(b["input_mask"][row].sum()) - 1):
            changed = dict(b, input_ids=b["input_ids"].copy())
            changed["input_ids"][row, t] = (changed["input_ids"][row, t] + 7) % (V - 5) + 5
            np.testing.assert_array_equal(cloze(changed)[row, t], before[row, t],
                                          err_msg=f"row {row}, position {t}")


def test_every_sampled_position_is_noise_even_where_the_sample_is_the_original(model):
    b = test_objectives.batch()
    favourite = 9
    b["input_ids"][b["input_ids"] == favourite] = 10
    for row in range(2):
        for position, weight in zip(b["masked_lm_positions"][row], b["masked_lm_weights"][row]):
            if weight:
                b["input_ids"][row, position] = favourite
    b["masked_lm_ids"] = np.take_along_axis(b["input_ids"], b["masked_lm_positions"], 1)
    b["masked_input_ids"] = np.where(b["masked_input_ids"] == 4, 4, b["input_ids"])
    bias = compat.masked_lm_head_parts(model.generator_head).bias
    saved = bias.numpy()
    bias.assign(np.where(np.arange(V) == favourite, 100.0, 0.0).astype("float32"))
    try:
        outputs = helpers.forward(model, b, uniform=_uniform(), training=False)
    finally:
        bias.assign(saved)
    weights = b["masked_lm_weights"] > 0
    np.testing.assert_array_equal(outputs["sampled_ids"].numpy()[weights], favourite)
    np.testing.assert_array_equal(outputs["corrupted_ids"].numpy(), b["input_ids"])
    expected = np.zeros((2, S), "float32")
    for row in range(2):
        expected[row, b["masked_lm_positions"][row][weights[row]]] = 1.0
    np.testing.assert_array_equal(outputs["is_replaced"].numpy(), expected)


def test_discriminator_logits_are_energy_plus_log_q_plus_prior_odds(model):
    b = test_objectives.batch()
    outputs = helpers.forward(model, b, uniform=_uniform(), training=False)
    corrupted = outputs["corrupted_ids"]
    sequence = model.discriminator({"token_ids": corrupted, "segment_ids": b["segment_ids"],
                                    "padding_mask": b["input_mask"]}, training=False)
    energies = model.discriminator_head(sequence).numpy()
    log_q = np.take_along_axis(tf.nn.log_softmax(outputs["cloze_logits"]).numpy(),
                               corrupted.numpy()[..., None], -1)[..., 0]
    np.testing.assert_allclose(outputs["disc_logits"].numpy(),
                               energies + log_q + math.log(0.15 / 0.85), rtol=1e-5, atol=1e-5)


def test_the_losses_count_real_tokens_and_never_padding(model):
    """cloze: Σ over the candidates of −log q(original) / the real tokens; rtd: the sigmoid
    cross-entropy of the whole logit against noise labels, mean over the real tokens;
    total: cloze + disc_weight · rtd. Logits at padding change nothing."""
    b = test_objectives.batch()
    outputs = helpers.forward(model, b, uniform=_uniform(), training=False)
    mask = b["input_mask"].astype("float64")
    log_q = tf.nn.log_softmax(outputs["cloze_logits"]).numpy().astype("float64")
    original = np.take_along_axis(log_q, b["input_ids"][..., None], -1)[..., 0]
    cloze = -(original * base.candidates(b).numpy()).sum() / mask.sum()
    logits = outputs["disc_logits"].numpy().astype("float64")
    labels = outputs["is_replaced"].numpy()
    rtd = ((np.logaddexp(0, logits) - labels * logits) * mask).sum() / mask.sum()
    total, values = model.objective.loss(outputs, b)
    assert float(values["cloze_loss"]) == pytest.approx(cloze, rel=1e-5)
    assert float(values["rtd_loss"]) == pytest.approx(rtd, rel=1e-5)
    assert float(total) == pytest.approx(cloze + 50.0 * rtd, rel=1e-5)
    padded = dict(outputs, disc_logits=tf.where(b["input_mask"] > 0, outputs["disc_logits"],
                                                1e3),
                  cloze_logits=tf.where(b["input_mask"][..., None] > 0,
                                        outputs["cloze_logits"], -1e3))
    assert float(model.objective.loss(padded, b)[0]) == pytest.approx(float(total), rel=1e-6)


def test_the_discriminator_loss_never_trains_the_towers(model):
    b = test_objectives.batch()
    towers = [v for tower in (model.generator.ltr, model.generator.rtl)
              for block in tower.blocks for v in block.trainable_variables]
    with tf.GradientTape() as tape:
        outputs = helpers.forward(model, b, uniform=_uniform(), training=True)
        _, values = model.objective.loss(outputs, b)
    grads = tape.gradient(values["rtd_loss"], towers + model.discriminator.trainable_variables)
    assert all(g is None for g in grads[:len(towers)])
    assert all(g is not None for g in grads[len(towers):])


def test_the_cloze_loss_counts_the_real_tokens_but_cls_and_each_sep():
    b = {"input_mask": np.array([[1, 1, 1, 1, 1, 1, 0, 0], [1] * 8]),
         "segment_ids": np.array([[0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]])}
    np.testing.assert_array_equal(base.candidates(b).numpy(),
                                  [[0, 1, 0, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1, 0]])


def test_the_towers_take_the_configs_attention_dropout():
    """Both towers' attention probabilities are dropped at config.model.attention_dropout,
    as ELECTRA's generator's (not at config.model.dropout)."""
    model = test_objectives.pretrainer.ElectraPretrainer(
        V, test_objectives.SHAPE, objective="electric", dropout=0.1,
        attention_dropout=0.0).build_for(S, P)
    for tower in (model.generator.ltr, model.generator.rtl):
        assert tower.attention_dropout == 0.0
        for block in tower.blocks:
            parts = compat.encoder_block_parts(block)
            assert parts.attention.dropout == 0.0 and parts.output_dropout.rate == 0.1


def test_tie_all_and_other_algorithms_are_refused_in_one_line():
    config = electra_configs.get_config("tiny")
    config.model.objective = "electric"
    config.model.tie = "all"
    with pytest.raises(errors.UserError, match=r"objective='electric': config.model.tie='all'"):
        model_config.pretrainer(config, V)
    config.model.tie = "embeddings"
    config.train.algorithm = "two_stage"
    with pytest.raises(errors.UserError, match=r"algorithm='two_stage'.*use algorithm joint"):
        model_config.pretrainer(config, V)


def test_flops_count_two_towers_and_the_cloze_head_at_every_position():
    shape, seq = test_objectives.SHAPE, 128
    g, d = shape.generator, shape.discriminator
    joined = flops.mlm_head_flops(g, seq, 1000) + seq * 2 * g.hidden_size * g.embedding_size
    forward = 2 * flops.encoder_flops(g, seq) + joined
    discriminator = 3 * (flops.encoder_flops(d, seq) + flops.rtd_head_flops(d, seq))
    assert objectives.training_flops(shape, seq, 19, 1000, "electric") == \
        discriminator + 3 * forward
    assert objectives.training_flops(shape, seq, 19, 1000, "electric", "frozen") == \
        discriminator + forward


def test_the_towers_seeded_dropout_is_a_function_of_the_seed():
    model = test_objectives.pretrainer.ElectraPretrainer(
        V, test_objectives.SHAPE, objective="electric", dropout=0.5).build_for(S, P)
    b = test_objectives.batch()

    def towers(seed):
        with context.entered(context.StepContext(seed=tf.constant(seed, tf.int64))):
            return model.generator({"token_ids": b["input_ids"],
                                    "segment_ids": b["segment_ids"],
                                    "padding_mask": b["input_mask"]}, training=True).numpy()
    first, again, other = towers([1, 2]), towers([1, 2]), towers([1, 3])
    np.testing.assert_array_equal(first, again)
    assert np.abs(first - other).max() > 1e-3
    loss = model.objective.loss(helpers.forward(model, b, uniform=_uniform(),
                                                seed=tf.constant([1, 2]), training=True),
                                b)[0]
    assert np.isfinite(float(loss))


def test_the_predictions_view_marks_every_sample_as_noise(model, tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    b = test_objectives.batch()
    shown = predictions.views(
        lambda batch, uniform: helpers.forward(model, batch, uniform=uniform), b, vocab,
        _uniform())
    assert [sum(t.masked for t in row) for row in shown] == [3, 2]
    assert all(t.replaced == t.masked for row in shown for t in row)
    assert all(0.0 <= t.probability <= 1.0 for row in shown for t in row)


@pytest.mark.parametrize("mode", ["blocks", "selective"])
def test_recomputing_the_towers_changes_no_gradient(model, mode):
    b = test_objectives.batch()
    inputs = {"token_ids": b["input_ids"], "segment_ids": b["segment_ids"],
              "padding_mask": b["input_mask"]}
    variables = model.generator.trainable_variables

    @tf.function
    def gradients(mode):
        with context.entered(context.StepContext(seed=tf.constant([1, 2], tf.int64),
                                                 remat=mode)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.sin(model.generator(inputs, training=True)))
        return tape.gradient(loss, variables)
    for plain, recomputed in zip(gradients("none"), gradients(mode)):
        np.testing.assert_allclose(tf.convert_to_tensor(recomputed),
                                   tf.convert_to_tensor(plain), rtol=1e-4, atol=1e-6)
