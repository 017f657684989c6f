"""Training algorithms, chosen by name (`config.train.algorithm`): which variables a step
trains with which loss, stage by stage. One module each:

    joint        every variable, by the objective's loss (the paper's ELECTRA)
    two_stage    the generator alone by MLM, then the discriminator alone from the
                 generator's weights (the paper's two-stage training)
    adversarial  the generator by the policy gradient of the discriminator's loss on its
                 samples, with a learned baseline; the discriminator by RTD (the paper's
                 adversarial training)

Each subclasses `base.Algorithm` and overrides the hooks it changes (the base's
defaults are joint's); adding one is its module and its line in `ALGORITHMS`. Each is
made from the run's config, `Member(config)` (`get`). The loop asks the algorithm for the
stage of a step (a compiled loop never spans two stages: `next_boundary`), for the
stage's variables and loss (`loss` may add values, which `metric_inputs` turns into the
algorithm's own metrics), and lets it act on the host before a loop (`begin`: the
two-stage switch), and for the optimizer of a stage (`optimizer`; `build` makes the
algorithm's own layers and optimizers, in the strategy's scope, before the run's
optimizer, which also trains `layers()`). Everything is a function of the step and the
checkpoint, so a run resumed anywhere, before, at or after a switch, repeats an
uninterrupted one: what the algorithm adds to the state (two_stage's switch step and
discriminator optimizer, adversarial's baseline) is in the checkpoint
(`checkpoint_items`), checked at restore (`check_restored`).

>>> from configs import electra
>>> config = electra.get_config("tiny")
>>> config.train.algorithm = "two_stage"
>>> config.train.two_stage_generator_steps = 100
>>> config.model.generator_hidden_fraction = 1.0
>>> config.model.tie = "none"  # the generator is frozen in stage 2: its own embeddings
>>> two_stage = get(config)
>>> two_stage.stage(99), two_stage.stage(100), two_stage.next_boundary(40)
('generator', 'discriminator', 100)
>>> config.train.two_stage_generator_steps = 0  # the default: half the run
>>> get(config).next_boundary(0) == config.train.steps // 2
True
>>> config.model.generator_hidden_fraction = 0.5
>>> get(config)
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.train.algorithm='two_stage' initialises the discriminator from the generator, so their shapes must be equal: config.model.generator_hidden_size=32 (config.model.hidden_size=64), config.model.generator_num_heads=1 (config.model.num_heads=2), config.model.generator_intermediate_size=128 (config.model.intermediate_size=256), config.model.generator_embedding_size=32 (config.model.embedding_size=64); e.g. set config.model.generator_hidden_fraction=1.0
"""

from electra_tf import registry
from electra_tf.training.algorithms import adversarial
from electra_tf.training.algorithms import joint
from electra_tf.training.algorithms import two_stage

ALGORITHMS = registry.Registry("config.train.algorithm", [
    joint.Joint, two_stage.TwoStage, adversarial.Adversarial])


def get(config):
    """The algorithm of `config.train.algorithm`."""
    name = config.train.algorithm
    return ALGORITHMS.create(name, config)
