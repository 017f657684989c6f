"""The pre-training metrics on hand-made tensors."""

import types

import pytest
import tensorflow as tf

from configs import electra
from electra_tf import model_config
from electra_tf.training import metrics


def objective(disc_weight):
    """The `electra` objective of a config that weighs RTD by `disc_weight`."""
    config = electra.get_config("tiny")
    config.model.disc_weight = disc_weight
    return model_config.objective(config)


def make_step():
    batch = {"masked_lm_weights": tf.constant([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
             "masked_lm_ids": tf.constant([[5, 6, 7], [8, 9, 9]]),
             "input_mask": tf.constant([[1, 1, 1, 1], [1, 1, 0, 0]])}
    outputs = {
        # Correct at (0, 0) and (1, 0); wrong at (0, 1); (0, 2) is right but has weight 0.
        "mlm_predictions": tf.constant([[5, 0, 7], [8, 0, 0]], tf.int32),
        # Only (0, 1) is right.
        "sampled_ids": tf.constant([[0, 6, 7], [0, 9, 9]], tf.int32),
        "is_replaced": tf.constant([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]]),
        # Predicted replaced (> 0.5): [[1, 0, 0, 1], [0, 1, 1, 0]].
        "disc_logits": tf.constant([[3.0, -3.0, -3.0, 3.0], [-3.0, 3.0, 3.0, -3.0]]),
    }
    values = {"mlm_token_losses": tf.constant([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]]),
              "rtd_token_losses": tf.constant([[1.0, 1.0, 1.0, 1.0],
                                               [2.0, 2.0, 100.0, 100.0]])}
    return batch, outputs, values


def test_one_update():
    m = metrics.PretrainingMetrics(objective(50.0))
    m.update(*make_step())
    out = m.result()
    # Evaluation: no grad_norm, and no `loss` (nothing optimised): the objective's total.
    assert list(out) == [*(n for n in metrics.NAMES if n not in ("grad_norm", "loss")),
                         "objective_loss"]
    assert out["mlm_loss"] == pytest.approx(2.0)              # (1 + 2 + 3) / 3
    assert out["rtd_loss"] == pytest.approx(8 / 6)            # (4 + 4) / 6 real tokens
    assert out["objective_loss"] == pytest.approx(2.0 + 50.0 * 8 / 6)
    assert out["masked_lm_accuracy"] == pytest.approx(2 / 3)
    assert out["sampled_masked_lm_accuracy"] == pytest.approx(1 / 3)
    # Real tokens: row 0 all four, row 1 the first two.
    # truth     [1 0 1 0 | 0 1], predicted [1 0 0 1 | 0 1]: 4 of 6 right, TP 2, FP 1, FN 1.
    assert out["disc_accuracy"] == pytest.approx(4 / 6)
    assert out["disc_precision"] == pytest.approx(2 / 3)
    assert out["disc_recall"] == pytest.approx(2 / 3)
    assert out["replaced_fraction"] == pytest.approx(3 / 6)
    assert 0.0 <= out["disc_auc"] <= 1.0


def test_accumulates_token_weighted_and_resets():
    m = metrics.PretrainingMetrics(objective(1.0))
    batch, outputs, values = make_step()
    m.update(batch, outputs, values, grad_norm=tf.constant(2.0))
    # A second step with a single masked position (loss 8) and one real replaced token.
    batch2 = {"masked_lm_weights": tf.constant([[1.0, 0.0, 0.0]]),
              "masked_lm_ids": tf.constant([[5, 0, 0]]),
              "input_mask": tf.constant([[1, 0, 0, 0]])}
    outputs2 = {"mlm_predictions": tf.constant([[5, 0, 0]], tf.int32),
                "sampled_ids": tf.constant([[5, 0, 0]], tf.int32),
                "is_replaced": tf.constant([[1.0, 0.0, 0.0, 0.0]]),
                "disc_logits": tf.constant([[3.0, 0.0, 0.0, 0.0]])}
    values2 = {"mlm_token_losses": tf.constant([[8.0, 0.0, 0.0]]),
               "rtd_token_losses": tf.constant([[6.0, 0.0, 0.0, 0.0]])}
    m.update(batch2, outputs2, values2, grad_norm=tf.constant(4.0))
    out = m.result()
    assert out["mlm_loss"] == pytest.approx((6 + 8) / 4)
    assert out["rtd_loss"] == pytest.approx((8 + 6) / 7)
    assert out["objective_loss"] == pytest.approx(14 / 4 + 14 / 7)
    assert out["masked_lm_accuracy"] == pytest.approx(3 / 4)
    assert out["sampled_masked_lm_accuracy"] == pytest.approx(2 / 4)
    assert out["disc_accuracy"] == pytest.approx(5 / 7)
    assert out["disc_precision"] == pytest.approx(3 / 4)
    assert out["disc_recall"] == pytest.approx(3 / 4)
    assert out["replaced_fraction"] == pytest.approx(4 / 7)
    assert out["grad_norm"] == pytest.approx(3.0)
    assert list(out) == [*(n for n in metrics.NAMES if n != "loss"), "objective_loss"]
    # float16: a step the optimizer skipped (an overflow, its norm inf) is left out.
    m.update_grad_norm(tf.constant(float("inf")), skipped=tf.constant(True))
    m.update_grad_norm(tf.constant(6.0), skipped=tf.constant(False))
    assert m.result()["grad_norm"] == pytest.approx(4.0)
    m.reset()
    m.update_grad_norm(tf.constant(float("nan")), skipped=tf.constant(True))
    assert "grad_norm" not in m.result()  # every step skipped: no norm to show
    m.reset()
    m.update(*make_step())
    again = m.result()
    assert again["mlm_loss"] == pytest.approx(2.0)
    assert "grad_norm" not in again


def test_auc_of_a_perfect_and_an_inverted_discriminator():
    batch, outputs, values = make_step()
    truth = outputs["is_replaced"]
    for sign, expected in ((1.0, 1.0), (-1.0, 0.0)):
        m = metrics.PretrainingMetrics(objective(50.0))
        logits = sign * (truth * 8.0 - 4.0)
        m.update(batch, dict(outputs, disc_logits=logits), values)
        out = m.result()
        assert out["disc_auc"] == pytest.approx(expected, abs=0.01)
        assert out["disc_accuracy"] == pytest.approx(expected)


def test_works_in_a_tf_function():
    m = metrics.PretrainingMetrics(objective(50.0))
    tf.function(m.update)(*make_step())
    assert m.result()["masked_lm_accuracy"] == pytest.approx(2 / 3)


def test_training_reports_the_differentiated_loss_beside_the_objectives():
    """With an algorithm (training), `loss` is the mean over steps of the loss each step
    differentiated, whatever the objective's total (`objective_loss`) is."""
    m = metrics.PretrainingMetrics(objective(50.0), algorithm=types.SimpleNamespace(
        metric_names=(), metric_inputs=lambda batch, values: {}))
    for loss in (3.0, 5.0):
        m.update(*make_step(), grad_norm=tf.constant(1.0))
        m.update_loss(tf.constant(loss))
    out = m.result()
    assert out["loss"] == pytest.approx(4.0)
    assert out["objective_loss"] == pytest.approx(2.0 + 50.0 * 8 / 6)


def test_a_run_has_one_objective_with_the_configs_disc_weight():
    """The model, the training and the evaluation metrics share the run's objective,
    which weighs RTD by config.model.disc_weight (not a default of its own)."""
    from electra_tf.training import distribute  # pylint: disable=g-import-not-at-top
    from electra_tf.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    from tests.training import test_trainer  # pylint: disable=g-import-not-at-top
    config = test_trainer._config()  # pylint: disable=protected-access
    config.model.disc_weight = 20.0
    trainer = trainer_lib.Trainer(config, distribute.get_strategy(config.runtime),
                                  test_trainer.VOCAB, test_trainer.P)
    assert (trainer.objective is trainer.model.objective
            is trainer.train_metrics.objective is trainer.eval_metrics.objective)
    assert trainer.objective.disc_weight == 20.0
    loss, values = trainer.objective.loss(*_outputs_and_batch())
    assert float(loss) == pytest.approx(
        float(values["mlm_loss"]) + 20.0 * float(values["rtd_loss"]))


def _outputs_and_batch():
    """(outputs, batch) of `make_step` with logits for the objective's loss."""
    batch, outputs, _ = make_step()
    outputs = dict(outputs, mlm_logits=tf.one_hot(outputs["mlm_predictions"], 10) * 3.0)
    return outputs, batch


_TWO_REPLICAS = r"""
import types
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from electra_tf.model import objectives
from electra_tf.training import metrics
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    m = metrics.PretrainingMetrics(objectives.OBJECTIVES.create("electra"),
                                   algorithm=types.SimpleNamespace(
        metric_names=(), metric_inputs=lambda batch, values: {}))

@tf.function
def step(share):
    def replica_fn():  # replica r's share of the step's loss: (r + 1) * share
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        m.update_loss(share * tf.cast(r + 1, tf.float32))
    strategy.run(replica_fn)

for share in (1.0, 3.0):  # step losses 3 and 9
    step(tf.constant(share))
print("LOSS", float(m._means["loss"].result()))
"""


def test_the_loss_over_two_replicas_is_the_mean_of_the_steps_losses():
    """Each replica adds its share of the step's loss: the shares sum to the step's loss
    (not their mean), and each step counts once, however many replicas."""
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top
    from tests import helpers  # pylint: disable=g-import-not-at-top
    result = subprocess.run([sys.executable, "-c", _TWO_REPLICAS], cwd=helpers.ROOT,
                            capture_output=True, text=True, timeout=300,
                            env=helpers.child_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LOSS 6.0" in result.stdout, result.stdout  # (3 + 9) / 2
