r"""Makes a re-ranking set from held-out text: each sentence paired with a corrupted copy
of itself, for `tools/score_text.py --pairs` (the original first, so its `first_best` is
the re-ranking accuracy; chance 0.5).

  python tools/make_reranking_set.py --input=heldout.txt --output=pairs.txt \
      [--corruptions=swap,frequent] [--num_sentences=1000] [--frequent=100] [--seed=0] \
      [--max_words=100] [--overwrite]

--input holds one sentence a line (blank lines, and lines that are not UTF-8, skipped; a
.gz file is read decompressed); words are split on whitespace.
Corruptions, one pair per sentence and corruption:
  swap      two words at different places exchanged
  frequent  one word replaced by another of the input's --frequent most common words
Words count as different only if they differ after case folding and accent stripping
(as an uncased model reads them: "The"/"the" or "café"/"cafe" are never the change), so
the pair's two texts differ for cased and uncased models alike.
Sentences of fewer than --min_words words are left out, and so are lines of more than
--max_words (a document on a line: a change past what the scorer reads, its
max_seq_length, would leave the two texts alike), counted. The output is groups of two
lines (original, corrupted) separated by blank lines; the same flags give the same file.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import collections
import os
import random
import unicodedata

from absl import flags
from absl import logging

from electra_tf import errors
from electra_tf import flags as common_flags

CORRUPTIONS = ("swap", "frequent")

_INPUT = flags.DEFINE_string("input", None, "Held-out text, one sentence a line.",
                             required=True)
_OUTPUT = flags.DEFINE_string("output", None, "The pairs file to write.", required=True)
_CORRUPTIONS = flags.DEFINE_list("corruptions", list(CORRUPTIONS),
                                 f"Which corruptions, of {', '.join(CORRUPTIONS)}.")
_NUM_SENTENCES = flags.DEFINE_integer("num_sentences", 1000, "Sentences to use (the first "
                                      "long enough ones).", lower_bound=1)
_MIN_WORDS = flags.DEFINE_integer("min_words", 4, "Shorter sentences are left out.",
                                  lower_bound=2)
_MAX_WORDS = flags.DEFINE_integer("max_words", 100, "Longer lines are left out (the scorer "
                                  "reads max_seq_length tokens of a text).", lower_bound=2)
_FREQUENT = flags.DEFINE_integer("frequent", 100, "How many of the most common words "
                                 "`frequent` draws from.", lower_bound=2)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the corruptions.")
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Replace an existing --output.")


def fold(word: str) -> str:
    """`word` as an uncased model reads it (tf.text's normaliser: NFKC case folding, then
    NFD without its marks; format characters dropped).

    >>> fold("Café"), fold("STRASSE") == fold("straße"), fold("ｔｈｅ"), fold("cafe\u00ad")
    ('cafe', True, 'the', 'cafe')
    """
    folded = unicodedata.normalize("NFKC", word).casefold()
    return "".join(c for c in unicodedata.normalize("NFD", folded)
                   if unicodedata.category(c) not in ("Mn", "Cf"))


def swap(words: list[str], rng: random.Random) -> list[str] | None:
    """`words` with two words that differ (`fold`) exchanged, or None if all are alike.
    Linear in the words: one place drawn, then a place of another word (a long line, one
    document a line, would make every pair of places quadratic)."""
    i = rng.randrange(len(words))
    folded = fold(words[i])
    places = [j for j, w in enumerate(words) if fold(w) != folded]
    if not places:
        return None
    j = rng.choice(places)
    out = list(words)
    out[i], out[j] = out[j], out[i]
    return out


def replace_frequent(words: list[str], frequent: list[str],
                     rng: random.Random) -> list[str] | None:
    """`words` with one word replaced by a frequent word that differs from it (`fold`),
    or None if no frequent word does."""
    i = rng.randrange(len(words))
    folded = fold(words[i])
    others = [w for w in frequent if fold(w) != folded]
    if not others:
        return None
    out = list(words)
    out[i] = rng.choice(others)
    return out


def pairs(sentences: list[str], corruptions, num_sentences: int, min_words: int,
          num_frequent: int, seed: int, max_words: int | None = None
          ) -> list[tuple[str, str]]:
    """(original, corrupted) for the first `num_sentences` sentences of `min_words` to
    `max_words` words, one pair per corruption that applies."""
    counts = collections.Counter(w for s in sentences for w in s.split())
    frequent = [w for w, _ in counts.most_common(num_frequent)]
    rng = random.Random(seed)
    out, used = [], 0
    for sentence in sentences:
        words = sentence.split()
        if len(words) < min_words or max_words and len(words) > max_words:
            continue
        if used == num_sentences:
            break
        used += 1
        for kind in corruptions:
            corrupted = swap(words, rng) if kind == "swap" else replace_frequent(
                words, frequent, rng)
            if corrupted is not None:
                out.append((" ".join(words), " ".join(corrupted)))
    return out


def main(argv):
    del argv
    unknown = [c for c in _CORRUPTIONS.value if c not in CORRUPTIONS]
    if unknown or not _CORRUPTIONS.value:
        raise errors.UserError(f"--corruptions={','.join(_CORRUPTIONS.value)}: choose from "
                               f"{', '.join(CORRUPTIONS)}")
    common_flags.check_output_path("output", _OUTPUT.value, overwrite=_OVERWRITE.value)
    common_flags.check_input_path("input", _INPUT.value)
    # TensorFlow loads here, once the flags are checked.
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    from electra_tf.text import corpus  # pylint: disable=g-import-not-at-top
    # The corpus reader's lines: split at "\n" alone, a line that is not UTF-8 skipped
    # (counted), an unreadable file a one-line error.
    stats = corpus.CorpusStats()
    sentences = [line for line in corpus.read_lines([_INPUT.value], stats) if line]
    if stats.invalid_utf8_lines:
        logging.warning("%s: %d line(s) not UTF-8 left out (the first: %s)", _INPUT.value,
                        stats.invalid_utf8_lines, stats.first_invalid_utf8)
    if _MAX_WORDS.value < _MIN_WORDS.value:
        raise errors.UserError(f"--max_words={_MAX_WORDS.value}: below --min_words="
                               f"{_MIN_WORDS.value}")
    made = pairs(sentences, _CORRUPTIONS.value, _NUM_SENTENCES.value, _MIN_WORDS.value,
                 _FREQUENT.value, _SEED.value, _MAX_WORDS.value)
    long = sum(len(s.split()) > _MAX_WORDS.value for s in sentences)
    if long:
        logging.warning("%s: %d line(s) of more than --max_words=%d words left out",
                        _INPUT.value, long, _MAX_WORDS.value)
    if not made:
        raise errors.UserError(f"--input={_INPUT.value}: no sentence of {_MIN_WORDS.value} "
                               "words or more that the corruptions change")
    text = "\n".join(f"{original}\n{corrupted}\n" for original, corrupted in made)
    # Whole or not at all (a temporary name, then a rename): --output may be --input.
    workdir_lib.write_text(os.path.dirname(_OUTPUT.value) or ".",
                           os.path.basename(_OUTPUT.value), text)
    print(f"wrote {len(made)} pairs to {_OUTPUT.value}")


if __name__ == "__main__":
    cli.app_run(main)
