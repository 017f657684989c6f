"""AdamW (or LAMB) with the original's schedule, weight-decay exclusions and clipping.

Learning rate: linear warm-up from 0 to the peak over `warmup_steps`, then linear decay
to 0 at `steps` (the original's polynomial decay with power 1). Weight decay is
decoupled (`var -= lr * wd * var`) and skips LayerNorm scales/offsets and every bias.
Gradients are clipped to a global norm of `clip_norm` by Keras (`global_clipnorm`).

>>> schedule = WarmupLinearDecay(peak=1.0, warmup_steps=10, total_steps=110)
>>> [round(float(schedule(s)), 2) for s in (0, 5, 10, 60, 110, 200)]
[0.0, 0.5, 0.91, 0.45, 0.0, 0.0]
"""

import keras
import tensorflow as tf

from electra_tf import errors


class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """peak · step / warmup during warm-up, then peak · (1 − step / total) down to 0."""

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = self.peak * step / max(self.warmup_steps, 1)
        decay = self.peak * tf.maximum(0.0, 1.0 - step / max(self.total_steps, 1))
        return tf.where(step < self.warmup_steps, warmup, decay)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps}


class _SummedGradients:
    """The train step all-reduces gradients itself, so that `global_clipnorm` clips the
    gradient of the whole global batch (Keras would clip each replica's part, then sum).
    Keras must therefore not sum them over replicas a second time."""

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


class AdamW(_SummedGradients, keras.optimizers.AdamW):
    pass


class Lamb(_SummedGradients, keras.optimizers.Lamb):
    pass


def no_decay_variables(model: keras.Model) -> list:
    """LayerNorm scales/offsets and biases: the variables weight decay must skip."""
    out = []
    for layer in model._flatten_layers(include_self=False):  # pylint: disable=protected-access
        if isinstance(layer, keras.layers.LayerNormalization):
            out.extend(layer.trainable_weights)
    out.extend(v for v in model.trainable_weights if v.name.endswith("bias"))
    return out


def create_optimizer(train_config, model: keras.Model, dtype_policy: str = "float32",
                     variables=None, total_steps=None):
    """The optimizer for `config.train`, built for `variables` (default: `model`'s).

    Call inside `strategy.scope()`, before the first step. With a float16 policy the
    optimizer is wrapped in Keras' `LossScaleOptimizer` (dynamic loss scaling).
    `total_steps` (default `config.train.steps`): where the schedule reaches 0, counted in
    this optimizer's own updates (two_stage's second optimizer: the steps after the switch).
    """
    schedule = WarmupLinearDecay(train_config.learning_rate, train_config.warmup_steps,
                                 train_config.steps if total_steps is None else total_steps)
    kwargs = dict(learning_rate=schedule, weight_decay=train_config.weight_decay,
                  beta_1=train_config.adam_beta1, beta_2=train_config.adam_beta2,
                  epsilon=train_config.adam_epsilon,
                  global_clipnorm=train_config.clip_norm or None)
    if train_config.optimizer == "adamw":
        optimizer = AdamW(**kwargs)
    elif train_config.optimizer == "lamb":
        optimizer = Lamb(**kwargs)
    else:
        raise errors.UserError(f"config.train.optimizer: unknown optimizer "
                               f"{train_config.optimizer!r}; choose adamw or lamb")
    optimizer.exclude_from_weight_decay(var_list=no_decay_variables(model))
    if dtype_policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables if variables is None else variables)
    return optimizer
