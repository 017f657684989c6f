r"""Learns a WordPiece vocabulary (BERT format) with tf.text's vocab learner.

  python tools/build_vocab.py --input='corpus/*.txt' --vocab_size=30522 \
      --output=vocab.txt [--nolower_case] [--sample_lines=1000000] \
      [--max_unique_chars=1000] [--overwrite]
  python tools/build_vocab.py --tfds=NAME[:split] --tfds_data_dir=DIR ...

Lower-cased and accent-stripped by default (BERT-uncased). `[PAD] [UNK] [CLS] [SEP]
[MASK]` come first. A corpus larger than `--sample_lines` lines is sampled uniformly.
The vocab keeps the `--max_unique_chars` most frequent characters (words with others
become [UNK]); the tool says how much of the text that leaves out, and what to pass
(Chinese or Japanese needs several thousand). An existing `--output` is replaced only
with `--overwrite`, and only once the new vocab is complete.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import time

from absl import flags

from electra_tf import errors
from electra_tf import flags as common_flags
from electra_tf.text import special_tokens

common_flags.define_corpus_flags()
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 30522, "Largest vocabulary size.")
flags.register_validator(
    "vocab_size", lambda n: n > len(special_tokens.SPECIAL_TOKENS),
    f"must exceed the {len(special_tokens.SPECIAL_TOKENS)} special tokens "
    f"({' '.join(special_tokens.SPECIAL_TOKENS)})")
_OUTPUT = flags.DEFINE_string("output", None, "Where to write vocab.txt.", required=True)
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Replace an existing --output.")
_LOWER_CASE = flags.DEFINE_boolean("lower_case", True, "Lower-case and strip accents.")
_SAMPLE_LINES = flags.DEFINE_integer(
    "sample_lines", 1_000_000, "Learn from a uniform sample of at most this many lines.",
    lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the line sample.")
_MAX_UNIQUE_CHARS = flags.DEFINE_integer(
    "max_unique_chars", 1000, "Keep this many of the most frequent characters, each as c "
    "and ##c; words with others become [UNK] (Chinese: ~8000).", lower_bound=1)


def main(argv):
    del argv
    start = time.monotonic()
    output = _OUTPUT.value
    # Before the corpus is read, and before TensorFlow loads.
    common_flags.check_output_path("output", output, overwrite=_OVERWRITE.value)
    # pylint: disable=g-import-not-at-top
    from electra_tf.text import corpus
    from electra_tf.text import vocab as vocab_lib
    # pylint: enable=g-import-not-at-top
    source = common_flags.open_corpus_from_flags()
    progress, read = corpus.progress_of(
        source, log=lambda line: print(f"reading: {line}", flush=True))

    def lines():
        for line in source.lines:
            yield line
            progress.update(read())
    sample, seen = vocab_lib.sample_lines(lines(), _SAMPLE_LINES.value, _SEED.value)
    progress.update(read(), force=True)
    if not sample:
        raise errors.UserError(f"{source.flag()}: no text to learn from "
                               f"({source.stats.why_empty()}); {output} was not written")
    if seen > len(sample):
        print(f"learning from a uniform sample of {len(sample):,} of {seen:,} lines "
              f"(--sample_lines={_SAMPLE_LINES.value:,})")
    else:
        print(f"learning from all {seen:,} lines")
    for note in source.stats.problems():
        print(f"warning: {note}")
    tokens = vocab_lib.learn_vocab(
        sample, _VOCAB_SIZE.value, lower_case=_LOWER_CASE.value,
        max_unique_chars=_MAX_UNIQUE_CHARS.value, log=lambda line: print(line, flush=True))
    vocab_lib.write_vocab(tokens, output)
    short = (f" (asked for {_VOCAB_SIZE.value:,}: too few words occur often enough in "
             "the corpus for more)") if len(tokens) < 0.95 * _VOCAB_SIZE.value else ""
    print(f"wrote {len(tokens):,} tokens{short} to {output} "
          f"in {time.monotonic() - start:.0f}s")


if __name__ == "__main__":
    cli.app_run(main)
