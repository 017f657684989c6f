"""Training algorithms, chosen by name (`config.train.algorithm`): which variables a step
trains with which loss, stage by stage.

    joint      every variable, by the objective's loss (the paper's ELECTRA)
    two_stage  steps [0, N): the generator alone, by its MLM loss;
               at step N the discriminator's encoder (and embeddings) take the
               generator's weights; steps [N, steps): the discriminator alone, by
               disc_weight · RTD (the paper's Section 3.2 "two-stage" training: it did
               not help, GLUE −0.6 in their Figure 3). Frozen in stage 2: the
               generator's encoder layers and MLM head, and under tie=none its own
               embeddings; under tie=embeddings the shared embeddings (token, position,
               segment tables and their LayerNorm) are the discriminator's and keep
               training, so the generator's inputs and its tied output projection change.
               Stage 2 is a fresh optimisation of the discriminator: its own optimizer
               (zero moments, its own update count for Adam's bias correction) and its
               own schedule, warm-up then linear decay to 0 over the steps − N after the
               switch; stage 1 uses the run's optimizer and schedule (over all steps)
               N = config.train.two_stage_generator_steps

The loop asks the algorithm for the stage of a step (a compiled loop never spans two
stages: `next_boundary`), for the stage's variables and loss, and lets it act on the
host before a loop (`begin`: the two-stage switch), and for the optimizer of a stage
(`optimizer`; `build` makes the algorithm's own, in the strategy's scope). Everything is a
function of the step and the checkpoint, so a run resumed anywhere, before, at or after
the switch, repeats an uninterrupted one. The switch step and two_stage's discriminator
optimizer are in the checkpoint (`checkpoint_items`); the switch step is checked at
restore.

>>> import ml_collections
>>> from configs import electra
>>> config = electra.get_config("tiny")
>>> config.train.algorithm = "two_stage"
>>> config.train.two_stage_generator_steps = 100
>>> config.model.generator_hidden_fraction = 1.0
>>> two_stage = get(config)
>>> two_stage.stage(99), two_stage.stage(100), two_stage.next_boundary(40)
('generator', 'discriminator', 100)
>>> config.model.generator_hidden_fraction = 0.5
>>> get(config)
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.train.algorithm='two_stage' initialises the discriminator from the generator, so their shapes must be equal: config.model.generator_hidden_size=32 (config.model.hidden_size=64), config.model.generator_num_heads=1 (config.model.num_heads=2), config.model.generator_intermediate_size=128 (config.model.intermediate_size=256); e.g. set config.model.generator_hidden_fraction=1.0
"""

import dataclasses

import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import objectives
from electra_tf.training import optimizer as optimizer_lib


class Joint:
    """Every variable, by the objective's loss, at every step."""

    name = "joint"

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

    def loss(self, objective, loss, values, stage: str):
        del objective, values, stage
        return loss

    def begin(self, model, step: int) -> None:
        """On the host, before a loop that starts at `step`."""
        del model, step

    def build(self, train_config, model, dtype_policy: str) -> None:
        """The algorithm's own optimizers (inside `strategy.scope()`); joint: none."""
        del train_config, model, dtype_policy

    def optimizer(self, stage: str, default):
        """The optimizer that updates `stage`'s variables (`default`: the run's)."""
        del stage
        return default

    def checkpoint_items(self) -> dict:
        return {}

    def check_restored(self, workdir: str) -> None:
        del workdir


class TwoStage(Joint):
    """The generator alone, then the discriminator alone from the generator's weights."""

    name = "two_stage"

    def __init__(self, config):
        super().__init__(config)
        steps = config.train.get("two_stage_generator_steps", 0)
        # Not bounded by config.train.steps: a shorter run trains the generator only and
        # the same command with more steps continues it across the switch.
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise errors.UserError(
                f"config.train.two_stage_generator_steps={steps!r}: give the steps the "
                "generator trains alone before the discriminator (a whole number >= 1)")
        objective = model_config.objective_name(config)
        if not objectives.get(objective).detects:
            raise errors.UserError(
                f"config.model.objective={objective!r}: config.train.algorithm='two_stage' "
                "trains ELECTRA's generator, then its discriminator: use electra or "
                "electra_15")
        shape = model_config.shape(config)
        if shape.tie not in ("none", "embeddings"):
            raise errors.UserError(
                f"config.model.tie={shape.tie!r}: config.train.algorithm='two_stage' copies "
                "the generator's encoder into the discriminator's and freezes it (tie=all "
                "makes them one encoder, gdes gives them different embeddings); use "
                "tie=embeddings or none")
        if shape.generator != shape.discriminator:
            g, d = shape.generator, shape.discriminator
            differ = [f"config.model.generator_{f.name}={getattr(g, f.name)} (config.model."
                      f"{f.name}={getattr(d, f.name)})" for f in dataclasses.fields(g)
                      if getattr(g, f.name) != getattr(d, f.name)]
            hint = "config.model.generator_hidden_fraction=1.0"
            if g.embedding_size != d.embedding_size:  # tie=none: the generator's own
                hint += f" and config.model.generator_embedding_size={d.embedding_size}"
            raise errors.UserError(
                "config.train.algorithm='two_stage' initialises the discriminator from the "
                "generator, so their shapes must be equal: " + ", ".join(differ)
                + f"; e.g. set {hint}")
        self.switch = steps
        self.tie = shape.tie
        # In the checkpoint: a resume with another switch step is refused at restore.
        self.switch_step = tf.Variable(steps, dtype=tf.int64, trainable=False,
                                       name="switch_step")

    def stage(self, step):
        return "generator" if step < self.switch else "discriminator"

    def next_boundary(self, step):
        return self.switch if step < self.switch else float("inf")

    def variables(self, model, stage):
        # Generator: its encoder (with its embeddings: the shared table under
        # tie=embeddings) and MLM head. Discriminator: the embeddings, its encoder and
        # RTD head. Only these are updated (no weight decay, no momentum elsewhere).
        variables = (model.generator_variables() if stage == "generator" else
                     model.discriminator_variables())
        return [v for v in variables if v.trainable]

    def loss(self, objective, loss, values, stage):
        del loss
        if stage == "generator":
            return values["mlm_loss"]
        return objective.disc_weight * values["rtd_loss"]

    def begin(self, model, step):
        if step != self.switch:
            return
        # The discriminator's encoder takes the generator's weights: the same layers in
        # the same order (equal shapes); under tie=embeddings the table is already one.
        for target, source in zip(model.discriminator.weights, model.generator.weights,
                                  strict=True):
            assert target.shape == source.shape, (target.path, target.shape, source.path,
                                                  source.shape)
            target.assign(source)
        logging.info("two_stage: step %d: the discriminator starts from the generator's "
                     "weights and trains alone from here; frozen: the generator's encoder "
                     "layers and MLM head%s", step,
                     " (its own embeddings too)" if self.tie == "none" else
                     " (the shared embeddings keep training with the discriminator)")

    def build(self, train_config, model, dtype_policy):
        # Stage 2 starts a fresh optimisation of the discriminator: with the run's
        # optimizer its moments would be zero while Adam's bias correction counted from
        # step N (first updates ~3x the usual size), at the decayed learning rate.
        self.discriminator_optimizer = optimizer_lib.create_optimizer(
            train_config, model, dtype_policy,
            variables=self.variables(model, "discriminator"),
            total_steps=max(train_config.steps - self.switch, 1))

    def optimizer(self, stage, default):
        return self.discriminator_optimizer if stage == "discriminator" else default

    def checkpoint_items(self):
        items = {"switch_step": self.switch_step}
        if hasattr(self, "discriminator_optimizer"):
            items["discriminator_optimizer"] = self.discriminator_optimizer
        return items

    def check_restored(self, workdir):
        saved = int(self.switch_step.numpy())
        if saved != self.switch:
            raise errors.UserError(
                f"config.train.two_stage_generator_steps={self.switch}, but the checkpoint "
                f"in {workdir} switched at step {saved}: use another --workdir, or the same "
                "value to resume")


ALGORITHMS = {cls.name: cls for cls in (Joint, TwoStage)}


def get(config):
    """The algorithm of `config.train.algorithm` (joint when absent: older runs)."""
    name = config.train.get("algorithm", "joint")
    if name not in ALGORITHMS:
        raise errors.UserError(f"config.train.algorithm={name!r}: choose one of "
                               f"{', '.join(ALGORITHMS)}")
    return ALGORITHMS[name](config)
