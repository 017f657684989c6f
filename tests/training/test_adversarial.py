"""The adversarial algorithm (training/algorithms/adversarial.py): its generator's gradient
is the policy gradient of the discriminator's loss, worked out by hand on a tiny case; it
trains from the command line, resumes exactly and exports the discriminator alone."""

import os
import types

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf import errors
from electra_tf.model import objectives
from electra_tf.serving import export
from electra_tf.training import algorithms
from tests import test_objectives_cli as objectives_cli
from tests import test_train
from tests.training import test_trainer

ADVERSARIAL = ("--config.train.algorithm=adversarial",)
# Short and uncompiled: two runs of 2-4 steps, no evaluation.
QUICK = (*ADVERSARIAL, "--config.data.eval_files=", "--config.train.jit_compile=false")


def _adversarial(temperature=1.0, disallow_correct=False, **train):
    config = electra_configs.get_config("tiny")
    config.train.algorithm = "adversarial"
    config.model.update(temperature=temperature, disallow_correct=disallow_correct)
    config.train.update(train)
    adversarial = algorithms.get(config)
    # The baseline reads the generator's hidden states: only its width is needed here.
    adversarial.build(config.train, types.SimpleNamespace(
        shape=types.SimpleNamespace(generator=types.SimpleNamespace(hidden_size=2))),
        "float32")
    return adversarial


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_the_generators_gradient_is_the_policy_gradient(temperature):
    # One sequence of 4 tokens, 3 prediction slots (the last one padding), vocabulary 3.
    # Slot 0 (position 1): original 1, sampled 2 (replaced). Slot 1 (position 2):
    # original 0, sampled 0 (the original: not replaced).
    adversarial = _adversarial(temperature)
    w, c = np.array([0.5, -1.0]), 0.25  # the baseline b = h · w + c
    adversarial.baseline.set_weights([w[:, None].astype("float32"), np.array([c], "float32")])
    logits = np.array([[[0.1, 0.5, -0.2], [0.3, -0.4, 0.0], [0.0, 0.0, 0.0]]])
    disc = np.array([[0.4, -1.0, 0.7, 0.0]])
    hidden = np.array([[[1.0, 0.5], [-0.5, 2.0], [0.0, 0.0]]])
    samples, positions = np.array([[2, 0, 1]]), np.array([[1, 2, 0]])
    weights = np.array([[1.0, 1.0, 0.0]])
    batch = {"masked_lm_positions": tf.constant(positions),
             "masked_lm_ids": tf.constant([[1, 0, 0]]),
             "masked_lm_weights": tf.constant(weights, tf.float32)}
    mlm_logits, disc_logits, generator_hidden = (
        tf.Variable(x, dtype=tf.float32) for x in (logits, disc, hidden))
    # The objective's losses, constants here: what they train is the objective's test.
    values = {"mlm_loss": tf.constant(1.5), "rtd_loss": tf.constant(0.25)}
    with tf.GradientTape(persistent=True) as tape:
        outputs = {"mlm_logits": mlm_logits, "disc_logits": disc_logits,
                   "generator_hidden": generator_hidden, "sampled_ids": tf.constant(samples),
                   "is_replaced": tf.constant([[0.0, 1.0, 0.0, 0.0]]),
                   "temperature": tf.constant(temperature)}  # the step's (model.generate)
        total, got = adversarial.loss(objectives.OBJECTIVES.create("electra"), None,
                                      values, "joint", outputs, batch, tf.constant(2.0))

    # By hand: D_rep = sigmoid(disc logit) at the position; reward −log D_rep where
    # replaced, −log(1 − D_rep) where not.
    d_rep = _sigmoid(disc[0, positions[0]])
    reward = np.array([-np.log(d_rep[0]), -np.log(1 - d_rep[1]), 0.0])
    baseline = hidden[0] @ w + c
    advantage = (reward - baseline) * weights[0]
    np.testing.assert_allclose(got["reward_tokens"][0, :2], reward[:2], rtol=1e-6)
    # ∂/∂logits of −Σ (r − b) · log softmax(logits / T)[sample] / n:
    #   −(r − b) · (onehot(sample) − softmax(logits / T)) / (T · n)
    onehot = np.eye(3)[samples[0]]
    expected = -advantage[:, None] * (onehot - _softmax(logits[0] / temperature)) / (
        temperature * 2.0)
    np.testing.assert_allclose(tape.gradient(total, mlm_logits)[0], expected, atol=1e-6)
    # No gradient reaches the discriminator through the reward, nor the generator's
    # states through the baseline.
    assert tape.gradient(total, disc_logits) is None
    assert tape.gradient(total, generator_hidden) is None
    # The baseline: ∂/∂(w, c) of Σ (r − b)² / n.
    kernel, bias = adversarial.baseline.trainable_variables
    np.testing.assert_allclose(tape.gradient(total, kernel)[:, 0],
                               -2 * advantage @ hidden[0] / 2.0, rtol=1e-5)
    np.testing.assert_allclose(tape.gradient(total, bias), [-2 * advantage.sum() / 2.0],
                               rtol=1e-5)
    # The loss: policy + baseline + disc_weight · RTD (no MLM term by default).
    policy = -(advantage * np.log(_softmax(logits[0] / temperature)[[0, 1, 2], samples[0]])
               ).sum() / 2.0
    np.testing.assert_allclose(float(total), policy + (advantage**2).sum() / 2.0 + 50 * 0.25,
                               rtol=1e-5)
    metrics = adversarial.metric_inputs(batch, got)
    assert set(metrics) == {"policy_loss", "reward", "baseline_loss"}
    # policy_loss: the token-weighted mean of the policy's token losses is its scalar.
    tokens, token_weights = metrics["policy_loss"]
    np.testing.assert_allclose(float(tf.reduce_sum(tokens * token_weights) / 2.0), policy,
                               rtol=1e-5)


def test_the_log_probability_is_the_sampled_distributions():
    # disallow_correct samples from the generator without the original token: the policy
    # gradient differentiates that distribution's log-probability.
    adversarial = _adversarial(disallow_correct=True, adversarial_mlm_weight=0.5)
    logits = tf.Variable([[[0.2, 1.0, -0.3]]])
    batch = {"masked_lm_positions": tf.constant([[1]]), "masked_lm_ids": tf.constant([[1]]),
             "masked_lm_weights": tf.constant([[1.0]])}
    values = {"mlm_loss": tf.Variable(1.5), "rtd_loss": tf.constant(0.0)}
    with tf.GradientTape() as tape:
        outputs = {"mlm_logits": logits, "disc_logits": tf.constant([[0.0, -1.5]]),
                   "generator_hidden": tf.zeros([1, 1, 2]),
                   "sampled_ids": tf.constant([[2]]), "is_replaced": tf.constant([[0., 1.]]),
                   "temperature": tf.constant(1.0)}
        total, got = adversarial.loss(objectives.OBJECTIVES.create("electra"), None,
                                      values, "joint", outputs, batch, tf.constant(1.0))
    p = _softmax(np.array([0.2, 1.0, -0.3]))
    p_without = p * [1, 0, 1] / (1 - p[1])  # the original (1) taken out
    advantage = float(got["reward_tokens"][0, 0]) - np.log(2.0)
    expected = -advantage * (np.eye(3)[2] - p_without)
    gradients = tape.gradient(total, [logits, values["mlm_loss"]])
    np.testing.assert_allclose(gradients[0][0, 0], expected, atol=1e-6)
    assert float(gradients[1]) == 0.5  # adversarial_mlm_weight


def test_micro_batches_take_the_whole_batchs_step():
    # The baseline's values and the reward ride through the accumulation loop too.
    plain = test_trainer._train(algorithm="adversarial", remat="none")  # pylint: disable=protected-access
    accumulated = test_trainer._train(algorithm="adversarial", remat="none",  # pylint: disable=protected-access
                                      accumulation_steps=2)
    test_trainer._assert_same(accumulated, plain)  # pylint: disable=protected-access
    assert {"reward", "baseline_loss"} <= set(plain[1])
    for mine, theirs in zip(accumulated[0].algorithm.baseline.weights,
                            plain[0].algorithm.baseline.weights):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), atol=1e-6)
    assert plain[0].algorithm.baseline.weights[1].numpy()[0] != np.float32(np.log(2.0))


@pytest.mark.parametrize("change, message", [
    ({"objective": "mlm"}, r"config.model.objective='mlm': config.train.algorithm="
                           r"'adversarial' rewards"),
    ({"tie": "all"}, r"config.model.tie='all': config.train.algorithm='adversarial'"),
])
def test_adversarial_errors_name_the_keys(change, message):
    config = electra_configs.get_config("tiny")
    config.train.algorithm = "adversarial"
    config.model.update(change)
    with pytest.raises(errors.UserError, match=message):
        algorithms.get(config)


def test_adversarial_trains_from_the_command_line_and_exports(data, tmp_path):
    """Its exact resume after SIGKILL, baseline and slots included, is
    tests/test_reliability.py's (slow)."""
    whole = str(tmp_path / "whole")
    objectives_cli._run(objectives_cli._command(data, whole, "electra", *QUICK,  # pylint: disable=protected-access
                                                steps=4))
    final = tf.train.latest_checkpoint(os.path.join(whole, "checkpoints"))

    # The baseline (and its optimizer slots) is in the checkpoint, and it trained.
    reader = tf.train.load_checkpoint(final)
    bias = reader.get_tensor("baseline/bias/.ATTRIBUTES/VARIABLE_VALUE")
    assert bias.shape == (1,) and bias[0] != np.float32(np.log(2.0))
    # Its metrics, and the generator's MLM accuracy it no longer optimises.
    logs = os.path.join(whole, "logs", "train")
    for tag in ("reward", "baseline_loss", "masked_lm_accuracy", "disc_auc"):
        scalars = test_train._scalars(logs, tag)  # pylint: disable=protected-access
        assert scalars and all(np.isfinite(v) for _, v in scalars), tag
    assert all(v > 0 for _, v in test_train._scalars(logs, "reward"))  # pylint: disable=protected-access

    # The export holds the discriminator alone: not the baseline (the generator's width,
    # 32, by 1; the discriminator's own head is 64 by 1).
    exported = export.export_run(whole, str(tmp_path / "models" / "1"), max_seq_length=8)
    loaded = tf.saved_model.load(exported)
    shapes = {tuple(v.shape) for v in loaded.variables}
    assert reader.get_tensor("baseline/_kernel/.ATTRIBUTES/VARIABLE_VALUE").shape == (32, 1)
    assert (64, 1) in shapes and (32, 1) not in shapes
    assert loaded.signatures["serving_default"](text=tf.constant(["a b"]))[
        "replaced_probability"].shape == (1, 8)
