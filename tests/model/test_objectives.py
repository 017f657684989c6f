"""Each pre-training objective on a tiny model: what it builds, computes, counts and costs."""

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf.model import flops
from electra_tf.model import objectives
from electra_tf.model import pretrainer
from electra_tf.model import sizes
from electra_tf.model.objectives import base
from electra_tf.training import metrics
from tests import helpers

TINY = sizes.SIZES["tiny"]
SHAPE = sizes.ModelShape(TINY, sizes.generator_size(TINY, 0.5))
V, S, P = 32, 8, 3  # V: the test vocab (helpers.write_vocab)


def batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, V, (2, S)).astype("int32")
    mask = np.ones((2, S), "int32")
    mask[1, 6:] = 0
    positions = np.array([[1, 3, 5], [2, 4, 0]], "int32")
    weights = np.array([[1, 1, 1], [1, 1, 0]], "float32")
    masked = ids.copy()
    for row in range(2):
        for p, w in zip(positions[row], weights[row]):
            if w:
                masked[row, p] = 4  # [MASK]
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
            "masked_input_ids": masked, "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, 1), "masked_lm_weights": weights}


def build(name):
    model = pretrainer.ElectraPretrainer(V, SHAPE, objective=name, dropout=0.0)
    return model.build_for(S, P)


@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_every_objective_runs_its_loss_and_metrics(name):
    model = build(name)
    objective = objectives.OBJECTIVES.create(name)
    b = batch()
    outputs = helpers.forward(model, b, uniform=np.full((2, P), 0.5, "float32"), training=False)
    loss, values = objective.loss(outputs, b)
    assert np.isfinite(float(loss))
    assert float(loss) == pytest.approx(float(objective.total(values)))
    m = metrics.PretrainingMetrics(objective)
    m.update(b, objective.compact(outputs), values)
    out = m.result()
    assert list(out) == [*(n for n in objective.names if n not in ("grad_norm", "loss")),
                         "objective_loss"]
    assert out["objective_loss"] == pytest.approx(float(loss), rel=1e-5)
    assert not any(k in objective.compact(outputs) for k in objective.vocab_logits)


def test_mlm_builds_no_generator_and_predicts_from_the_masked_input():
    model = build("mlm")
    assert model.generator is None and model.generator_head is None
    assert not [v for v in model.weights if "generator" in v.path]
    # Its MLM head projects with the model's own embedding table.
    assert model.discriminator_head.token_embedding is model.embeddings.token_embedding
    outputs = helpers.forward(model, batch())
    assert set(outputs) == {"mlm_logits"} and outputs["mlm_logits"].shape == (2, P, V)
    assert objectives.OBJECTIVES.create("mlm").loss_names == ("mlm_loss",)


def test_electra_15_counts_the_discriminator_only_at_masked_positions():
    b = batch()
    outputs = helpers.forward(build("electra"), b, uniform=np.full((2, P), 0.3, "float32"))
    _, all_tokens = objectives.OBJECTIVES.create("electra").loss(outputs, b)
    _, masked = objectives.OBJECTIVES.create("electra_15").loss(outputs, b)
    assert masked["mlm_loss"] == all_tokens["mlm_loss"]  # same generator loss
    per_token = all_tokens["rtd_token_losses"].numpy()  # [B, S]
    expected = sum(per_token[r, p] * w for r in range(2) for p, w in
                   zip(b["masked_lm_positions"][r], b["masked_lm_weights"][r])) / 5
    assert float(masked["rtd_loss"]) == pytest.approx(expected, rel=1e-6)
    # Changing the discriminator's logits away from masked positions changes nothing.
    changed = dict(outputs, disc_logits=tf.tensor_scatter_nd_update(
        outputs["disc_logits"], [[0, 0], [0, 7]], [9.0, -9.0]))
    assert float(objectives.OBJECTIVES.create("electra_15").loss(changed, b)[1][
        "rtd_loss"]) == pytest.approx(float(masked["rtd_loss"]))
    assert float(objectives.OBJECTIVES.create("electra").loss(changed, b)[1][
        "rtd_loss"]) != pytest.approx(float(all_tokens["rtd_loss"]))


def test_replace_mlm_reads_samples_where_mlm_reads_mask():
    model = build("replace_mlm")
    b = batch()
    outputs = helpers.forward(model, b, uniform=np.full((2, P), 0.7, "float32"), training=False)
    # The model's input at the masked positions is the generator's sample, not [MASK].
    at = np.take_along_axis(outputs["corrupted_ids"].numpy(), b["masked_lm_positions"], 1)
    np.testing.assert_array_equal(at[b["masked_lm_weights"] > 0],
                                  outputs["sampled_ids"].numpy()[b["masked_lm_weights"] > 0])
    assert outputs["lm_logits"].shape == (2, P, V)
    assert model.discriminator_head is not model.generator_head


def test_all_tokens_mlm_predicts_every_token():
    model = build("all_tokens_mlm")
    b = batch()
    outputs = helpers.forward(model, b, uniform=np.full((2, P), 0.7, "float32"), training=False)
    assert outputs["lm_logits"].shape == (2, S, V)
    _, values = objectives.OBJECTIVES.create("all_tokens_mlm").loss(outputs, b)
    per_token = values["lm_token_losses"].numpy()  # [B, S], labels: the original ids
    assert float(values["lm_loss"]) == pytest.approx(
        (per_token * b["input_mask"]).sum() / b["input_mask"].sum(), rel=1e-6)


def test_gradients_reach_what_each_objective_trains():
    b = batch()
    for name in objectives.OBJECTIVES:
        model = build(name)
        objective = objectives.OBJECTIVES.create(name)
        with tf.GradientTape() as tape:
            outputs = helpers.forward(model, b, uniform=np.full((2, P), 0.5, "float32"), training=True)
            loss, _ = objective.loss(outputs, b)
        grads = tape.gradient(loss, model.trainable_variables)
        unused = [v.path for g, v in zip(grads, model.trainable_variables) if g is None]
        assert not unused, (name, unused)


def test_flops_count_each_objectives_own_passes():
    seq, predictions = 128, 19
    cost = {name: objectives.training_flops(SHAPE, seq, predictions, 1000, name)
            for name in objectives.OBJECTIVES}
    assert cost["electra"] == cost["electra_15"]  # the same passes; only the loss differs
    assert cost["mlm"] < cost["electra"]          # no generator, an MLM head at P positions
    encoder = 3 * flops.encoder_flops(TINY, seq)
    assert cost["mlm"] == encoder + 3 * flops.mlm_head_flops(TINY, predictions, 1000)
    head_gap = 3 * flops.mlm_head_flops(TINY, seq - predictions, 1000)
    assert cost["all_tokens_mlm"] - cost["replace_mlm"] == head_gap  # every position
    assert cost["replace_mlm"] == cost["mlm"] + 3 * flops.generator_flops(
        SHAPE.generator, seq, predictions, 1000)


def test_an_unknown_objective_names_the_key():
    with pytest.raises(Exception, match=r"config.model.objective='bert': choose one of"):
        build("bert")


def test_every_objective_is_made_from_the_runs_config():
    """One construction for every member, `Member(config)`: RTD weighed by
    config.model.disc_weight; without a config (class facts only), by the config's
    default."""
    config = electra_configs.get_config("tiny")
    default = config.model.disc_weight
    config.model.disc_weight = 7.0
    for name, member in objectives.OBJECTIVES.items():
        assert issubclass(member, base.Objective) and member.name == name
        assert objectives.OBJECTIVES.create(name, config).disc_weight == 7.0
        assert objectives.OBJECTIVES.create(name).disc_weight == base.DISC_WEIGHT == default


def test_argmax_is_tfs_first_largest_index_eager_and_compiled():
    """`base.argmax` (what `compact` hands the metrics) is `tf.argmax`'s id, ties to the
    first largest, in eager mode and under XLA as the train step runs it."""
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(4, 9, 300)).astype("float32")
    logits[0, 0, [5, 17, 299]] = 9.0            # a tie: the first of them
    logits[1, 2] = 0.0                          # all equal: id 0
    logits[2, 3, 299] = 9.0                     # the last id
    logits = tf.constant(logits)
    expected = tf.argmax(logits, -1, output_type=tf.int32).numpy()
    assert expected[0, 0] == 5 and expected[1, 2] == 0 and expected[2, 3] == 299
    for fn in (base.argmax, tf.function(base.argmax, jit_compile=True)):
        got = fn(logits)
        assert got.dtype == tf.int32
        np.testing.assert_array_equal(got.numpy(), expected)
