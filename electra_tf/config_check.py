"""Every numeric field of the pre-training and fine-tuning configs has a range, and each
setting chosen by name its choices (`CHOICES`), checked in one place before a run writes
anything: a one-line `UserError` naming the key, the value and what it must be. This
module imports no TensorFlow, so that the train binary answers a bad config at once,
before TensorFlow's seconds of start-up (`model_config.checked`).

>>> from configs import electra
>>> config = electra.get_config("tiny")
>>> config.train.learning_rate = -1e-3
>>> check(config)
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.train.learning_rate=-0.001: must be a number > 0
>>> config.train.learning_rate = 1e-3
>>> config.train.optimizer = "sgd"
>>> check(config)
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.train.optimizer='sgd': choose one of adamw, lamb
>>> config.train.optimizer = "adamw"
>>> check(config)

A field missing from a config (a config.json of an older version) is not checked; a
numeric field with no range here is a bug that tests/test_config_check.py catches.
"""

import dataclasses
import math

from electra_tf import errors

# Steps, sizes and counts go through int32 tensors somewhere: larger whole numbers are a
# typo, not a run.
_INT_MAX = 2**31 - 1


# The shortest example: [CLS] A [SEP] B [SEP] with a token in each segment (the packer's
# minimum, and the data tools' and the pre-training config's).
MIN_SEQ_LENGTH = 5


def max_predictions_per_seq(mask_prob: float, max_seq_length: int) -> int:
    """The original ELECTRA's bound on masked positions per sequence: the masking's
    `max_predictions` and the width of a batch's prediction slots.

    >>> max_predictions_per_seq(0.15, 128)
    19
    """
    return int((mask_prob + 0.005) * max_seq_length)


@dataclasses.dataclass(frozen=True)
class Range:
    """A numeric field's values: whole numbers or real ones, between `low` and `high`
    (each included unless `*_open`); `zero` says what 0 means where 0 is a default."""
    whole: bool
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    zero: str = ""

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        if self.low is not None and self.high is not None:
            return (f"{kind} in {'(' if self.low_open else '['}{self.low:g}, "
                    f"{self.high:g}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {self.high:g}"
        return kind

    def error(self, value) -> str | None:
        """Why `value` is out of range, or None."""
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not numeric or (self.whole and not isinstance(value, int)) or (
                not self.whole and not math.isfinite(value)):
            return f"must be {self.describe()}"
        low_bad = self.low is not None and (value <= self.low if self.low_open
                                            else value < self.low)
        high_bad = self.high is not None and (value >= self.high if self.high_open
                                              else value > self.high)
        if low_bad or high_bad:
            return f"must be {self.describe()}" + (f" ({self.zero})" if self.zero else "")
        if self.whole and abs(value) > _INT_MAX:
            return f"must be at most {_INT_MAX}"
        return None


def _whole(low=None, **kwargs) -> Range:
    return Range(True, low, **kwargs)


def _real(low=None, high=None, **kwargs) -> Range:
    return Range(False, low, high, **kwargs)


POSITIVE = _whole(1)
COUNT = _whole(0)  # 0 allowed: none, or off
FRACTION = _real(0, 1)  # a share, 0 and 1 included
PROBABILITY_OPEN = _real(0, 1, high_open=True)  # dropout, Adam's betas
CPU_DEVICES = _whole(0, high=1024, zero="0: off")  # logical CPU devices, to try strategies

# configs/electra.py
PRETRAINING = {
    "data.max_seq_length": _whole(MIN_SEQ_LENGTH, zero="[CLS] A [SEP] B [SEP], a token in "
                                                     "each"),
    "data.mask_prob": _real(0, 1, low_open=True),
    "data.mask_token_rate": FRACTION,
    "data.random_token_rate": FRACTION,
    "data.shuffle_buffer": POSITIVE,
    "model.hidden_size": _whole(0, zero="0: the size preset's"),
    "model.num_layers": _whole(0, zero="0: the size preset's"),
    "model.num_heads": _whole(0, zero="0: the size preset's"),
    "model.intermediate_size": _whole(0, zero="0: the size preset's"),
    "model.embedding_size": _whole(0, zero="0: the size preset's"),
    "model.max_position_embeddings": POSITIVE,
    "model.generator_hidden_fraction": _real(0, 1, low_open=True),
    "model.generator_layer_fraction": _real(0, 1, low_open=True),
    "model.generator_hidden_size": _whole(0, zero="0: from the fraction"),
    "model.generator_num_layers": _whole(0, zero="0: from the fraction"),
    "model.generator_num_heads": _whole(0, zero="0: one per 64 units"),
    "model.generator_intermediate_size": _whole(0, zero="0: 4 x its hidden size"),
    "model.generator_embedding_size": _whole(0, zero="0: its hidden size"),
    "model.temperature": _real(0, low_open=True),
    "model.temperature_steps": _whole(0, zero="0: train.steps"),
    "model.disc_weight": _real(0),
    "model.dropout": PROBABILITY_OPEN,
    "model.attention_dropout": PROBABILITY_OPEN,
    "train.batch_size": POSITIVE,
    "train.steps": POSITIVE,
    "train.learning_rate": _real(0, low_open=True),
    "train.warmup_steps": COUNT,
    "train.weight_decay": _real(0),
    "train.adam_beta1": PROBABILITY_OPEN,
    "train.adam_beta2": PROBABILITY_OPEN,
    "train.adam_epsilon": _real(0, low_open=True),
    "train.clip_norm": _real(0, zero="0: no clipping"),
    "train.steps_per_loop": POSITIVE,
    "train.checkpoint_every": POSITIVE,
    "train.keep_checkpoints": POSITIVE,
    "train.log_every": POSITIVE,
    "train.eval_every": POSITIVE,
    "train.eval_steps": POSITIVE,
    "train.eval_predictions": COUNT,
    "train.profile_steps": COUNT,
    "train.two_stage_generator_steps": _whole(0, zero="0: half of train.steps"),
    "train.adversarial_mlm_weight": _real(0),
    "train.seed": COUNT,
    "train.accumulation_steps": POSITIVE,
    "runtime.cpu_devices": CPU_DEVICES,
}

# configs/finetune.py and the tasks' own fields (glue/task.py, squad/task.py,
# tagging/task.py)
FINETUNING = {
    "data.max_seq_length": _whole(3, zero="[CLS] a [SEP]: at least 3 tokens"),
    "data.doc_stride": POSITIVE,
    "data.stride": _whole(0, zero="0: half a window"),
    "data.max_query_length": POSITIVE,
    "model.dropout": PROBABILITY_OPEN,
    "model.beam_size": POSITIVE,
    "model.max_answer_length": POSITIVE,
    "model.answerable_weight": _real(0),
    "model.null_threshold": _real(),
    "train.batch_size": POSITIVE,
    "train.epochs": _real(0, low_open=True),
    "train.learning_rate": _real(0, zero="0: the pre-trained model's default"),
    "train.layerwise_lr_decay": _real(0, 1, zero="0: the pre-trained model's default"),
    "train.warmup_proportion": FRACTION,
    "train.weight_decay": _real(0),
    "train.clip_norm": _real(0, zero="0: no clipping"),
    "train.eval_every": _whole(0, zero="0: every epoch"),
    "train.steps_per_loop": POSITIVE,
    "train.seed": COUNT,
    "runtime.cpu_devices": CPU_DEVICES,
}

# The settings chosen by name, for both kinds of config; the modules that act on them take
# their lists from here (a family of classes, the objectives and algorithms, is chosen
# from its registry, after TensorFlow loads).
CHOICES = {
    "train.remat": ("auto", "none", "selective", "blocks"),  # model/remat.py
    "train.vocabulary_padding": ("auto", "none", "tiles"),  # model/heads.py
    "train.xla_scope": ("auto", "whole_step", "forward_backward"),  # step_settings.py
    "train.optimizer": ("adamw", "lamb"),  # training/optimizer.py
    "train.generator": ("train", "frozen"),  # model_config.generator_mode
    "model.temperature_schedule": ("constant", "linear", "cosine"),  # model/sampling.py
    "train.mixed_precision": ("auto", "float32", "bfloat16", "float16"),  # distribute.py
    "runtime.strategy": ("auto", "tpu", "mirrored", "multi_worker", "one_device"),
}


def ranges_for(config) -> dict[str, Range]:
    """The ranges of `config`'s kind: fine-tuning configs name a task."""
    return FINETUNING if "task" in config else PRETRAINING


def check(config, keys=None) -> None:
    """A `UserError` for the first field of `config` out of its range or not among its
    `CHOICES`; `keys` ("section.name"): those numeric fields alone, for a function that
    reads a few of a config that no run checked (`model_config.shape` of a
    config.json)."""
    ranges = ranges_for(config)
    for key in ranges if keys is None else keys:
        section, name = key.split(".")
        if section not in config or name not in config[section]:
            continue
        value = config[section][name]
        why = ranges[key].error(value)
        if why:
            raise errors.UserError(f"config.{key}={value!r}: {why}")
    if keys is not None:
        return
    for key, choices in CHOICES.items():
        section, name = key.split(".")
        if section in config and name in config[section]:
            errors.check_choice(f"config.{key}", config[section][name], choices)
    data = config["data"] if "task" not in config and "data" in config else {}
    if "mask_token_rate" in data and "random_token_rate" in data:
        mask, random = data["mask_token_rate"], data["random_token_rate"]
        if mask + random > 1:
            raise errors.UserError(
                f"config.data.mask_token_rate={mask!r} and config.data.random_token_rate="
                f"{random!r}: their sum is the share of masked positions changed, at most 1")
    if "mask_prob" in data and "max_seq_length" in data:
        prob, length = data["mask_prob"], data["max_seq_length"]
        if max_predictions_per_seq(prob, length) < 1:
            raise errors.UserError(
                f"config.data.mask_prob={prob!r} of config.data.max_seq_length={length!r} "
                f"masks no position (int((mask_prob + 0.005) * max_seq_length) = 0): raise "
                "either")


def numeric_keys(config) -> list[str]:
    """Every "section.name" of `config` that holds a number (for the tests' walk)."""
    keys = []
    for section, fields in config.items():
        if not hasattr(fields, "items"):
            continue
        for name, value in fields.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                keys.append(f"{section}.{name}")
    return keys
