"""`electra_15`: ELECTRA whose discriminator loss (and metrics) count only the masked
positions, ~15% of the tokens (the paper's "ELECTRA 15%" ablation, Table 5). Everything
else, the forward pass included, is `electra`'s."""

from electra_tf.model import losses
from electra_tf.model.objectives import electra


class Electra15(electra.Electra):
    name = "electra_15"
    rtd_at_masked = True

    def scope(self, batch, values):
        """[B, S] → [B, P] at the masked positions, weighted by `masked_lm_weights`."""
        return (losses.at_positions(values, batch["masked_lm_positions"]),
                batch["masked_lm_weights"])
