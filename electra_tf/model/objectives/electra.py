"""`electra`: replaced-token detection (the paper's objective, the default).

    masked_input_ids ─► generator ─► MLM at the masked positions ─► sample ─► corrupted_ids
    corrupted_ids ─► discriminator ─► RTD head ─► disc_logits [B, S]
    loss = MLM (generator, masked positions) + disc_weight · RTD (discriminator, all real
    tokens)
"""

import tensorflow as tf

from electra_tf.model import flops
from electra_tf.model import heads
from electra_tf.model import losses
from electra_tf.model.objectives import base


class Electra(base.Objective):
    name = "electra"
    detects = True
    scores = True  # Σ log P(original)
    loss_names = ("mlm_loss", "rtd_loss")
    names = ("loss", "mlm_loss", "rtd_loss", "masked_lm_accuracy",
             "sampled_masked_lm_accuracy", "disc_accuracy", "disc_precision", "disc_recall",
             "disc_auc", "replaced_fraction", "grad_norm")
    log_fields = (("mlm", "mlm_loss", 4), ("rtd", "rtd_loss", 4), ("disc_auc", "disc_auc", 3))
    vocab_logits = ("mlm_logits",)
    rtd_at_masked = False  # the RTD loss over every real token

    def make_head(self, model):
        return heads.ReplacedTokenHead(model.shape.discriminator.hidden_size,
                                       dtype=model.dtype_policy,
                                       name="discriminator_predictions")

    def forward(self, model, batch, context):
        outputs = model.generate(batch, context)
        discriminated = model.encode(outputs["corrupted_ids"], batch, context)
        outputs["disc_logits"] = tf.cast(model.discriminator_head(discriminated),
                                         tf.float32)                       # [B, S]
        return outputs

    def loss(self, outputs, batch, num_masked=None, num_tokens=None):
        return losses.pretraining_loss(outputs, batch, self.disc_weight, num_masked,
                                       num_tokens, rtd_at_masked=self.rtd_at_masked)

    def total(self, values):
        return values["mlm_loss"] + self.disc_weight * values["rtd_loss"]

    def scope(self, batch, values):
        """(values at the tokens the RTD counts, their weights) of `values` [B, S]."""
        return values, tf.cast(batch["input_mask"], tf.float32)

    def metric_inputs(self, batch, outputs, values):
        probability = tf.sigmoid(outputs["disc_logits"])
        predicted, weights = self.scope(batch, tf.cast(probability > 0.5, tf.float32))
        is_replaced, _ = self.scope(batch, outputs["is_replaced"])
        # rtd_token_losses are already at the counted tokens (losses.pretraining_loss).
        return {**base.generator_metric_inputs(batch, outputs, values),
                "rtd_loss": (values["rtd_token_losses"], weights),
                "disc_accuracy": (base.agree(predicted, is_replaced), weights)}

    def detection(self, batch, outputs):
        is_replaced, weights = self.scope(batch, outputs["is_replaced"])
        probability, _ = self.scope(batch, tf.sigmoid(outputs["disc_logits"]))
        return is_replaced, probability, weights

    def serve(self, model, sequence, input_mask):
        probability = tf.sigmoid(tf.cast(model.discriminator_head(sequence), tf.float32))
        return {"replaced_probability": probability * tf.cast(input_mask, tf.float32)}

    def token_scores(self, model, sequence):
        """log P(original) = log(1 − sigmoid(logit)), stably."""
        return tf.math.log_sigmoid(-tf.cast(model.discriminator_head(sequence), tf.float32))

    def training_flops(self, shape, seq_len, num_predictions, vocab_size,
                       frozen_generator=False):
        d = shape.discriminator
        return (3 * (flops.encoder_flops(d, seq_len) + flops.rtd_head_flops(d, seq_len))
                + base.generator_training_flops(shape, seq_len, num_predictions, vocab_size,
                                                frozen_generator))
