"""`adversarial`: the generator trained to fool the discriminator, by reinforcement
learning (the paper's Section 3.2 and Appendix F: its generator reached 58% MLM accuracy
against 65% by maximum likelihood, and GLUE below joint training).

At each masked position the generator's sample is an action and the discriminator's
RTD loss there, on the corrupted input, is its reward. Our RTD head predicts "replaced"
(D_rep = sigmoid(disc_logit)), so with D(original) = 1 − D_rep the reward is
−log D(original) where the sample equals the original (`is_replaced` 0) and
−log(1 − D(original)) where it does not: `losses.rtd_token_losses` at that position.

    generator     policy loss: mean of −(reward − baseline) · log p_G(sample), reward and
                  baseline constants (no gradient reaches the discriminator through the
                  reward); its gradient is the policy gradient of the discriminator's loss
    baseline      b = a linear layer on the generator's last hidden state at the position
                  (a stop-gradient: the baseline never trains the generator), trained by
                  mean of (reward − b)²
    discriminator disc_weight · RTD, as in joint
    loss          policy + baseline + disc_weight · RTD + adversarial_mlm_weight · MLM

Hyper-parameters (the paper gives none beyond the above; ours, chosen here):
- one sample per position, no discount, no entropy bonus; the losses are means over the
  global batch's masked positions, as MLM is;
- the baseline is Dense(1), kernel zeros and bias ln 2: it starts at the reward of a
  discriminator that knows nothing (D = 1/2 everywhere); the run's optimizer and schedule
  train it (its bias not weight-decayed, as no bias is), its loss weighed 1;
- the log-probability is that of the distribution sampled (the step's temperature,
  config.model.temperature or its schedule, and config.model.disallow_correct's
  renormalisation);
- config.train.adversarial_mlm_weight = 0: no MLM term (the paper's adversarial
  generator has none); the MLM loss and accuracy are still measured, not optimised.

Metrics (training, TensorBoard): `loss` (the total above, what the step differentiates),
`policy_loss`, `reward` (the mean reward at masked positions, i.e. the discriminator's
RTD loss there) and `baseline_loss`, beside the objective's own (`objective_loss`: MLM +
disc_weight · RTD, not optimised here;
`masked_lm_accuracy`: how good a language model the generator still is). The baseline
is in the checkpoint (`baseline`), so a resumed run repeats an uninterrupted one; export
takes the discriminator only.

>>> from configs import electra
>>> config = electra.get_config("tiny")
>>> config.train.algorithm = "adversarial"
>>> config.model.tie = "all"
>>> Adversarial(config)
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.model.tie='all': config.train.algorithm='adversarial' trains the generator to fool the discriminator, which cannot be the same encoder; use tie=embeddings, none or gdes
"""

import math

import keras
import tensorflow as tf

from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import losses
from electra_tf.model import sampling
from electra_tf.training.algorithms import base


class Adversarial(base.Algorithm):
    """The generator by the policy gradient of the discriminator's loss; the
    discriminator by its RTD loss; a learned baseline by regression to the reward."""

    name = "adversarial"
    metric_names = ("policy_loss", "reward", "baseline_loss")

    def __init__(self, config):
        base.require_config(config, self.name)
        super().__init__(config)
        base.require_discriminator(config, "rewards the generator by the "
                                   "discriminator's loss")
        tie = model_config.shape(config).tie
        if tie == "all":
            raise errors.UserError(
                f"config.model.tie={tie!r}: config.train.algorithm='adversarial' trains "
                "the generator to fool the discriminator, which cannot be the same "
                "encoder; use tie=embeddings, none or gdes")
        self.disallow_correct = config.model.disallow_correct
        self.mlm_weight = config.train.adversarial_mlm_weight
        self.baseline = None  # `build`

    def build(self, train_config, model, dtype_policy):
        del train_config
        self.baseline = keras.layers.Dense(
            1, kernel_initializer="zeros",
            bias_initializer=keras.initializers.Constant(math.log(2.0)),
            dtype=dtype_policy, name="adversarial_baseline")
        self.baseline.build((None, model.shape.generator.hidden_size))

    def layers(self):
        return [self.baseline]

    def loss(self, objective, loss, values, stage, outputs, batch, num_masked):
        del loss, stage
        positions = batch["masked_lm_positions"]
        rewards = losses.at_positions(                                          # [B, P]
            losses.rtd_token_losses(outputs["disc_logits"], outputs["is_replaced"]),
            positions)
        baselines = tf.cast(tf.squeeze(self.baseline(
            tf.stop_gradient(outputs["generator_hidden"])), -1), tf.float32)   # [B, P]
        log_probs = sampling.log_probability(
            outputs["mlm_logits"], outputs["sampled_ids"], outputs["temperature"],
            batch["masked_lm_ids"] if self.disallow_correct else None)         # [B, P]
        # Rewards and advantages are constants there: no gradient into the discriminator.
        policy, baseline, tokens = losses.policy_gradient_loss(
            log_probs, rewards, baselines, batch["masked_lm_weights"], num_masked)
        total = (policy + baseline + objective.disc_weight * values["rtd_loss"]
                 + self.mlm_weight * values["mlm_loss"])
        return total, {**values, **tokens, "policy_loss": policy,
                       "baseline_loss": baseline}

    def metric_inputs(self, batch, values):
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)
        return {"policy_loss": (values["policy_token_losses"], weights),
                "reward": (values["reward_tokens"], weights),
                "baseline_loss": (values["baseline_token_losses"], weights)}

    def checkpoint_items(self):
        return {"baseline": self.baseline} if self.baseline is not None else {}
