"""ELECTRA's losses, as pure functions of the model's outputs and the batch.

MLM: cross-entropy of the generator at the masked positions (weighted by
`masked_lm_weights`). RTD: sigmoid cross-entropy of the discriminator over the real tokens
(`input_mask`), or only at the masked positions (`rtd_at_masked`: the paper's ELECTRA 15%).
Total: MLM + disc_weight × RTD. The other objectives (`model/objectives/`) combine the
same per-token losses.

Each loss is a sum divided by a normalizer: by default this batch's number of masked
positions / real tokens. Under a distribution strategy the train step passes the GLOBAL
counts (all-reduced), so each replica's loss is its share of the global mean and the
summed gradients are those of one big batch, whatever the number of replicas.

>>> import tensorflow as tf
>>> outputs = {"mlm_logits": tf.zeros([1, 2, 4]), "disc_logits": tf.zeros([1, 3]),
...            "is_replaced": tf.constant([[0., 1., 0.]])}
>>> batch = {"masked_lm_ids": tf.constant([[1, 2]]),
...          "masked_lm_weights": tf.constant([[1., 0.]]),
...          "input_mask": tf.constant([[1, 1, 0]])}
>>> loss, values = pretraining_loss(outputs, batch, disc_weight=50.0)
>>> round(float(values["mlm_loss"]), 4), round(float(values["rtd_loss"]), 4)  # ln 4, ln 2
(1.3863, 0.6931)
"""

import tensorflow as tf


def mlm_token_losses(logits, labels):
    """Per-position cross-entropy `[B, P]` (float32) of `[B, P, V]` logits."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32))


def rtd_token_losses(logits, is_replaced):
    """Per-token sigmoid cross-entropy `[B, S]` (float32)."""
    return tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(is_replaced, tf.float32), logits=tf.cast(logits, tf.float32))


def at_positions(values, positions):
    """`[B, S]` per-token values → `[B, P]` at the masked positions."""
    return tf.gather(values, tf.cast(positions, tf.int32), batch_dims=1)


def mean(token_losses, weights, count):
    """Σ losses · weights / count; max(count, 1): a batch with nothing to count (all
    padding) gives 0, not NaN."""
    return tf.reduce_sum(token_losses * weights) / tf.maximum(count, 1.0)


def pretraining_loss(outputs, batch, disc_weight, num_masked=None, num_tokens=None,
                     rtd_at_masked=False):
    """(total loss, values): values hold `mlm_loss`, `rtd_loss` and the per-token losses
    (`rtd_token_losses` [B, S], or [B, P] at the masked positions with `rtd_at_masked`).

    num_masked, num_tokens: the normalizers (default: this batch's own counts).
    """
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)           # [B, P]
    token_mask = tf.cast(batch["input_mask"], tf.float32)               # [B, S]
    if num_masked is None:
        num_masked = tf.reduce_sum(weights)
    if num_tokens is None:
        num_tokens = tf.reduce_sum(token_mask)

    mlm_tokens = mlm_token_losses(outputs["mlm_logits"], batch["masked_lm_ids"])
    rtd_tokens = rtd_token_losses(outputs["disc_logits"], outputs["is_replaced"])
    mlm = mean(mlm_tokens, weights, num_masked)
    if rtd_at_masked:
        rtd_tokens = at_positions(rtd_tokens, batch["masked_lm_positions"])  # [B, P]
        rtd = mean(rtd_tokens, weights, num_masked)
    else:
        rtd = mean(rtd_tokens, token_mask, num_tokens)
    values = {"mlm_loss": mlm, "rtd_loss": rtd,
              "mlm_token_losses": mlm_tokens, "rtd_token_losses": rtd_tokens}
    return mlm + disc_weight * rtd, values


def policy_gradient_loss(log_probs, rewards, baselines, weights, num_masked=None):
    """REINFORCE with a learned baseline, at the masked positions: (policy loss, baseline
    loss, values). All inputs `[B, P]` (float32); `num_masked` the normalizer (default:
    Σ weights).

    Minimising the policy loss, mean of −(reward − baseline) · log p(sample), ascends the
    expected reward (its gradient in the logits is −(reward − baseline) · ∇ log p); reward
    and baseline are constants to it. The baseline loss, mean of (reward − baseline)², is
    a regression of the baseline on the reward and trains the baseline only.
    `values`: `reward_tokens`, `policy_token_losses` and `baseline_token_losses`,
    `[B, P]`.

    >>> import tensorflow as tf
    >>> policy, baseline, _ = policy_gradient_loss(
    ...     tf.math.log([[0.5, 0.25]]), tf.constant([[2.0, 1.0]]),
    ...     tf.constant([[1.0, 1.0]]), tf.constant([[1.0, 1.0]]))
    >>> round(float(policy), 4), float(baseline)  # −(1 · ln 0.5 + 0 · ln 0.25) / 2
    (0.3466, 0.5)
    """
    weights = tf.cast(weights, tf.float32)
    if num_masked is None:
        num_masked = tf.reduce_sum(weights)
    rewards = tf.stop_gradient(tf.cast(rewards, tf.float32))
    baselines = tf.cast(baselines, tf.float32)
    advantage = tf.stop_gradient(rewards - baselines)
    policy_tokens = -advantage * log_probs
    policy = mean(policy_tokens, weights, num_masked)
    baseline_tokens = tf.square(rewards - baselines)
    baseline = mean(baseline_tokens, weights, num_masked)
    return policy, baseline, {"reward_tokens": rewards,
                              "policy_token_losses": policy_tokens,
                              "baseline_token_losses": baseline_tokens}
