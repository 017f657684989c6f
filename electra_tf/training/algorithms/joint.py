"""`joint`: every variable, by the objective's loss, at every step (the paper's ELECTRA).

`Joint` is also the interface every algorithm implements (the others subclass it and
override what they change); the trainer and the loop call nothing else.
"""

from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import objectives


class Joint:
    """Every variable, by the objective's loss, at every step."""

    name = "joint"
    metric_names: tuple = ()  # the algorithm's own metrics (training only), after the
                              # objective's in the log and TensorBoard

    def __init__(self, config):
        del config

    def stage(self, step: int) -> str:
        del step
        return "joint"

    def next_boundary(self, step: int) -> float:
        """The next step at which the stage changes (a compiled loop ends there)."""
        del step
        return float("inf")

    def variables(self, model, stage: str) -> list:
        del stage
        return model.trainable_variables

    def loss(self, objective, loss, values, stage: str, outputs, batch, num_masked):
        """(the loss the step differentiates, which the metrics report as `loss`,
        values): `loss` and `values` are the
        objective's (`Objective.loss`) on `outputs` of `batch`, `num_masked` the global
        count of masked positions; the algorithm may add values of its own (for
        `metric_inputs`)."""
        del objective, stage, outputs, batch, num_masked
        return loss, values

    def metric_inputs(self, batch, values) -> dict:
        """{metric of `metric_names`: (values, weights)} of one batch, from `loss`'s
        values."""
        del batch, values
        return {}

    def layers(self) -> list:
        """Keras layers of the algorithm's own, beside the model (made by `build`): the
        run's optimizer trains them with the model, the checkpoint holds them
        (`checkpoint_items`), export never sees them."""
        return []

    def begin(self, model, step: int) -> None:
        """On the host, before a loop that starts at `step`."""
        del model, step

    def build(self, train_config, model, dtype_policy: str) -> None:
        """The algorithm's own layers and optimizers (inside `strategy.scope()`, before
        the run's optimizer); joint: none."""
        del train_config, model, dtype_policy

    def optimizer(self, stage: str, default):
        """The optimizer that updates `stage`'s variables (`default`: the run's)."""
        del stage
        return default

    def checkpoint_items(self) -> dict:
        return {}

    def check_restored(self, workdir: str) -> None:
        del workdir


def require_discriminator(config, why: str) -> None:
    """A one-line UserError unless config.model.objective trains a generator and a
    discriminator (electra, electra_15), which the algorithm named in `config` needs
    (`why`: what it does with them)."""
    objective = model_config.objective_name(config)
    if not objectives.OBJECTIVES.get(objective).detects:
        raise errors.UserError(
            f"config.model.objective={objective!r}: config.train.algorithm="
            f"{config.train.algorithm!r} {why}: use electra or electra_15")
