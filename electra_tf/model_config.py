"""`config.model` ⇄ `sizes.ModelShape`: the one place a model's shape is read from a config.

`config.model.size` names the preset that fills the defaults; every dimension can be set
(0 = the preset's, or derived for the generator):

    discriminator  hidden_size, num_layers, num_heads, intermediate_size, embedding_size
    positions      max_position_embeddings (the position table; default 512)
    generator      generator_hidden_size   (0: hidden_size × generator_hidden_fraction)
                   generator_num_layers    (0: num_layers × generator_layer_fraction)
                   generator_num_heads     (0: one per 64 units; the discriminator's at its width)
                   generator_intermediate_size (0: 4 × its hidden; the discriminator's at its width)
                   generator_embedding_size (tie=none only; 0: its hidden size, as the original)
    sharing        tie = none|embeddings|all|gdes (`sizes.TIES`); `tie_embeddings=False` is the
                   older spelling of tie=none

A run's config.json holds the resolved shape (`resolve`), so everything downstream
(resume checks, export, fine-tuning, conversion, FLOPs) reads the same shape, never a
preset name. A config.json of an earlier version lacks the keys that came later:
`complete` fills them, in this one place (`EARLIER_DEFAULTS`), so that the code reads
every key directly. Errors name the keys:

>>> import ml_collections
>>> from configs import electra
>>> config = electra.get_config("tiny")
>>> config.model.hidden_size, config.model.num_heads = 96, 3
>>> shape(config).discriminator
EncoderSize(hidden_size=96, num_layers=2, num_heads=3, intermediate_size=256, embedding_size=64)
>>> config.model.num_heads = 5
>>> shape(config)
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.model.hidden_size=96 is not a multiple of config.model.num_heads=5
"""

import dataclasses

import ml_collections

from electra_tf import config_check
from electra_tf import errors
from electra_tf.model import sizes

_DISCRIMINATOR_KEYS = {  # EncoderSize field → config.model key
    "hidden_size": "hidden_size", "num_layers": "num_layers", "num_heads": "num_heads",
    "intermediate_size": "intermediate_size", "embedding_size": "embedding_size"}
_GENERATOR_KEYS = {field: f"generator_{key}" for field, key in _DISCRIMINATOR_KEYS.items()}


# What a config.json written before a key existed meant by its absence: the value that
# version ran with, the key's default in configs/electra.py for every size but where the
# default changed when the key came (train.adam_bias_correction: tiny's only;
# tests/test_model_config.py holds them so). Two keys are derived instead:
# model.attention_dropout was model.dropout, and model.tie stays absent, for `_tie` to
# read tie_embeddings as that version did.
EARLIER_DEFAULTS = {
    "data.whole_word_masking": False,
    "data.skip_damaged_shards": False,
    **{f"model.{key}": 0 for key in (*_DISCRIMINATOR_KEYS.values(),
                                     *_GENERATOR_KEYS.values())},
    "model.max_position_embeddings": 512,
    "model.objective": "electra",
    "model.generator_init": "",
    "model.temperature_schedule": "constant",
    "model.temperature_steps": 0,
    "train.algorithm": "joint",
    "train.two_stage_generator_steps": 0,
    "train.generator": "train",
    "train.adversarial_mlm_weight": 0.0,
    "train.xla_scope": "auto",
    "train.accumulation_steps": 1,
    "train.remat": "auto",
    "train.vocabulary_padding": "auto",
    "train.eval_predictions": 3,
    "train.profile_steps": 0,
    "train.adam_bias_correction": True,   # adamw's, before the original's was an option
}


def complete(config) -> ml_collections.ConfigDict:
    """A copy of the pre-training `config` (a ConfigDict or a config.json's dict) with
    every key of `EARLIER_DEFAULTS` that it lacks, and a lacking
    `model.attention_dropout` as `model.dropout`: the config as this version reads it.

    >>> from configs import electra
    >>> saved = electra.get_config("tiny").to_dict()
    >>> saved["model"]["dropout"] = 0.2
    >>> del saved["model"]["attention_dropout"], saved["train"]["algorithm"]
    >>> completed = complete(saved)
    >>> completed.model.attention_dropout, completed.train.algorithm
    (0.2, 'joint')
    """
    data = config.to_dict() if hasattr(config, "to_dict") else config
    completed = fill_absent(ml_collections.ConfigDict(data), EARLIER_DEFAULTS)
    model = completed.model
    if "attention_dropout" not in model and "dropout" in model:
        model.attention_dropout = model.dropout
    return completed


def checked(config) -> ml_collections.ConfigDict:
    """`complete(config)`, checked in all that needs no TensorFlow: every value in its
    range and among its choices (`config_check`), and the shape (`shape`). The train
    binary calls it before TensorFlow loads, so that a bad config is answered at once;
    the loop's `validate` begins with it.

    >>> from configs import electra
    >>> config = electra.get_config("tiny")
    >>> config.model.num_heads = 5
    >>> try:
    ...     checked(config)
    ... except errors.UserError as e:
    ...     print(e)
    config.model.hidden_size=64 is not a multiple of config.model.num_heads=5
    """
    config = complete(config)
    config_check.check(config)
    shape(config)
    return config


def fill_absent(config: ml_collections.ConfigDict, defaults: dict) -> ml_collections.ConfigDict:
    """`config`, changed in place: each key of `defaults` ("section.name", or "section"
    for a whole section) that it lacks set to its value, the sections on the way made
    where absent; what `config` holds is kept. Pre-training's `complete` and
    fine-tuning's (`finetuning/loop.py`) fill an earlier version's config.json with it.

    >>> config = ml_collections.ConfigDict({"train": {"steps": 5}})
    >>> config = fill_absent(config, {"train.steps": 1, "train.seed": 0, "data": {}})
    >>> config.train.steps, config.train.seed, dict(config.data)
    (5, 0, {})
    """
    for key, value in defaults.items():
        *sections, name = key.split(".")
        node = config
        for section in sections:
            if section not in node:
                node[section] = ml_collections.ConfigDict()
            node = node[section]
        if name not in node:
            node[name] = value
    return config


def _dims(model, keys: dict) -> dict:
    """{field: value} of the keys set (non-zero; `config_check`'s ranges checked)."""
    return {field: int(model[key]) for field, key in keys.items() if model[key]}


def _tie(model) -> tuple[str, bool]:
    """(tie, legacy): `legacy` when `tie_embeddings=False` chose tie=none (a run written
    before `tie` existed, or its command): its generator embeddings keep the shared width,
    as they had then."""
    tie = model.get("tie")
    untied = not model.tie_embeddings
    if tie is None:  # a config.json written before `tie` existed
        return ("none", True) if untied else ("embeddings", False)
    errors.check_choice("config.model.tie", tie, sizes.TIES)
    if untied:
        if tie == "all":
            raise errors.UserError("config.model.tie_embeddings=False contradicts "
                                   "config.model.tie='all'; set only config.model.tie")
        return "none", tie == "embeddings"
    return tie, False


def _check_heads(size: sizes.EncoderSize, prefix: str):
    if size.hidden_size % size.num_heads:
        raise errors.UserError(
            f"config.model.{prefix}hidden_size={size.hidden_size} is not a multiple of "
            f"config.model.{prefix}num_heads={size.num_heads}")


def _generator(model, discriminator: sizes.EncoderSize, tie: str,
               legacy: bool) -> sizes.EncoderSize:
    given = _dims(model, _GENERATOR_KEYS)
    if tie == "all":
        for field, value in given.items():
            if value != getattr(discriminator, field):
                raise errors.UserError(
                    f"config.model.{_GENERATOR_KEYS[field]}={value}: config.model.tie='all' "
                    "makes the generator the discriminator's encoder, of "
                    f"{field}={getattr(discriminator, field)}")
        return discriminator
    hidden_fraction = model.generator_hidden_fraction
    layer_fraction = model.generator_layer_fraction
    hidden = given.get("hidden_size",
                       max(1, round(discriminator.hidden_size * hidden_fraction)))
    full_width = hidden == discriminator.hidden_size
    heads = given.get("num_heads",
                      discriminator.num_heads if full_width else sizes.heads_for(hidden))
    if hidden % heads:
        what = (f"config.model.generator_hidden_size={hidden}" if "hidden_size" in given else
                f"config.model.generator_hidden_fraction={hidden_fraction} gives {hidden} "
                "hidden units, which")
        raise errors.UserError(f"{what} is not a multiple of the generator's {heads} "
                               "attention heads (one per 64 units unless set): choose a "
                               "multiple, or set config.model.generator_num_heads")
    if tie in ("embeddings", "gdes"):
        embedding = given.get("embedding_size", discriminator.embedding_size)
        if embedding != discriminator.embedding_size:
            raise errors.UserError(
                f"config.model.generator_embedding_size={embedding}: config.model.tie="
                f"{tie!r} shares the discriminator's embeddings, of "
                f"embedding_size={discriminator.embedding_size}; use tie='none' for its own")
    else:  # none: its own embeddings, at its own width (a pre-`tie` run: the shared width)
        embedding = given.get("embedding_size",
                              discriminator.embedding_size if legacy else hidden)
    return sizes.EncoderSize(
        hidden_size=hidden,
        num_layers=given.get("num_layers",
                             max(1, round(discriminator.num_layers * layer_fraction))),
        num_heads=heads,
        intermediate_size=given.get("intermediate_size", discriminator.intermediate_size
                                    if full_width else 4 * hidden),
        embedding_size=embedding)


def shape(config) -> sizes.ModelShape:
    """The `ModelShape` of a pre-training config (configs/electra.py or a run's
    config.json, of any version: `complete`); a `UserError` naming the keys of an
    impossible combination."""
    if "size" not in config.get("model", {}):
        raise errors.UserError("config.model.size is missing: not a pre-training config")
    config = complete(config)
    model = config.model
    # What the shape reads, in its range (a config.json's: no run checked it); a
    # generator's fraction only where no explicit dimension replaces it.
    read = [*_DISCRIMINATOR_KEYS.values(), *_GENERATOR_KEYS.values(),
            "max_position_embeddings"]
    for fraction, key in (("generator_hidden_fraction", "generator_hidden_size"),
                          ("generator_layer_fraction", "generator_num_layers")):
        if not model[key]:
            read.append(fraction)
    config_check.check(config, [f"model.{key}" for key in read])
    discriminator = dataclasses.replace(sizes.get_size(model.size),
                                        **_dims(model, _DISCRIMINATOR_KEYS))
    _check_heads(discriminator, "")
    tie, legacy = _tie(model)
    generator = _generator(model, discriminator, tie, legacy)
    _check_heads(generator, "generator_")
    positions = int(model.max_position_embeddings)
    seq = config.data.get("max_seq_length")  # absent: a model alone, no data
    if seq is not None and seq > positions:
        raise errors.UserError(
            f"config.data.max_seq_length={seq} is longer than the position table: "
            f"config.model.max_position_embeddings={positions}")
    return sizes.ModelShape(discriminator, generator, positions, tie).check()


def fields(model_shape: sizes.ModelShape) -> dict:
    """The `config.model` keys that give `model_shape` exactly, with no default left to a
    preset: `size` is the preset of its discriminator, else the closest by width (whose
    training defaults, e.g. the learning rate, suit it best)."""
    d, g = model_shape.discriminator, model_shape.generator
    preset = model_shape.preset or min(
        sizes.SIZES, key=lambda name: abs(sizes.SIZES[name].hidden_size - d.hidden_size))
    out = {"size": preset, "max_position_embeddings": model_shape.max_positions,
           "tie": model_shape.tie, "tie_embeddings": model_shape.tie != "none"}
    for field, key in _DISCRIMINATOR_KEYS.items():
        out[key] = getattr(d, field)
    for field, key in _GENERATOR_KEYS.items():
        out[key] = getattr(g, field)
    return out


def config_key(path: str) -> str:
    """The `config.model` key of a `ModelShape.to_dict()` path ("generator.hidden_size")."""
    part, _, field = path.partition(".")
    key = {"discriminator": field, "generator": f"generator_{field}",
           "max_positions": "max_position_embeddings"}.get(part, part)
    return f"config.model.{key}"


def resolve(config) -> ml_collections.ConfigDict:
    """A copy of `config` whose `model` holds the resolved shape explicitly (what a run
    writes to its config.json); `size` stays the preset the config named."""
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.model.update(dict(fields(shape(config)), size=config.model.size))
    return resolved


def pretrainer(config, vocabulary_size: int, dtype=None):
    """The `ElectraPretrainer` of a pre-training config (of any version: `complete`)."""
    from electra_tf.model import objectives  # pylint: disable=g-import-not-at-top
    from electra_tf.model import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top
    config = complete(config)
    model = config.model
    model_shape = shape(config)
    detects = objectives.OBJECTIVES.get(objective_name(config)).detects
    if model_shape.tie == "gdes" and not detects:
        # The MLM head projects with the shared table, the input side reads its
        # stop-gradient plus the delta: the main model's LM loss would train the table.
        raise errors.UserError(
            f"config.model.tie='gdes' with config.model.objective="
            f"{objective_name(config)!r}: gdes keeps a replaced-token detector's gradients "
            "out of the generator's table, but this objective's main model predicts tokens "
            "with that table; use tie=embeddings, or objective electra or electra_15")
    chosen = objective(config)  # the run's one objective: the model's, the metrics'
    return pretrainer_lib.ElectraPretrainer(
        vocabulary_size, model_shape, temperature=model.temperature,
        disallow_correct=model.disallow_correct, dropout=model.dropout,
        attention_dropout=model.attention_dropout,
        objective=chosen, dtype=dtype, name="electra",
        generator_trainable=generator_mode(config) == "train",
        mask_prob=config.data.mask_prob)


def read_model(model, path: str, what: str = "the model") -> None:
    """Restores `model`'s variables from the checkpoint `path` (other items ignored), or
    a one-line `UserError` naming `path`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    try:
        status = tf.train.Checkpoint(model=model).read(path)
        status.expect_partial().assert_existing_objects_matched()
    # A damaged .index raises a plain OpError ("not an sstable"), a cut data file an
    # IndexError ("Read less bytes than requested").
    except (tf.errors.OpError, IndexError, AssertionError, ValueError) as e:
        raise errors.UserError(f"{path}: cannot restore {what} "
                               f"({' '.join(str(e).split())[:300]})") from None


GENERATOR_MODES = config_check.CHOICES["train.generator"]


def generator_mode(config) -> str:
    """`config.train.generator`: `train` (the default) or `frozen` (no gradients, no
    optimizer state: a fixed language model such as `config.model.generator_init`'s, as
    Fast-ELECTRA uses), checked against what a frozen generator needs."""
    mode = config.train.generator
    errors.check_choice("config.train.generator", mode, GENERATOR_MODES)
    if mode == "frozen":
        from electra_tf.model import objectives  # pylint: disable=g-import-not-at-top
        objective = objective_name(config)
        algorithm = config.train.algorithm
        tie = shape(config).tie
        if not objectives.OBJECTIVES.get(objective).uses_generator:
            raise errors.UserError(f"config.train.generator='frozen': config.model.objective="
                                   f"{objective!r} has no generator")
        if algorithm != "joint":
            raise errors.UserError(
                f"config.train.generator='frozen': config.train.algorithm={algorithm!r} "
                "trains the generator; use algorithm joint")
        if tie != "none":
            raise errors.UserError(
                f"config.train.generator='frozen' with config.model.tie={tie!r}: the "
                "discriminator would train what it shares with the generator; use "
                "config.model.tie=none (the generator's own embeddings)")
    return mode


def temperature_schedule(config):
    """The sampling temperature as a function of the step (`sampling.TemperatureSchedule`):
    `config.model.temperature` throughout (`temperature_schedule=constant`, the default),
    or from it to 1.0 over `config.model.temperature_steps` steps (0: config.train.steps)
    in a straight line (`linear`) or half a cosine (`cosine`)."""
    from electra_tf.model import sampling  # pylint: disable=g-import-not-at-top
    model = config.model
    kind = model.temperature_schedule
    errors.check_choice("config.model.temperature_schedule", kind, sampling.SCHEDULES)
    steps = int(model.temperature_steps) or config.train.steps
    return sampling.TemperatureSchedule(kind, float(model.temperature), steps)


def objective(config):
    """The `Objective` of `config.model.objective`, made from `config` (weighing RTD by
    `config.model.disc_weight`); a one-line `UserError` where it cannot run with the
    config's tie or algorithm (`Objective.refusal`)."""
    from electra_tf.model import objectives  # pylint: disable=g-import-not-at-top
    chosen = objectives.OBJECTIVES.create(objective_name(config), config)
    refusal = chosen.refusal(shape(config).tie, config.train.algorithm)
    if refusal:
        raise errors.UserError(f"config.model.objective={objective_name(config)!r}: {refusal}")
    return chosen


def objective_name(config) -> str:
    """`config.model.objective`."""
    return config.model.objective
