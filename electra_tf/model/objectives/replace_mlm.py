"""`replace_mlm`: masked language modelling where the masked positions hold generator
samples instead of [MASK] (the paper's "Replace MLM", Table 5).

    masked_input_ids ─► generator ─► MLM ─► sample ─► corrupted_ids (samples, not [MASK])
    corrupted_ids ─► encoder (the discriminator's shape) ─► MLM head at the masked
    positions ─► lm_logits [B, P, V], predicting the ORIGINAL tokens
    loss = MLM (generator) + LM (the model: `lm_loss`, `lm_accuracy`)

The generator trains by its own MLM loss, as in ELECTRA; the samples carry no gradient.
"""

import tensorflow as tf

from electra_tf.model import flops
from electra_tf.model import heads
from electra_tf.model import losses
from electra_tf.model.objectives import base


class ReplaceMLM(base.Objective):
    name = "replace_mlm"
    loss_names = ("mlm_loss", "lm_loss")
    names = ("loss", "mlm_loss", "lm_loss", "masked_lm_accuracy",
             "sampled_masked_lm_accuracy", "lm_accuracy", "replaced_fraction", "grad_norm")
    log_fields = (("mlm", "mlm_loss", 4), ("lm", "lm_loss", 4),
                  ("lm_accuracy", "lm_accuracy", 3))
    vocab_logits = ("mlm_logits", "lm_logits")

    def targets(self, batch):
        """(positions, original ids, weights) the model predicts: the masked positions."""
        return (batch["masked_lm_positions"], batch["masked_lm_ids"],
                tf.cast(batch["masked_lm_weights"], tf.float32))             # [B, P] each

    def count(self, num_masked, num_tokens):
        """The normalizer of `lm_loss`: the masked positions."""
        del num_tokens
        return num_masked

    def make_head(self, model):
        return heads.masked_lm_head(model.embeddings, dtype=model.dtype_policy,
                                    name="lm_predictions")

    def forward(self, model, batch, context):
        outputs = model.generate(batch, context)
        sequence = model.encode(outputs["corrupted_ids"], batch, context)
        positions, _, _ = self.targets(batch)
        outputs["lm_logits"] = tf.cast(model.discriminator_head(
            sequence, mask_positions=positions,
            vocabulary_multiple=context.vocabulary_multiple), tf.float32)  # [B, P or S, V]
        return outputs

    def loss(self, outputs, batch, num_masked=None, num_tokens=None):
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)         # [B, P]
        if num_masked is None:
            num_masked = tf.reduce_sum(weights)
        if num_tokens is None:
            num_tokens = tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))
        mlm_tokens = losses.mlm_token_losses(outputs["mlm_logits"], batch["masked_lm_ids"])
        mlm = losses.mean(mlm_tokens, weights, num_masked)
        _, labels, lm_weights = self.targets(batch)
        lm_tokens = losses.mlm_token_losses(outputs["lm_logits"], labels)
        lm = losses.mean(lm_tokens, lm_weights, self.count(num_masked, num_tokens))
        return mlm + lm, {"mlm_loss": mlm, "lm_loss": lm, "mlm_token_losses": mlm_tokens,
                          "lm_token_losses": lm_tokens}

    def total(self, values):
        return values["mlm_loss"] + values["lm_loss"]

    def metric_inputs(self, batch, outputs, values):
        _, labels, weights = self.targets(batch)
        return {**base.generator_metric_inputs(batch, outputs, values),
                "lm_loss": (values["lm_token_losses"], weights),
                "lm_accuracy": (base.agree(outputs["lm_predictions"], labels), weights)}

    def serve(self, model, sequence, input_mask):
        return base.serve_lm(model.discriminator_head, sequence, input_mask)

    def predicted_positions(self, seq_len, num_predictions):
        """How many positions the model's MLM head projects to the vocabulary at."""
        del seq_len
        return num_predictions

    def training_flops(self, shape, seq_len, num_predictions, vocab_size,
                       frozen_generator=False):
        d = shape.discriminator
        positions = self.predicted_positions(seq_len, num_predictions)
        return (base.generator_training_flops(shape, seq_len, num_predictions, vocab_size,
                                              frozen_generator)
                + 3 * (flops.encoder_flops(d, seq_len)
                       + flops.mlm_head_flops(d, positions, vocab_size)))
