"""`config.model.generator_init=PATH`: the generator starts from a masked language model
you already have, a run's workdir (or one checkpoint prefix in WORKDIR/checkpoints):
one of ours, or one that tools/convert_checkpoint.py --to=electra_tf wrote from the
original's TF1 or Hugging Face checkpoints. Its language model is the generator of an
`electra`-family run, or the encoder and MLM head of an `mlm` run.

    configure(config)   before the shape is resolved: the generator's dimensions are the
                        checkpoint's (a dimension given and different is a one-line error
                        naming the key); the path made absolute, as config.json keeps it
    load(model, ...)    at step 0 only (a resumed run has the generator in its own
                        checkpoint): every weight of the generator, copied exactly

With config.train.generator=frozen it stays that model (Fast-ELECTRA's fixed generator);
with `train` it is where joint training starts. Under tie=embeddings the generator's
embeddings are the discriminator's, so the discriminator starts from them too, and a
checkpoint whose embedding width differs from the discriminator's cannot share them.
"""

import os

import ml_collections
import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf import model_config
from electra_tf import workdir as workdir_lib
from electra_tf.model import objectives
from electra_tf.text import tokenizer

_KEYS = {"hidden_size": "generator_hidden_size", "num_layers": "generator_num_layers",
         "num_heads": "generator_num_heads",
         "intermediate_size": "generator_intermediate_size",
         "embedding_size": "generator_embedding_size"}  # EncoderSize field → config.model key


def _source(path: str) -> tuple[str, str | None, ml_collections.ConfigDict]:
    """(workdir, checkpoint prefix or None for its latest, its config: `complete`d, as
    this version reads it) of `path`."""
    if tf.io.gfile.isdir(path):
        workdir, checkpoint = path, None
    else:
        workdir, checkpoint = os.path.dirname(os.path.dirname(path)), path
    saved = workdir_lib.read_json(workdir, workdir_lib.CONFIG)
    if saved is None or "size" not in saved.get("model", {}):
        raise errors.UserError(
            f"config.model.generator_init={path!r}: not a pre-training run's directory (no "
            f"{workdir_lib.CONFIG} with model.size); give a workdir of electra_tf.train or "
            "of tools/convert_checkpoint.py --to=electra_tf")
    return workdir, checkpoint, model_config.complete(saved)


def _language_model(source) -> tuple[str, object]:
    """(what the checkpoint's language model is, its `EncoderSize`)."""
    shape = model_config.shape(source)
    if objectives.OBJECTIVES.get(model_config.objective_name(source)).uses_generator:
        return "generator", shape.generator
    return "encoder", shape.discriminator


FROZEN_AT_RANDOM = (
    "config.train.generator=frozen without config.model.generator_init: the generator "
    "stays at its random initialisation, whose samples are close to uniform over the "
    "vocabulary (in effect a uniform-generator ablation, not ELECTRA); give "
    "config.model.generator_init=RUN for a trained language model")


def frozen_at_random(config) -> bool:
    """Whether `config` freezes a generator that no `generator_init` gives: a random one
    (`FROZEN_AT_RANDOM` says so in the run's log and the comparison's results)."""
    return (model_config.generator_mode(config) == "frozen"
            and not config.model.generator_init)


def configure(config) -> ml_collections.ConfigDict:
    """A copy of `config` whose generator has the shape of `config.model.generator_init`'s
    language model (unchanged without one)."""
    path = config.model.generator_init
    if not path:
        return config
    config = ml_collections.ConfigDict(config.to_dict())
    config.model.generator_init = path = workdir_lib.absolute(path)
    if not objectives.OBJECTIVES.get(model_config.objective_name(config)).uses_generator:
        raise errors.UserError(
            f"config.model.generator_init={path!r} with config.model.objective="
            f"{model_config.objective_name(config)!r}: this objective has no generator to "
            "start; use electra, electra_15 or replace_mlm")
    _, _, source = _source(path)
    what, size = _language_model(source)
    tie = model_config.shape(config).tie
    if tie == "all":
        raise errors.UserError(
            f"config.model.generator_init={path!r} with config.model.tie='all': the "
            "generator would be the discriminator's encoder; use tie=embeddings or none")
    for field, key in _KEYS.items():
        if field == "embedding_size" and tie != "none":
            continue  # the discriminator's: checked below
        value, given = getattr(size, field), config.model[key]
        if given and given != value:
            raise errors.UserError(
                f"config.model.{key}={given}, but the {what} of {path} has {field}={value}: "
                f"leave it 0 (the checkpoint's) or give {value}")
        config.model[key] = value
    resolved = model_config.shape(config)
    if size.embedding_size != resolved.generator.embedding_size:
        raise errors.UserError(
            f"config.model.generator_init={path!r}: its {what}'s embeddings are "
            f"{size.embedding_size} wide and the discriminator's "
            f"{resolved.discriminator.embedding_size} (config.model.embedding_size), so "
            f"config.model.tie={tie!r} cannot share them; use config.model.tie=none, or "
            f"config.model.embedding_size={size.embedding_size}")
    positions = source.model.max_position_embeddings
    if positions != resolved.max_positions:
        raise errors.UserError(
            f"config.model.max_position_embeddings={resolved.max_positions}, but the {what} "
            f"of {path} has {positions} positions: give {positions}")
    return config


def load(model, config, vocab: tokenizer.Vocab) -> None:
    """Copies the language model of `config.model.generator_init` (a `configure`d
    config) into `model`'s generator, every weight exactly."""
    path = config.model.generator_init
    workdir, checkpoint, source_config = _source(path)
    source_vocab = workdir_lib.path(workdir, workdir_lib.VOCAB)
    if (not tf.io.gfile.exists(source_vocab)
            or tokenizer.Vocab.load(source_vocab).sha256 != vocab.sha256):
        raise errors.UserError(
            f"config.model.generator_init={path!r}: its vocabulary ({source_vocab}) is not "
            f"config.data.vocab_file={config.data.vocab_file!r}: the generator's token ids "
            "must be the data's")
    checkpoint = checkpoint or workdir_lib.latest_checkpoint(workdir)
    if not checkpoint:
        raise errors.UserError(f"config.model.generator_init={path!r}: no checkpoint in "
                               f"{workdir_lib.checkpoints(workdir)}")
    converted = workdir_lib.read_json(workdir, workdir_lib.CONVERTED) or {}
    if converted.get("generator") == "fresh" and checkpoint.endswith("ckpt-0"):
        raise errors.UserError(
            f"config.model.generator_init={path!r} was converted from a discriminator alone "
            f"({converted.get('source')}): it has no generator to start from")
    what, _ = _language_model(source_config)
    source = model_config.pretrainer(source_config, vocab.size, dtype="float32")
    source.build_for(source_config.data.max_seq_length, 1)
    try:
        model_config.read_model(source, checkpoint, "its model")
    except errors.UserError as e:
        raise errors.UserError(f"config.model.generator_init={path!r}: {e}") from None
    targets, sources = model.language_model_variables(), source.language_model_variables()
    if len(targets) != len(sources) or any(t.shape != s.shape
                                           for t, s in zip(targets, sources)):
        raise errors.UserError(f"config.model.generator_init={path!r}: its language model's "
                               f"weights ({len(sources)}) do not fit this run's generator "
                               f"({len(targets)}); give a run of the same shape")
    for target, value in zip(targets, sources):
        target.assign(tf.cast(value, target.dtype))
    logging.info("The generator starts from the %s of %s (%d weights)%s", what, checkpoint,
                 len(targets), "; the discriminator shares its embeddings"
                 if model.shape.tie in ("embeddings", "gdes") else "")
