"""`all_tokens_mlm`: Replace MLM that predicts EVERY token of the input, not only the
masked ones (the paper's "All-Tokens MLM", Table 5): the MLM head projects to the
vocabulary at all S positions (`lm_logits` [B, S, V]) and the loss counts every real
token. Built without the paper's copy mechanism (its sigmoid gate that mixes copying the
input token into the softmax): plain softmax predictions, so unmasked tokens are easy.
"""

import tensorflow as tf

from electra_tf.model.objectives import base
from electra_tf.model.objectives import replace_mlm


class AllTokensMLM(replace_mlm.ReplaceMLM):
    name = "all_tokens_mlm"

    def targets(self, batch):
        """Every position; the original ids; the real tokens."""
        return (base.every_position(batch["input_ids"]), batch["input_ids"],
                tf.cast(batch["input_mask"], tf.float32))                    # [B, S] each

    def count(self, num_masked, num_tokens):
        del num_masked
        return num_tokens

    def predicted_positions(self, seq_len, num_predictions):
        del num_predictions
        return seq_len
