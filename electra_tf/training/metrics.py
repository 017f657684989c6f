"""The pre-training metrics, as Keras metric objects updated from the step's tensors.

Every value is a token-weighted mean over the tokens seen since the last `reset`, across
replicas and steps. Which metrics there are is the objective's (`model/objectives/`,
`Objective.names` and `metric_inputs`); for `electra`: `mlm_loss` and the MLM accuracies
over masked positions, `rtd_loss` and the discriminator's metrics over real tokens,
`replaced_fraction` = the share of real tokens the generator actually changed, and
`objective_loss` = mlm_loss + disc_weight · rtd_loss (`Objective.total`).

`loss` is what was optimised: in training, the mean over the steps of the scalar each
step differentiated (the algorithm's stage's loss: `joint` the objective's total,
`two_stage` the MLM loss, then disc_weight · RTD, `adversarial` policy + baseline +
disc_weight · RTD); in evaluation, which differentiates nothing, the objective's total.
The training algorithm adds its own (`metric_names`; adversarial: `policy_loss`,
`reward`, `baseline_loss`).
"""

import keras
import tensorflow as tf

from electra_tf.model import objectives

NAMES = objectives.OBJECTIVES.get("electra").names  # the default objective's
_DETECTION = ("disc_precision", "disc_recall", "disc_auc")


class PretrainingMetrics:
    """Create inside `strategy.scope()`; `update` in replica context; `result` on the host."""

    def __init__(self, objective, algorithm=None):
        """`objective`: the run's `Objective` (the model's, `model_config.objective`).
        `algorithm` (training/algorithms/): its own metrics too (`metric_names`, from the
        values its `loss` adds: the training step's metrics only)."""
        self.objective = objective
        self.algorithm = algorithm
        self.names = (*self.objective.names, "objective_loss",
                      *(algorithm.metric_names if algorithm else ()))
        self._means = {name: keras.metrics.Mean(name=name) for name in self.names
                       if name not in ("objective_loss", *_DETECTION)}
        self._detection = [
            keras.metrics.Precision(thresholds=0.5, name="disc_precision"),
            keras.metrics.Recall(thresholds=0.5, name="disc_recall"),
            keras.metrics.AUC(num_thresholds=200, name="disc_auc"),
        ] if self.objective.detects else []

    def update(self, batch, outputs, values, grad_norm=None):
        """Adds one replica's batch: `outputs` of the pre-trainer with the vocabulary
        logits replaced by their argmax (`Objective.compact`), `values` of the loss."""
        inputs = self.objective.metric_inputs(batch, outputs, values)
        if self.algorithm is not None:
            inputs.update(self.algorithm.metric_inputs(batch, values))
        for name, (value, weight) in inputs.items():
            self._means[name].update_state(value, weight)
        if self._detection:
            labels, probability, weights = self.objective.detection(batch, outputs)
            for metric in self._detection:
                metric.update_state(labels, probability, weights)
        if grad_norm is not None:
            self.update_grad_norm(grad_norm)

    def update_loss(self, loss):
        """Adds one step's differentiated loss: this replica's share of it (its rows' part
        of the global mean), all replicas' shares summing to the step's loss."""
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        self._means["loss"].update_state(loss * replicas, sample_weight=1.0 / replicas)

    def update_grad_norm(self, grad_norm, skipped=None):
        """Adds one step's gradient norm (of the whole global batch), unless `skipped` (a
        bool tensor: float16's optimizer skipped the step, its norm not finite)."""
        if skipped is None:
            self._means["grad_norm"].update_state(grad_norm)
            return
        self._means["grad_norm"].update_state(
            tf.where(skipped, tf.zeros_like(grad_norm), grad_norm),
            sample_weight=tf.cast(tf.logical_not(skipped), grad_norm.dtype))

    def result(self) -> dict[str, float]:
        out = {name: float(metric.result()) for name, metric in self._means.items()}
        for metric in self._detection:
            out[metric.name] = float(metric.result())
        out["objective_loss"] = self.objective.total(out)
        if not self._means["grad_norm"].count.numpy():
            del out["grad_norm"]  # evaluation, or float16 steps all skipped
        if not self._means["loss"].count.numpy():
            # Evaluation: nothing is differentiated, so no `loss` (TensorBoard would draw
            # it beside training's, the algorithm's loss); the objective's is there.
            del out["loss"]
        return {name: out[name] for name in self.names if name in out}

    def reset(self):
        for metric in (*self._means.values(), *self._detection):
            metric.reset_state()
