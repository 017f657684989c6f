"""What every training algorithm is (`Algorithm`): which variables a step trains with
which loss, stage by stage, and what it adds to the run.

The trainer and the loop call these hooks and nothing else; none of them names an
algorithm:

    Trainer.__init__   Member(config) (`algorithms.get`), `build`, `layers` (the run's
                       optimizer trains them too), `checkpoint_items`
    the step           `variables` and `loss` of the step's stage, `optimizer` of it,
                       `metric_inputs` (through `training/metrics.py`)
    the loop           `stage` and `next_boundary` of a step (a compiled loop never spans
                       two stages), `begin` on the host before each loop,
                       `check_restored` after a restore

Every hook has a default, the one-stage behaviour of `joint`: a member overrides what it
changes. Everything is a function of the step and the checkpoint, so that a run resumed
anywhere repeats an uninterrupted one: what an algorithm adds to the state is in
`checkpoint_items`.

The pieces several algorithms share are here too (`require_config`,
`require_discriminator`).

>>> class Mine(Algorithm):
...     name = "mine"
>>> mine = Mine(None)
>>> mine.stage(0), mine.next_boundary(5), mine.layers(), mine.checkpoint_items()
('joint', inf, [], {})
"""

from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import objectives


class Algorithm:
    """One training algorithm: a member of `algorithms.ALGORITHMS`, made from the run's
    config (`Member(config)`; a one-line `UserError` naming the keys it cannot run with).

    A member sets `name` (and `metric_names` where its `loss` adds values to report) and
    overrides the hooks it changes; no hook is abstract. The defaults: one stage,
    "joint", for the whole run; every trainable variable (the model's, then `layers()`'),
    by the objective's loss, with the run's optimizer; nothing of its own to build,
    report, checkpoint or check; `begin` does nothing."""

    name: str = ""
    metric_names: tuple = ()  # the algorithm's own metrics (training only), after the
                              # objective's in the log and TensorBoard

    def __init__(self, config=None):
        """`config`: the run's ConfigDict; the base reads nothing from it, so a member
        without settings of its own may be made with None (where only the class's facts
        are read). A member that reads settings needs the run's config
        (`require_config`)."""
        del config

    # === Stages ===
    def stage(self, step: int) -> str:
        """The stage of `step`, a name (default: "joint" throughout)."""
        del step
        return "joint"

    def next_boundary(self, step: int) -> float:
        """The next step at which the stage changes (a compiled loop ends there); default
        never (inf)."""
        del step
        return float("inf")

    def begin(self, model, step: int) -> None:
        """On the host, before a loop that starts at `step` (two_stage: the switch);
        default: nothing."""
        del model, step

    # === The step ===
    def variables(self, model, stage: str) -> list:
        """The variables `stage` trains; default every trainable one, the model's then
        those of `layers()`."""
        del stage
        return model.trainable_variables + [
            v for layer in self.layers() for v in layer.trainable_variables]

    def loss(self, objective, loss, values, stage: str, outputs, batch, num_masked):
        """(the loss the step differentiates, which the metrics report as `loss`,
        values). `loss` and `values` are the objective's (`Objective.loss`) on
        `outputs` of `batch`, `num_masked` the global count of masked positions; a
        member may add values of its own (for `metric_inputs`). Default: the
        objective's loss and values, unchanged."""
        del objective, stage, outputs, batch, num_masked
        return loss, values

    def metric_inputs(self, batch, values) -> dict:
        """{metric of `metric_names`: (values, weights)} of one batch, from `loss`'s
        values; default none."""
        del batch, values
        return {}

    def optimizer(self, stage: str, default):
        """The optimizer that updates `stage`'s variables; default `default`, the
        run's."""
        del stage
        return default

    # === Its own state ===
    def build(self, train_config, model, dtype_policy: str) -> None:
        """Makes the algorithm's own layers and optimizers (inside `strategy.scope()`,
        before the run's optimizer); default: nothing."""
        del train_config, model, dtype_policy

    def layers(self) -> list:
        """Keras layers of the algorithm's own, beside the model (made by `build`): the
        run's optimizer trains them with the model, the checkpoint holds them
        (`checkpoint_items`), export never sees them. Default none."""
        return []

    def checkpoint_items(self) -> dict:
        """{name: trackable} the checkpoint holds besides the model and the run's
        optimizer; default none."""
        return {}

    def check_restored(self, workdir: str) -> None:
        """After a restore from `workdir`: a one-line `UserError` where the restored
        state cannot continue this config; default: nothing to check."""
        del workdir


def require_config(config, name: str) -> None:
    """A one-line error where the member `name`, which reads settings of its own, is
    made without the run's config (`Member(None)`).

    >>> require_config(None, "two_stage")
    Traceback (most recent call last):
    ...
    ValueError: config.train.algorithm='two_stage' needs the run's config
    """
    if config is None:
        raise ValueError(f"config.train.algorithm={name!r} needs the run's config")


def require_discriminator(config, why: str) -> None:
    """A one-line UserError unless config.model.objective trains a generator and a
    discriminator (electra, electra_15), which the algorithm named in `config` needs
    (`why`: what it does with them)."""
    objective = model_config.objective_name(config)
    if not objectives.OBJECTIVES.get(objective).detects:
        raise errors.UserError(
            f"config.model.objective={objective!r}: config.train.algorithm="
            f"{config.train.algorithm!r} {why}: use electra or electra_15")
