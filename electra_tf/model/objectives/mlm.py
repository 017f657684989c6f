"""`mlm`: BERT's masked language model alone, the baseline of every comparison.

    masked_input_ids ─► encoder (the discriminator's shape) ─► MLM head at the masked
    positions ─► mlm_logits [B, P, V];  loss = MLM

No generator is built. The head is an MLM head on the model's own (tied) embeddings;
fine-tuning and export take this encoder, as they take ELECTRA's discriminator.
"""

import tensorflow as tf

from electra_tf.model import flops
from electra_tf.model import heads
from electra_tf.model import losses
from electra_tf.model.objectives import base


class MLM(base.Objective):
    name = "mlm"
    uses_generator = False
    loss_names = ("mlm_loss",)
    names = ("loss", "mlm_loss", "masked_lm_accuracy", "grad_norm")
    log_fields = (("masked_lm_accuracy", "masked_lm_accuracy", 3),)
    vocab_logits = ("mlm_logits",)

    def make_head(self, model):
        return heads.masked_lm_head(model.embeddings, dtype=model.dtype_policy,
                                    name="mlm_predictions")

    def forward(self, model, batch, context):
        sequence = model.encode(batch["masked_input_ids"], batch, context)  # no sampling
        return {"mlm_logits": tf.cast(model.discriminator_head(
            sequence, mask_positions=batch["masked_lm_positions"],
            vocabulary_multiple=context.vocabulary_multiple), tf.float32)}      # [B, P, V]

    def loss(self, outputs, batch, num_masked=None, num_tokens=None):
        del num_tokens
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)       # [B, P]
        if num_masked is None:
            num_masked = tf.reduce_sum(weights)
        tokens = losses.mlm_token_losses(outputs["mlm_logits"], batch["masked_lm_ids"])
        mlm = losses.mean(tokens, weights, num_masked)
        return mlm, {"mlm_loss": mlm, "mlm_token_losses": tokens}

    def total(self, values):
        return values["mlm_loss"]

    def metric_inputs(self, batch, outputs, values):
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)
        return {"mlm_loss": (values["mlm_token_losses"], weights),
                "masked_lm_accuracy": (base.agree(outputs["mlm_predictions"],
                                                  batch["masked_lm_ids"]), weights)}

    def serve(self, model, sequence, input_mask):
        return base.serve_lm(model.discriminator_head, sequence, input_mask)

    def training_flops(self, shape, seq_len, num_predictions, vocab_size,
                       frozen_generator=False):
        del frozen_generator  # no generator
        d = shape.discriminator
        return 3 * (flops.encoder_flops(d, seq_len)
                    + flops.mlm_head_flops(d, num_predictions, vocab_size))
