"""What every writer of `electra_tf.convert` shares: a new output directory that appears
whole or not at all, the vocabulary checked against the table and copied, JSON files."""

import contextlib
import json
import os
import shutil

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
    shutil.copyfile(vocab_file, os.path.join(directory, "vocab.txt"))


def write_json(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2) + "\n")


@contextlib.contextmanager
def new_directory(path: str):
    """Yields a temporary directory that becomes `path` when the block succeeds (removed
    if it fails): a crash never leaves a half-written checkpoint at `path`."""
    if os.path.isdir(path) and os.listdir(path) or os.path.isfile(path):
        raise table.ConversionError(f"{path}: exists and is not empty; choose a new "
                                    "--output")
    tmp = path.rstrip("/") + ".tmp"
    if os.path.isfile(tmp) or os.path.islink(tmp):  # left by an earlier failed run
        os.remove(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.isdir(path):
        os.rmdir(path)  # empty
    os.rename(tmp, path)
