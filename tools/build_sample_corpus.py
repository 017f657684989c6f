r"""Writes the built-in sample corpus: the Python standard library's documentation.

No download: the text comes from this Python installation (the `pydoc_data` topics and
the docstrings of the standard library's modules, read with `ast`). The output is in
the pre-training format: one sentence per line, an empty line between documents.

  python tools/build_sample_corpus.py --output=/tmp/electra/corpus.txt
"""

from electra_tf import cli  # first: quiets TF's start-up logging

from absl import flags

from electra_tf.text import corpus

_OUTPUT = flags.DEFINE_string("output", None, "Text file to write.", required=True)


def main(argv):
    del argv
    stdlib = corpus.stdlib_documents()
    lines = corpus.documents_to_lines(stdlib)
    documents = corpus.write_corpus(lines, _OUTPUT.value)
    print(f"wrote {documents:,} documents to {_OUTPUT.value}")


if __name__ == "__main__":
    cli.app_run(main)
