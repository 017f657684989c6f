"""Flags that several tools share: where the corpus comes from."""

from absl import flags

from electra_tf.text import corpus


def define_corpus_flags():
    flags.DEFINE_string("input", None, "Comma-separated globs of text files (.txt, "
                        ".txt.gz): one sentence per line, an empty line between documents.")
    flags.DEFINE_string("tfds", None, "A TFDS text dataset instead, as NAME[:split] "
                        "(default split: train). It must be prepared in --tfds_data_dir.")
    flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.")
    flags.DEFINE_string("tfds_text_key", "text", "The TFDS feature that holds the text.")


def open_corpus_from_flags() -> corpus.Corpus:
    f = flags.FLAGS
    return corpus.open_corpus(f.input, f.tfds, f.tfds_data_dir, f.tfds_text_key)
