"""The pre-training metrics, as Keras metric objects updated from the step's tensors.

Every value is a token-weighted mean over the tokens seen since the last `reset`, across
replicas and steps: `mlm_loss` and the MLM accuracies over masked positions, `rtd_loss` and
the discriminator's metrics over real tokens, `replaced_fraction` = the share of real
tokens the generator actually changed. `loss` = mlm_loss + disc_weight · rtd_loss.
"""

import keras
import tensorflow as tf

NAMES = ("loss", "mlm_loss", "rtd_loss", "masked_lm_accuracy", "sampled_masked_lm_accuracy",
         "disc_accuracy", "disc_precision", "disc_recall", "disc_auc", "replaced_fraction",
         "grad_norm")


class PretrainingMetrics:
    """Create inside `strategy.scope()`; `update` in replica context; `result` on the host."""

    def __init__(self, disc_weight: float):
        self.disc_weight = disc_weight
        self._means = {name: keras.metrics.Mean(name=name) for name in (
            "mlm_loss", "rtd_loss", "masked_lm_accuracy", "sampled_masked_lm_accuracy",
            "disc_accuracy", "replaced_fraction", "grad_norm")}
        self._precision = keras.metrics.Precision(thresholds=0.5, name="disc_precision")
        self._recall = keras.metrics.Recall(thresholds=0.5, name="disc_recall")
        self._auc = keras.metrics.AUC(num_thresholds=200, name="disc_auc")

    def update(self, batch, outputs, values, grad_norm=None):
        """Adds one replica's batch: `outputs` of the pre-trainer (with `mlm_predictions`,
        the argmax of `mlm_logits`), `values` of the loss."""
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)       # [B, P]
        labels = tf.cast(batch["masked_lm_ids"], tf.int32)
        tokens = tf.cast(batch["input_mask"], tf.float32)               # [B, S]
        is_replaced = outputs["is_replaced"]
        probability = tf.sigmoid(outputs["disc_logits"])

        def agree(a, b):
            return tf.cast(tf.equal(a, b), tf.float32)

        means = self._means
        means["mlm_loss"].update_state(values["mlm_token_losses"], weights)
        means["rtd_loss"].update_state(values["rtd_token_losses"], tokens)
        means["masked_lm_accuracy"].update_state(
            agree(outputs["mlm_predictions"], labels), weights)
        means["sampled_masked_lm_accuracy"].update_state(
            agree(tf.cast(outputs["sampled_ids"], tf.int32), labels), weights)
        means["disc_accuracy"].update_state(
            agree(tf.cast(probability > 0.5, tf.float32), is_replaced), tokens)
        means["replaced_fraction"].update_state(is_replaced, tokens)
        self._precision.update_state(is_replaced, probability, tokens)
        self._recall.update_state(is_replaced, probability, tokens)
        self._auc.update_state(is_replaced, probability, tokens)
        if grad_norm is not None:
            self.update_grad_norm(grad_norm)

    def update_grad_norm(self, grad_norm):
        """Adds one step's gradient norm (of the whole global batch)."""
        self._means["grad_norm"].update_state(grad_norm)

    def result(self) -> dict[str, float]:
        out = {name: float(metric.result()) for name, metric in self._means.items()}
        for metric in (self._precision, self._recall, self._auc):
            out[metric.name] = float(metric.result())
        out["loss"] = out["mlm_loss"] + self.disc_weight * out["rtd_loss"]
        if not self._means["grad_norm"].count.numpy():
            del out["grad_norm"]  # evaluation
        return {name: out[name] for name in NAMES if name in out}

    def reset(self):
        for metric in (*self._means.values(), self._precision, self._recall, self._auc):
            metric.reset_state()
