"""Flags that several tools share: where the corpus comes from, and the early checks of
an output path and of an input path (a tool finds a bad one before its work, not after).
Importing this imports no TensorFlow: a tool that checks its flags first answers a bad
one at once."""

import os

from absl import flags

from electra_tf import errors


def define_corpus_flags():
    flags.DEFINE_string("input", None, "Comma-separated globs of text files (.txt, "
                        ".txt.gz): one sentence per line, an empty line between documents.")
    flags.DEFINE_string("tfds", None, "A TFDS text dataset instead, as NAME[:split] "
                        "(default split: train). It must be prepared in --tfds_data_dir.")
    flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.")
    flags.DEFINE_string("tfds_text_key", "text", "The TFDS feature that holds the text.")


def open_corpus_from_flags():
    """The `corpus.Corpus` that --input or --tfds name."""
    from electra_tf.text import corpus  # pylint: disable=g-import-not-at-top
    f = flags.FLAGS
    return corpus.open_corpus(f.input, f.tfds, f.tfds_data_dir, f.tfds_text_key)


def check_output_path(flag: str, path: str, directory: bool = False,
                      overwrite: bool = True) -> None:
    """Raises `UserError` naming `--flag=path` if the tool could not write there: a
    directory where a file goes, a file where a directory goes, a file on the way to it,
    or a folder it may not write in; with `overwrite` False, a file already there (on a
    URL, the one check made there: through TF's file system, imported then), or an empty
    path. Missing folders are fine (the tools make them).

    >>> check_output_path("output", "/")
    Traceback (most recent call last):
    ...
    electra_tf.errors.UserError: --output=/: a directory; give the path of a file
    """
    if not path.strip():  # else the checks below look at the parent of the current folder
        raise errors.UserError(f"--{flag}={path!r}: empty; give a path")
    exists = errors.UserError(f"--{flag}={path} exists; pass --overwrite to replace it or "
                              f"choose another --{flag}")
    if "://" in path:  # gs:// and other remote file systems answer for themselves
        if not overwrite:
            import tensorflow as tf  # pylint: disable=g-import-not-at-top
            if tf.io.gfile.exists(path):
                raise exists
        return
    if os.path.isdir(path) and not directory:
        raise errors.UserError(f"--{flag}={path}: a directory; give the path of a file")
    if not overwrite and os.path.isfile(path):
        raise exists
    if os.path.exists(path) and not os.path.isdir(path) and directory:
        raise errors.UserError(f"--{flag}={path}: a file, not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):  # the nearest folder that exists (or a file)
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise errors.UserError(f"--{flag}={path}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise errors.UserError(f"--{flag}={path}: no permission to write in {parent}")


def check_input_path(flag: str, path: str, directory: bool | None = False,
                     prefix: bool = False) -> None:
    """Raises `UserError` naming `--flag=path` if the tool has nothing to read there: no
    such path, a directory where a file goes (`directory` False) or a file where a
    directory goes (True; None: either). `prefix`: a checkpoint prefix counts too (its
    PATH.index is there). A URL is checked through TF's file system, imported then: call
    this after the checks that need no TF, so that a local path is answered before TF
    loads.

    >>> check_input_path("input", "/no/such/corpus.txt")
    Traceback (most recent call last):
    ...
    electra_tf.errors.UserError: --input=/no/such/corpus.txt: not found
    """
    if "://" in path:  # gs:// and other remote file systems
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        exists, isdir = tf.io.gfile.exists, tf.io.gfile.isdir
    else:
        exists, isdir = os.path.exists, os.path.isdir
    if prefix and exists(path + ".index"):
        return
    if not exists(path):
        raise errors.UserError(f"--{flag}={path}: not found")
    if directory is False and isdir(path):
        raise errors.UserError(f"--{flag}={path}: a directory; give " + (
            "a checkpoint prefix (DIR/ckpt-N, beside its ckpt-N.index)" if prefix
            else "the path of a file"))
    if directory and not isdir(path):
        raise errors.UserError(f"--{flag}={path}: a file, not a directory")


def check_input_patterns(flag: str, patterns: str) -> None:
    """`check_input_path` of each path in the comma-separated `patterns` (the data flags:
    directories, manifests, shard files or globs); a glob is left to the reader, which
    says what it matched."""
    for part in (p.strip() for p in patterns.split(",")):
        if part and not any(c in part for c in "*?["):
            check_input_path(flag, part, directory=None)
