"""What every writer of `electra_tf.convert` shares: a new output directory that appears
whole or not at all, the vocabulary checked against the table and copied, JSON files."""

import contextlib
import json
import os

import tensorflow as tf

from electra_tf import workdir as workdir_lib
from electra_tf.convert import table
from electra_tf.text import tokenizer as tokenizer_lib


def copy_vocab(vocab_file, spec, directory):
    """`vocab_file` (if any) into `directory`, if its size is the table's vocabulary."""
    if not vocab_file:
        return
    vocab = tokenizer_lib.Vocab.load(vocab_file)
    if vocab.size != spec.vocab_size:
        raise table.ConversionError(f"{vocab_file}: {vocab.size} tokens, but the "
                                    f"checkpoint's embeddings have {spec.vocab_size} rows")
    tf.io.gfile.copy(vocab_file, os.path.join(directory, "vocab.txt"), overwrite=True)


def write_json(obj, path):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(obj, indent=2) + "\n")


def _remove(path: str) -> None:
    if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
    elif tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


@contextlib.contextmanager
def new_directory(path: str):
    """Yields a temporary directory (`workdir.aside`: DIR/.NAME.tmp) that becomes `path`
    when the block succeeds (removed if the block fails; kept, and named, if the move
    into place fails): a crash never leaves a half-written checkpoint at `path`. `path`
    may be a URL (gs://)."""
    if os.path.basename(path.rstrip("/")) in ("", ".", ".."):  # no name to set aside
        raise table.ConversionError(f"--output={path!r}: give the path of a new directory")
    if (tf.io.gfile.isdir(path) and tf.io.gfile.listdir(path)
            or tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)):
        raise table.ConversionError(f"{path}: exists and is not empty; choose a new "
                                    "--output")
    tmp = workdir_lib.aside(path)
    _remove(tmp)  # left by an earlier failed run
    tf.io.gfile.makedirs(tmp)
    try:
        yield tmp
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)  # empty
    except BaseException:
        _remove(tmp)
        raise
    # Not removed if this fails: on a URL it moves file by file, and what is left of the
    # conversion is then only there.
    try:
        workdir_lib.rename_folder(tmp, path)
    except (tf.errors.OpError, OSError) as e:
        raise table.ConversionError(
            f"{path}: cannot move the conversion there ({' '.join(str(e).split())[:200]}); "
            f"what is not there yet is in {tmp} (the next conversion to {path} replaces "
            "it)") from None
