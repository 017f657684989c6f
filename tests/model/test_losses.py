"""The losses against numpy: masked cross-entropy, sigmoid cross-entropy, normalizers."""

import numpy as np
import tensorflow as tf

from electra_tf.model import losses


def np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_sigmoid_ce(logits, labels):
    p = 1 / (1 + np.exp(-logits))
    return -(labels * np.log(p) + (1 - labels) * np.log(1 - p))


def make_case(seed=0):
    rng = np.random.default_rng(seed)
    outputs = {"mlm_logits": rng.normal(size=(2, 3, 7)).astype("float32"),
               "disc_logits": rng.normal(size=(2, 5)).astype("float32"),
               "is_replaced": rng.integers(0, 2, (2, 5)).astype("float32")}
    batch = {"masked_lm_ids": rng.integers(0, 7, (2, 3)).astype("int32"),
             "masked_lm_weights": np.array([[1, 1, 0], [1, 0, 0]], "float32"),
             "input_mask": np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], "int32")}
    return outputs, batch


def expected_sums(outputs, batch):
    log_probs = np_log_softmax(outputs["mlm_logits"].astype("float64"))
    mlm_tokens = -np.take_along_axis(log_probs, batch["masked_lm_ids"][..., None], -1)[..., 0]
    rtd_tokens = np_sigmoid_ce(outputs["disc_logits"].astype("float64"), outputs["is_replaced"])
    mlm_sum = np.sum(mlm_tokens * batch["masked_lm_weights"])
    rtd_sum = np.sum(rtd_tokens * batch["input_mask"])
    return mlm_tokens, rtd_tokens, mlm_sum, rtd_sum


def test_per_token_losses_match_numpy():
    outputs, batch = make_case()
    mlm_tokens, rtd_tokens, _, _ = expected_sums(outputs, batch)
    got_mlm = losses.mlm_token_losses(outputs["mlm_logits"], batch["masked_lm_ids"])
    got_rtd = losses.rtd_token_losses(outputs["disc_logits"], outputs["is_replaced"])
    assert got_mlm.dtype == tf.float32 and got_rtd.dtype == tf.float32
    np.testing.assert_allclose(got_mlm.numpy(), mlm_tokens, rtol=1e-5)
    np.testing.assert_allclose(got_rtd.numpy(), rtd_tokens, rtol=1e-5)


def test_weighted_and_masked_means():
    outputs, batch = make_case()
    _, _, mlm_sum, rtd_sum = expected_sums(outputs, batch)
    total, values = losses.pretraining_loss(outputs, batch, disc_weight=50.0)
    mlm = mlm_sum / 3   # three masked positions with weight 1
    rtd = rtd_sum / 7   # seven real tokens
    np.testing.assert_allclose(float(values["mlm_loss"]), mlm, rtol=1e-5)
    np.testing.assert_allclose(float(values["rtd_loss"]), rtd, rtol=1e-5)
    np.testing.assert_allclose(float(total), mlm + 50.0 * rtd, rtol=1e-5)
    assert tuple(values["mlm_token_losses"].shape) == (2, 3)
    assert tuple(values["rtd_token_losses"].shape) == (2, 5)


def test_padding_and_zero_weight_entries_do_not_count():
    outputs, batch = make_case()
    _, values = losses.pretraining_loss(outputs, batch, disc_weight=1.0)
    changed = {k: v.copy() for k, v in outputs.items()}
    changed["mlm_logits"][0, 2] += 100.0 * np.arange(7)   # weight-0 prediction
    changed["disc_logits"][1, 3:] = -1000.0                # padding tokens
    changed["is_replaced"][1, 3:] = 1.0
    _, again = losses.pretraining_loss(changed, batch, disc_weight=1.0)
    np.testing.assert_allclose(float(again["mlm_loss"]), float(values["mlm_loss"]), rtol=1e-6)
    np.testing.assert_allclose(float(again["rtd_loss"]), float(values["rtd_loss"]), rtol=1e-6)


def test_global_normalizers_divide_the_sums():
    outputs, batch = make_case()
    _, _, mlm_sum, rtd_sum = expected_sums(outputs, batch)
    total, values = losses.pretraining_loss(outputs, batch, disc_weight=2.0,
                                            num_masked=tf.constant(12.0),
                                            num_tokens=tf.constant(28.0))
    np.testing.assert_allclose(float(values["mlm_loss"]), mlm_sum / 12, rtol=1e-5)
    np.testing.assert_allclose(float(values["rtd_loss"]), rtd_sum / 28, rtol=1e-5)
    np.testing.assert_allclose(float(total), mlm_sum / 12 + 2.0 * rtd_sum / 28, rtol=1e-5)
    # Replicas' shares of a global batch add up to the global mean.
    halves = [{k: v[i:i + 1] for k, v in d.items()} for d in (outputs, batch) for i in (0, 1)]
    (o0, o1), (b0, b1) = halves[:2], halves[2:]
    shares = [losses.pretraining_loss(o, b, 50.0, num_masked=3.0, num_tokens=7.0)[0]
              for o, b in ((o0, b0), (o1, b1))]
    whole, _ = losses.pretraining_loss(outputs, batch, 50.0)
    np.testing.assert_allclose(float(shares[0] + shares[1]), float(whole), rtol=1e-5)


def test_zero_weight_batch_is_finite_zero():
    outputs, batch = make_case()
    batch = dict(batch, masked_lm_weights=np.zeros((2, 3), "float32"),
                 input_mask=np.zeros((2, 5), "int32"))
    total, values = losses.pretraining_loss(outputs, batch, disc_weight=50.0)
    for value in (total, values["mlm_loss"], values["rtd_loss"]):
        assert np.isfinite(float(value))
        assert float(value) == 0.0
    # The gradient is finite too.
    logits = tf.Variable(outputs["mlm_logits"])
    with tf.GradientTape() as tape:
        total, _ = losses.pretraining_loss(dict(outputs, mlm_logits=logits), batch, 50.0)
    grad = tape.gradient(total, logits)
    assert np.all(np.isfinite(grad.numpy())) and not np.any(grad.numpy())
