"""`two_stage`: the generator alone, then the discriminator alone from its weights (the
paper's Section 3.2 "two-stage" training: it did not help, GLUE −0.6 in their Figure 3).

    steps [0, N)      the generator alone, by its MLM loss
    step N            the discriminator's encoder (and embeddings) take the generator's
                      weights
    steps [N, steps)  the discriminator alone, by disc_weight · RTD

N = config.train.two_stage_generator_steps; 0 (the default): half of config.train.steps,
each stage trained for the same number of steps, as the paper does.

Stage 2's generator is the paper's: frozen, a fixed language model. None of its
variables trains (its encoder, MLM head and its own embeddings: two_stage needs
config.model.tie=none, since under tie=embeddings the discriminator would train the
embeddings they share, and the generator's inputs and tied output projection with them)
and it runs without dropout, as config.train.generator=frozen's does.

The learning rate per stage:
    stage 1  the run's optimizer and schedule: warm-up over config.train.warmup_steps,
             then linear decay to 0 at config.train.steps (not at N: at the default
             switch, half the run, the generator ends at about half the peak rate)
    stage 2  a fresh optimisation of the discriminator: its own optimizer (zero moments,
             its own update count for Adam's bias correction) and its own schedule,
             warm-up over config.train.warmup_steps, then linear decay to 0 over the
             steps − N after the switch
The switch step and the discriminator's optimizer are in the checkpoint; the switch step
is checked at restore.
"""

import dataclasses

import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf import model_config
from electra_tf.training import optimizer as optimizer_lib
from electra_tf.training.algorithms import base


class TwoStage(base.Algorithm):
    """The generator alone, then the discriminator alone from the generator's weights."""

    name = "two_stage"

    def __init__(self, config):
        base.require_config(config, self.name)
        super().__init__(config)
        # A whole number >= 0: config_check's range (loop.validate checks it first).
        steps = config.train.two_stage_generator_steps
        # Given, it is not bounded by config.train.steps: a shorter run trains the
        # generator only and the same command with more steps continues it across the
        # switch. Not given: each stage trains for half the run, as in the paper.
        self.halves = not steps
        if self.halves:
            steps = max(config.train.steps // 2, 1)
        base.require_discriminator(config, "trains ELECTRA's generator, then its "
                                   "discriminator")
        shape = model_config.shape(config)
        if shape.tie != "none":
            raise errors.UserError(
                f"config.model.tie={shape.tie!r}: config.train.algorithm='two_stage' copies "
                "the generator into the discriminator and freezes it, which needs "
                "embeddings of its own (the discriminator trains shared ones; tie=all "
                "makes them one encoder); use tie=none")
        if shape.generator != shape.discriminator:
            g, d = shape.generator, shape.discriminator
            differ = [f"config.model.generator_{f.name}={getattr(g, f.name)} (config.model."
                      f"{f.name}={getattr(d, f.name)})" for f in dataclasses.fields(g)
                      if getattr(g, f.name) != getattr(d, f.name)]
            hint = "config.model.generator_hidden_fraction=1.0"
            if (g.embedding_size != d.embedding_size  # set apart from its hidden size
                    and config.model.generator_embedding_size):
                hint += f" and config.model.generator_embedding_size={d.embedding_size}"
            raise errors.UserError(
                "config.train.algorithm='two_stage' initialises the discriminator from the "
                "generator, so their shapes must be equal: " + ", ".join(differ)
                + f"; e.g. set {hint}")
        self.switch = steps
        self.total_steps = config.train.steps
        self._switch_step = None  # `switch_step`: made by `build`

    @property
    def switch_step(self) -> tf.Variable:
        """The switch step, in the checkpoint: a resume with another is refused at
        restore. Made on first use (`build`, in the strategy's scope), not by the
        constructor: `loop.validate` constructs the algorithm before the loop makes its
        strategy, and MultiWorkerMirroredStrategy cannot start once a variable has."""
        if self._switch_step is None:
            self._switch_step = tf.Variable(self.switch, dtype=tf.int64, trainable=False,
                                            name="switch_step")
        return self._switch_step

    def stage(self, step):
        return "generator" if step < self.switch else "discriminator"

    def next_boundary(self, step):
        return self.switch if step < self.switch else float("inf")

    def variables(self, model, stage):
        # Generator: its encoder (with its own embeddings) and MLM head. Discriminator:
        # its embeddings, encoder and RTD head. Only these are updated (no weight decay, no momentum elsewhere).
        variables = (model.generator_variables() if stage == "generator" else
                     model.discriminator_variables())
        return [v for v in variables if v.trainable]

    def loss(self, objective, loss, values, stage, outputs, batch, num_masked):
        del loss, outputs, batch, num_masked
        if stage == "generator":
            return values["mlm_loss"], values
        return objective.disc_weight * values["rtd_loss"], values

    def begin(self, model, step):
        # Stage 2's generator is a fixed language model: no dropout (`generator_pass`),
        # set before the stage's step is traced, whether the run starts, switches or
        # resumes here.
        model.generator_trainable = step < self.switch
        if step != self.switch:
            return
        # The discriminator's encoder (embeddings included) takes the generator's
        # weights: the same layers in the same order (equal shapes).
        for target, source in zip(model.discriminator.weights, model.generator.weights,
                                  strict=True):
            assert target.shape == source.shape, (target.path, target.shape, source.path,
                                                  source.shape)
            target.assign(source)
        logging.info("two_stage: step %d: the discriminator starts from the generator's "
                     "weights and trains alone from here, on its own learning-rate "
                     "schedule over the last %d steps; the generator is frozen (its "
                     "encoder, MLM head and embeddings) and runs without dropout", step,
                     max(self.total_steps - step, 1))

    def build(self, train_config, model, dtype_policy):
        _ = self.switch_step  # made here, in the strategy's scope (as the run's step is)
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
            given = (f"config.train.two_stage_generator_steps=0 switches at half of "
                     f"config.train.steps, step {self.switch}" if self.halves else
                     f"config.train.two_stage_generator_steps={self.switch}")
            raise errors.UserError(
                f"{given}, but the checkpoint in {workdir} switched at step {saved}: use "
                f"another --workdir, or config.train.two_stage_generator_steps={saved} to "
                "resume")
