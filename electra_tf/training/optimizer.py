"""AdamW (or LAMB) with the original's schedule, weight-decay exclusions and clipping.

Learning rate: the original's, `peak · min(1, step / warmup_steps) · (1 − step / steps)`
(its polynomial decay of power 1 to 0 at `steps`, scaled by the warm-up's fraction).
Weight decay is decoupled (`var -= lr * wd * var`) and skips LayerNorm scales/offsets and
every bias. Gradients are clipped to a global norm of `clip_norm` by Keras
(`global_clipnorm`). Adam's moments are bias-corrected or not (`bias_correction`): the
original's AdamWeightDecayOptimizer (BERT's) does not correct them, so its first
hundreds of steps are several times larger than corrected Adam's (~3.2x at step 100,
1.6x at 500), the steps its hyper-parameters were tuned with.

>>> schedule = WarmupLinearDecay(peak=1.0, warmup_steps=10, total_steps=110)
>>> [round(float(schedule(s)), 3) for s in (0, 5, 10, 60, 110, 200)]
[0.0, 0.477, 0.909, 0.455, 0.0, 0.0]
"""

import contextlib

import keras
import tensorflow as tf

from electra_tf import compat
from electra_tf import errors


class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """peak · min(1, step / warmup) · (1 − step / total), 0 from `total` on (no warm-up:
    the decay alone)."""

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        decay = self.peak * tf.maximum(0.0, 1.0 - step / max(self.total_steps, 1))
        if not self.warmup_steps:
            return decay
        return tf.minimum(1.0, step / self.warmup_steps) * decay

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps}


class _StepScalars:
    """What one step's update shares between its variables (a plain object: Keras tracks
    what an optimizer's attributes hold)."""
    values = None


class AdamW(compat.GradientsSummedByCaller, compat.AroundVariableUpdates,
            compat.OwnWeightDecay, keras.optimizers.AdamW):
    """Keras' AdamW (its variables, schedule, exclusions and clipping) with each float32
    variable updated by TF's fused `ResourceApplyAdam` kernel, and the step's scalars (β
    powers, learning rate × weight decay) made once per step, not once per variable.

    Keras builds its update from ~51 ops a variable, half the nodes of Small's traced step,
    held in every graph that contains it; the kernel does the same update (`m`, `v`, then
    `lr·√(1−β₂ᵗ)/(1−β₁ᵗ) · m/(√v+ε)`) in one op: less host memory (BENCHMARKS.md,
    "Memory"). It takes 1 − β in float32 where Keras takes it in Python, so `v` differs
    from Keras' by ~1e-5 relative (β₂ = 0.999). Another dtype or `amsgrad` takes Keras'
    own path. Gradients arrive summed over replicas (`compat.GradientsSummedByCaller`).

    `bias_correction=False` is the original ELECTRA's update (BERT's
    AdamWeightDecayOptimizer): `lr · m/(√v+ε)`, the kernel's with both β powers 0; Keras'
    own path corrects (`amsgrad` refuses the option; a variable not in float32, which no
    policy of ours makes, takes it)."""

    def __init__(self, *args, bias_correction: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if self.amsgrad and not bias_correction:
            raise ValueError("AdamW(amsgrad=True) takes Keras' update, which corrects the "
                             "moments: bias_correction=False cannot be kept")
        self.bias_correction = bias_correction
        self._shared = _StepScalars()

    @contextlib.contextmanager
    def variable_updates(self):
        # Around Keras' loop over the variables (each through `update_step`): the scalars
        # made once for all of them (once per step, even across replicas).
        self._shared.values = self._step_scalars()
        try:
            yield
        finally:
            self._shared.values = None

    def _step_scalars(self):
        beta_1, beta_2, epsilon = (tf.cast(x, tf.float32)
                                   for x in (self.beta_1, self.beta_2, self.epsilon))
        if not self.bias_correction:  # lr·√(1−0)/(1−0) = lr: m and v as they are
            return beta_1, beta_2, epsilon, tf.zeros([]), tf.zeros([])
        step = tf.cast(self.iterations + 1, tf.float32)
        return beta_1, beta_2, epsilon, tf.pow(beta_1, step), tf.pow(beta_2, step)

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or variable.dtype != tf.float32:
            return super().update_step(gradient, variable, learning_rate)
        beta_1, beta_2, epsilon, beta_1_power, beta_2_power = (
            self._shared.values or self._step_scalars())
        m, v = compat.adam_slots(self, variable)
        return compat.resource_apply_adam(
            variable, m, v, beta1_power=beta_1_power, beta2_power=beta_2_power,
            lr=tf.cast(learning_rate, tf.float32), beta1=beta_1, beta2=beta_2,
            epsilon=epsilon, grad=tf.cast(gradient, tf.float32))

    def apply_weight_decay(self, variables):
        """`var -= lr · wd · var` for the variables weight decay applies to, as Keras
        does, with lr · wd computed once."""
        if self.weight_decay is None:
            return

        def apply(distribution, variables):
            decay = tf.cast(self.learning_rate, tf.float32) * tf.cast(
                self.weight_decay, tf.float32)
            for variable in variables:
                if compat.decays(self, variable):
                    if isinstance(variable, keras.Variable):
                        variable = variable.value
                    distribution.extended.update(
                        variable, lambda v, d: v.assign_sub(v * tf.cast(d, v.dtype)),
                        args=(decay,), group=False)

        compat.merge_call(apply, compat.optimizer_strategy(self), variables)


class Lamb(compat.GradientsSummedByCaller, keras.optimizers.Lamb):
    pass


# config.train.optimizer's choices, in config_check.CHOICES' order.
OPTIMIZERS = {"adamw": AdamW, "lamb": Lamb}


def no_decay_variables(*models: keras.Layer) -> list:
    """LayerNorm scales/offsets and biases of `models` (a model, or layers): the
    variables weight decay must skip."""
    out = []
    for model in models:
        for layer in compat.sublayers(model, include_self=False):
            if isinstance(layer, keras.layers.LayerNormalization):
                out.extend(layer.trainable_weights)
        out.extend(v for v in model.trainable_weights if v.name.endswith("bias"))
    return out


def check_optimizer(train_config) -> None:
    """A one-line `UserError` unless `config.train.optimizer` names one of `OPTIMIZERS`
    (`create_optimizer` calls it; the pre-training `validate` checks the list in
    `config_check` before anything is built)."""
    errors.check_choice("config.train.optimizer", train_config.optimizer, OPTIMIZERS)


def create_optimizer(train_config, model: keras.Model, dtype_policy: str = "float32",
                     variables=None, total_steps=None, layers=()):
    """The optimizer for `config.train`, built for `variables` (default: `model`'s and
    `layers`'s: an algorithm's own layers beside the model, adversarial's baseline).

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
    check_optimizer(train_config)
    if train_config.optimizer == "adamw":
        kwargs["bias_correction"] = train_config.adam_bias_correction
    optimizer = OPTIMIZERS[train_config.optimizer](**kwargs)
    optimizer.exclude_from_weight_decay(var_list=no_decay_variables(model, *layers))
    if dtype_policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    if variables is None:
        variables = model.trainable_variables + [v for layer in layers
                                                 for v in layer.trainable_variables]
    optimizer.build(variables)
    return optimizer
