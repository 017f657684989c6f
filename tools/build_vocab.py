r"""Learns a WordPiece vocabulary (BERT format) with tf.text's vocab learner.

  python tools/build_vocab.py --input='corpus/*.txt' --vocab_size=30522 \
      --output=vocab.txt [--nolower_case] [--sample_lines=1000000]
  python tools/build_vocab.py --tfds=NAME[:split] --tfds_data_dir=DIR ...

Lower-cased and accent-stripped by default (BERT-uncased). `[PAD] [UNK] [CLS] [SEP]
[MASK]` come first. A corpus larger than `--sample_lines` lines is sampled uniformly.
"""

from electra_tf import cli  # first: quiets TF's start-up logging

import time

from absl import flags

from electra_tf import flags as common_flags
from electra_tf.text import corpus
from electra_tf.text import vocab as vocab_lib

common_flags.define_corpus_flags()
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 30522, "Largest vocabulary size.")
_OUTPUT = flags.DEFINE_string("output", None, "Where to write vocab.txt.", required=True)
_LOWER_CASE = flags.DEFINE_boolean("lower_case", True, "Lower-case and strip accents.")
_SAMPLE_LINES = flags.DEFINE_integer(
    "sample_lines", 1_000_000, "Learn from a uniform sample of at most this many lines.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the line sample.")


def main(argv):
    del argv
    start = time.monotonic()
    source = common_flags.open_corpus_from_flags()
    progress, read = corpus.progress_of(
        source, log=lambda line: print(f"reading: {line}", flush=True))

    def lines():
        for line in source.lines:
            yield line
            progress.update(read())
    sample, seen = vocab_lib.sample_lines(lines(), _SAMPLE_LINES.value, _SEED.value)
    progress.update(read(), force=True)
    if seen > len(sample):
        print(f"learning from a uniform sample of {len(sample):,} of {seen:,} lines "
              f"(--sample_lines={_SAMPLE_LINES.value:,})")
    else:
        print(f"learning from all {seen:,} lines")
    for note in source.stats.problems():
        print(f"warning: {note}")
    tokens = vocab_lib.learn_vocab(
        sample, _VOCAB_SIZE.value, lower_case=_LOWER_CASE.value,
        log=lambda line: print(line, flush=True))
    vocab_lib.write_vocab(tokens, _OUTPUT.value)
    short = (f" (asked for {_VOCAB_SIZE.value:,}: too few words occur often enough in "
             "the corpus for more)") if len(tokens) < 0.95 * _VOCAB_SIZE.value else ""
    print(f"wrote {len(tokens):,} tokens{short} to {_OUTPUT.value} "
          f"in {time.monotonic() - start:.0f}s")


if __name__ == "__main__":
    cli.app_run(main)
