"""What one replica's training step compiles, recomputes and splits into: each resolved
from the config and the strategy, with a one-line `UserError` where they disagree,
before the `Trainer` builds its step (`Trainer.__init__`'s `# ---- what XLA compiles`
block reads `xla_scope`; `remat_mode` and `micro_batches` come before it). The choices
that need no strategy (xla_scope, remat, vocabulary_padding) the pre-training `validate`
checks first, against their lists in `config_check.CHOICES`.
"""

import tensorflow as tf

from electra_tf import config_check
from electra_tf import errors
from electra_tf.model import heads
from electra_tf.model import remat
from electra_tf.training import distribute


XLA_SCOPES = config_check.CHOICES["train.xla_scope"]


def check_xla_scope(scope: str) -> None:
    """A one-line `UserError` unless `config.train.xla_scope` (`scope`) is one of
    `XLA_SCOPES` (`xla_scope` calls it)."""
    errors.check_choice("config.train.xla_scope", scope, XLA_SCOPES)


def xla_scope(train_config, strategy) -> str:
    """What XLA compiles of a training step: "whole_step" (the forward/backward pass,
    all-reduce, clipping, optimizer update and metrics in one program), "forward_backward"
    (the rest runs as TensorFlow ops) or "none" (`jit_compile=False`).

    `auto`: the whole step on TPUs (TPUStrategy compiles every step whole; `whole_step`
    runs a launch's steps in one XLA `while`, `forward_backward` there launches each step
    on its own, `strategy.run` a step: the fallback if a TPU refuses the loop) and on one GPU
    (the optimizer's few hundred small kernels and their launches leave the step); the
    forward/backward pass on a CPU, where the whole step is a little faster but holds more
    memory (BENCHMARKS.md, "Memory"), and under Mirrored and multi-worker strategies,
    which cannot compile the cross-device all-reduce and update. A one-line `UserError`
    where `train_config.xla_scope` is not one of `XLA_SCOPES` (`check_xla_scope`) or is
    one the strategy refuses.
    """
    scope = train_config.xla_scope
    check_xla_scope(scope)
    if distribute.is_tpu(strategy):  # TPUStrategy compiles every step whole, XLA or not
        return "forward_backward" if scope == "forward_backward" else "whole_step"
    if not train_config.jit_compile:
        if scope == "whole_step":
            raise errors.UserError("config.train.xla_scope='whole_step' needs "
                                   "config.train.jit_compile=true")
        return "none"
    one_device = isinstance(strategy, tf.distribute.OneDeviceStrategy)
    if scope == "whole_step":
        if not one_device:
            raise errors.UserError(
                f"config.train.xla_scope='whole_step' needs one device or a TPU; "
                f"{type(strategy).__name__} compiles the forward/backward pass only "
                "(use auto)")
        return "whole_step"
    if scope == "auto" and one_device and distribute.device_kind(strategy) == "gpu":
        return "whole_step"
    return "forward_backward"


def remat_mode(mode: str, strategy, model, local_batch: int, seq_len: int,
               num_predictions: int, policy: str) -> tuple[str, str]:
    """(the recomputation to run, why) for `mode` (config.train.remat, checked:
    `remat.check_remat`): `remat.choose` for this replica's step of `local_batch` rows (a
    micro-batch's, under accumulation), its activations
    estimated from the model's shape (the generator's pass counted where the objective
    has none: an upper bound) and 16 bytes per weight of state (float32 weight, gradient
    and Adam's two moments)."""
    remat.check_remat(mode)
    shape = model.shape
    activations = remat.activation_bytes(
        [shape.discriminator, shape.generator], local_batch, seq_len,
        4 if policy == "float32" else 2,
        logits=2 * local_batch * num_predictions * model.vocabulary_size)
    return remat.choose(mode, distribute.device_kind(strategy),
                        distribute.device_memory(strategy), activations,
                        16 * model.count_params())


def check_vocabulary_padding(mode: str) -> None:
    """A one-line `UserError` unless `config.train.vocabulary_padding` (`mode`) is one of
    `heads.PADDINGS` (`vocabulary_multiple` calls it)."""
    errors.check_choice("config.train.vocabulary_padding", mode, heads.PADDINGS)


def vocabulary_multiple(mode: str, strategy) -> tuple[int, str]:
    """(the multiple the MLM heads pad the vocabulary to, why) for
    config.train.vocabulary_padding=`mode` on the strategy's device
    (`heads.padding_multiple`; `mode` checked: `check_vocabulary_padding`)."""
    check_vocabulary_padding(mode)
    return heads.padding_multiple(mode, distribute.device_kind(strategy))


def micro_batches(train_config, local_batch: int) -> int:
    """`config.train.accumulation_steps` (a whole number >= 1: `config_check`'s range,
    which `loop.validate` checks), checked against this replica's batch rows."""
    n = train_config.accumulation_steps
    if local_batch % n:
        raise errors.UserError(
            f"config.train.accumulation_steps={n} does not divide the {local_batch} rows each "
            f"replica gets of config.train.batch_size={train_config.batch_size}: choose a "
            "divisor")
    return n
