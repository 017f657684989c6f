r"""Writes the built-in sample corpus: the Python standard library's documentation.

No download: the text comes from this Python installation (the `pydoc_data` topics and
the docstrings of the standard library's modules, read with `ast`). The output is in
the pre-training format: one sentence per line, an empty line between documents.

  python tools/build_sample_corpus.py --output=/tmp/electra/corpus.txt \
      [--heldout_output=/tmp/electra/heldout.txt --heldout_every=20] [--overwrite]

With `--heldout_output`, every `--heldout_every`-th document goes there instead, for an
evaluation set the model never trains on.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

from absl import flags

from electra_tf import flags as common_flags

_OUTPUT = flags.DEFINE_string("output", None, "Text file to write.", required=True)
_HELDOUT_OUTPUT = flags.DEFINE_string(
    "heldout_output", None, "Optional text file for held-out documents (evaluation).")
_HELDOUT_EVERY = flags.DEFINE_integer(
    "heldout_every", 20, "With --heldout_output: every N-th document is held out.",
    lower_bound=2)
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Replace existing output files.")


def main(argv):
    del argv
    for flag in (_OUTPUT, _HELDOUT_OUTPUT):
        if flag.value:
            common_flags.check_output_path(flag.name, flag.value, overwrite=_OVERWRITE.value)
    from electra_tf.text import corpus  # pylint: disable=g-import-not-at-top
    from electra_tf.text import sample_corpus  # pylint: disable=g-import-not-at-top
    documents = list(sample_corpus.stdlib_documents())
    heldout = []
    if _HELDOUT_OUTPUT.value:
        every = _HELDOUT_EVERY.value
        heldout = documents[every - 1::every]
        documents = [d for i, d in enumerate(documents) if (i + 1) % every]
        count = corpus.write_corpus(corpus.documents_to_lines(heldout), _HELDOUT_OUTPUT.value)
        print(f"wrote {count:,} held-out documents to {_HELDOUT_OUTPUT.value}")
    count = corpus.write_corpus(corpus.documents_to_lines(documents), _OUTPUT.value)
    print(f"wrote {count:,} documents to {_OUTPUT.value}")


if __name__ == "__main__":
    cli.app_run(main)
