"""`joint`: every variable, by the objective's loss, at every step (the paper's ELECTRA).

The base class's defaults are this algorithm (`base.Algorithm`): one stage, every
trainable variable, the objective's loss, the run's optimizer.
"""

from electra_tf.training.algorithms import base


class Joint(base.Algorithm):
    """Every variable, by the objective's loss, at every step."""

    name = "joint"
