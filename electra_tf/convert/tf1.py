"""The original ELECTRA's TF1 pre-training checkpoints (google-research/electra): `TF1`,
format name `tf1`.

`read`: a checkpoint prefix (DIR/model.ckpt) or its directory (the latest one), of any
shape: `electra/` (the discriminator), `generator/` (its own encoder; its own
`generator/embeddings` when untied; no `generator/` scope at all when the generator is
the discriminator's encoder), `discriminator_predictions/`, `generator_predictions/`.
Optimizer slots and `global_step` are ignored. The number of attention heads is in no
tensor's shape: a preset's with the same dimensions, else one per 64 units (the
original's rule), unless `num_heads` says. `write`: `model.ckpt` with the same names.
"""

import os

import numpy as np
import tensorflow as tf

from electra_tf import compat
from electra_tf.convert import files
from electra_tf.convert import formats
from electra_tf.convert import table
from electra_tf.model import sizes


def _given_heads(flag: str, heads: int | None, part: str, hidden: int, source: str):
    """`heads` as the user gave them (--num_heads, --generator_num_heads), checked against
    the width the checkpoint says; None if not given."""
    if heads and hidden % heads:
        raise table.ConversionError(
            f"--{flag}={heads}: the {part}'s hidden size in {source} is {hidden}, not a "
            f"multiple of {heads}")
    return heads


def _discriminator_from_dims(hidden, layers, intermediate, embedding, num_heads, notes,
                             source):
    """The discriminator of these dimensions. The number of heads is in no tensor's shape:
    `num_heads` if given, else a preset's with these dimensions, else the original's
    rule (one per 64 units), said in `notes`."""
    dims = (hidden, layers, intermediate, embedding)
    if _given_heads("num_heads", num_heads, "discriminator", hidden, source):
        return sizes.EncoderSize(hidden, layers, num_heads, intermediate, embedding)
    for name, size in sizes.SIZES.items():
        if (size.hidden_size, size.num_layers, size.intermediate_size,
                size.embedding_size) == dims:
            return size
    heads = sizes.heads_for(hidden)
    notes.append(f"discriminator: {heads} attention heads assumed (hidden {hidden} / 64, "
                 "the original's rule; no tensor holds the number): give --num_heads if not")
    return sizes.EncoderSize(hidden, layers, heads, intermediate, embedding)


def _prefix(path: str) -> str:
    """A checkpoint prefix: `path` itself, or the latest checkpoint in directory `path`."""
    if tf.io.gfile.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
        if prefix is None:
            raise table.ConversionError(f"{path}: no checkpoint in this directory (no "
                                        "'checkpoint' file); give the prefix, e.g. "
                                        "DIR/model.ckpt")
        return prefix
    if not tf.io.gfile.exists(path + ".index"):
        raise table.ConversionError(f"{path}: no such checkpoint ({path}.index not "
                                    "found)")
    return path


def _unreadable(prefix: str, error: Exception) -> table.ConversionError:
    return table.ConversionError(f"{prefix}: not a readable checkpoint "
                                 f"({' '.join(str(error).split())[:300]})")


def _encoder_dims(shapes, scope, source):
    """(hidden, layers, intermediate) of the TF1 encoder under `scope`."""
    layers = 0
    while f"{scope}/encoder/layer_{layers}/attention/self/query/kernel" in shapes:
        layers += 1
    if not layers:
        raise table.ConversionError(f"{source}: no tensor {scope}/encoder/layer_0/attention/"
                                    "self/query/kernel; not an ELECTRA pre-training "
                                    "checkpoint")
    hidden = shapes[f"{scope}/encoder/layer_0/attention/self/query/kernel"][-1]
    intermediate_name = f"{scope}/encoder/layer_0/intermediate/dense/kernel"
    if intermediate_name not in shapes:
        raise table.ConversionError(f"{source}: no tensor {intermediate_name}")
    return hidden, layers, shapes[intermediate_name][-1]


class TF1(formats.Format):
    """The original ELECTRA's TF1 pre-training checkpoints."""

    name = "tf1"

    def read(self, path: str, num_heads: int | None = None,
             generator_num_heads: int | None = None) -> table.Weights:
        """The original ELECTRA's pre-training checkpoint (`electra/`, `generator/`,
        `*_predictions/`) of any shape; optimizer slots and `global_step` are ignored."""
        prefix = _prefix(path)
        try:
            reader = tf.train.load_checkpoint(prefix)
        except tf.errors.OpError as e:  # a damaged .index: "not an sstable", "too short"
            raise _unreadable(prefix, e) from None
        shapes = reader.get_variable_to_shape_map()
        word = "electra/embeddings/word_embeddings"
        if word not in shapes:
            raise table.ConversionError(f"{prefix}: no tensor {word}; not an ELECTRA "
                                        "checkpoint")
        vocab_size, embedding = shapes[word]
        positions = shapes.get("electra/embeddings/position_embeddings", [512])[0]
        notes = []
        discriminator = _discriminator_from_dims(*_encoder_dims(shapes, "electra", prefix),
                                                 embedding, num_heads, notes, prefix)
        has_generator = "generator_predictions/output_bias" in shapes
        if "generator/encoder/layer_0/attention/self/query/kernel" in shapes:
            hidden, layers, intermediate = _encoder_dims(shapes, "generator", prefix)
            untied = shapes.get("generator/embeddings/word_embeddings")
            tie = "none" if untied else "embeddings"
            assumed = (discriminator.num_heads if hidden == discriminator.hidden_size
                       else sizes.heads_for(hidden))
            heads = _given_heads("generator_num_heads", generator_num_heads, "generator",
                                 hidden, prefix) or assumed
            if not generator_num_heads:
                notes.append(f"generator: {heads} attention heads assumed (" + (
                    "the discriminator's, at its width" if hidden == discriminator.hidden_size
                    else f"hidden {hidden} / 64, the original's rule") + "; no tensor holds the "
                    "number): give --generator_num_heads if not")
            generator = sizes.EncoderSize(hidden, layers, heads, intermediate,
                                          untied[1] if untied else embedding)
        elif generator_num_heads:
            raise table.ConversionError(
                f"--generator_num_heads={generator_num_heads}: {prefix} holds no generator "
                "encoder of its own (" + ("it is the discriminator's: tie=all" if has_generator
                                          else "no generator") + "); leave the flag out")
        elif has_generator:  # generator_predictions/ alone: the original's tied generator
            tie, generator = "all", discriminator
        else:
            tie, generator = "embeddings", table.fresh_generator(discriminator)
        spec = table.ModelSpec(
            vocab_size, table.model_shape(prefix, discriminator, generator, positions, tie),
            has_generator)

        def tensor(name, shape):
            if name not in shapes:
                raise table.ConversionError(f"{prefix}: no tensor {name}")
            table.check_shape(prefix, name, shapes[name], shape)
            try:
                return np.asarray(reader.get_tensor(name), "float32")
            except (tf.errors.OpError, IndexError) as e:  # a missing or cut data file
                # (cut: "Read less bytes than requested", an IndexError)
                raise _unreadable(prefix, e) from None

        tensors = {slot.name: tensor(slot.name, slot.shape)
                   for slot in table.expected_slots(spec)}
        vocab = os.path.join(os.path.dirname(prefix), "vocab.txt")
        return table.Weights(spec, tensors, prefix, vocab if tf.io.gfile.exists(vocab) else None,
                             tuple(sorted(set(shapes) - set(tensors))), notes=tuple(notes))

    def write(self, weights: table.Weights, output: str, vocab_file: str | None = None) -> str:
        """`output/model.ckpt` with the original's names (readable by its run_finetuning.py
        and by `read`), and vocab.txt. Returns the checkpoint prefix."""
        with files.new_directory(output) as tmp:
            # TF1's Saver writes this format: a tensor bundle keyed by variable name.
            compat.save_tensor_bundle(os.path.join(tmp, "model.ckpt"), weights.tensors)
            with tf.io.gfile.GFile(os.path.join(tmp, "checkpoint"), "w") as f:
                f.write('model_checkpoint_path: "model.ckpt"\n')  # for tf.train.latest_checkpoint
            files.copy_vocab(vocab_file, weights.spec, tmp)
        return os.path.join(output, "model.ckpt")
