"""Learning a WordPiece vocabulary with tf.text's BERT vocab learner.

The learner keeps a count of every distinct word in memory and iterates over them, so a
large corpus is *sampled*: a uniform reservoir sample of `sample_lines` lines (1M by
default, plenty for a 30k vocabulary) is what it learns from, and the tool says so.

The learner keeps the `max_unique_chars` most frequent characters (1000 by default, as
tf.text's) and drops every word with another: a Chinese or Japanese corpus needs several
thousand (`--max_unique_chars=8000`). `learn_vocab` logs how much of the text the vocab
has no character for.

>>> lines = ["the cat sat on the mat", "the dog sat on the log"] * 50
>>> vocab = learn_vocab(lines, vocab_size=60)
>>> vocab[:5], "the" in vocab, "sat" in vocab
(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'], True, True)
"""

import collections
import os
import random
import unicodedata
from typing import Callable, Iterable

import tensorflow as tf
import tensorflow_text as text
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

from electra_tf import progress
from electra_tf import workdir as workdir_lib
from electra_tf.text import tokenizer

# Characters the learner keeps by default (tf.text's own default).
MAX_UNIQUE_CHARS = 1000
# A share of the text's characters without a token above which the log suggests more.
NEGLIGIBLE_SHARE = 1e-3
# Unicode categories the tokenizer splits at or removes: spaces, controls, formats.
_DROPPED = ("Zs", "Zl", "Zp", "Cc", "Cf")


def sample_lines(lines: Iterable[str], k: int, seed: int = 0) -> tuple[list[str], int]:
    """A uniform sample of at most `k` non-empty lines (reservoir); returns (sample, seen)."""
    rng = random.Random(seed)
    sample: list[str] = []
    seen = 0
    for line in lines:
        if not line:
            continue
        seen += 1
        if len(sample) < k:
            sample.append(line)
        else:
            j = rng.randrange(seen)
            if j < k:
                sample[j] = line
    return sample, seen


def learn_vocab(lines: list[str], vocab_size: int, lower_case: bool = True,
                max_unique_chars: int = MAX_UNIQUE_CHARS,
                extra_reserved: tuple[str, ...] = (),
                log: Callable[[str], None] | None = None) -> list[str]:
    """Learns a WordPiece vocab of about `vocab_size` tokens (at most, past a floor).

    tf.text's learner keeps the `max_unique_chars` most frequent characters, each as
    `c` and `##c`, whatever `vocab_size` says (so a tiny `vocab_size` is exceeded; from
    a few hundred tokens up it is an upper bound), and learns nothing from the words
    with other characters: they become `[UNK]`.

    The words are split as `FastBertTokenizer` splits them at training time (same
    lower-casing and accent stripping; every Unicode space separates words, made a
    space first as the learner's own splitter misses some), and the special tokens come
    first, so `[PAD]` has id 0. `log` gets progress lines: the word count's (lines, with
    an ETA), the start of the learning itself (tf.text's learner reports nothing
    inside), and last `missing_characters_line`.
    """
    if vocab_size <= len(tokenizer.SPECIAL_TOKENS):
        raise ValueError(f"`vocab_size` must exceed the {len(tokenizer.SPECIAL_TOKENS)} "
                         f"special tokens. Received: `vocab_size={vocab_size}`")
    if max_unique_chars < 1:
        raise ValueError("`max_unique_chars` must be at least 1. "
                         f"Received: `max_unique_chars={max_unique_chars}`")
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError("no text to learn a vocab from: every input line is empty")
    show = log or (lambda _: None)
    bar = progress.Progress(len(lines), "lines", log=lambda l: show(f"counting words: {l}"))
    batch = 1024

    def batches():  # the learner counts the words of every batch first, then learns
        for start in range(0, len(lines), batch):
            yield lines[start:start + batch]
            bar.update(min(start + batch, len(lines)))
        bar.update(len(lines), force=True)
        show(f"learning a {vocab_size:,}-token WordPiece vocab from the word counts")
    dataset = tf.data.Dataset.from_generator(
        batches, output_signature=tf.TensorSpec([None], tf.string))
    # What FastBertTokenizer splits words at and the learner's splitter does not: every
    # space (\p{Z}: NBSP, U+3000, line and paragraph separators) and control character
    # (\p{Cc}); format characters (\p{Cf}: ZWNJ, soft hyphen) too where the text keeps
    # its case (lower-casing's NFKC case folding removes them, on both sides).
    separators = r"[\p{Z}\p{Cc}]" if lower_case else r"[\p{Z}\p{Cc}\p{Cf}]"
    dataset = dataset.map(lambda b: tf.strings.regex_replace(b, separators, " "))
    tokens = bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocab_size,
        reserved_tokens=tokenizer.SPECIAL_TOKENS + list(extra_reserved),
        bert_tokenizer_params={"lower_case": lower_case},
        learn_params={"max_unique_chars": max_unique_chars},
    )
    if log:
        log(missing_characters_line(lines, tokens, lower_case, max_unique_chars))
    return tokens


def character_counts(lines: list[str], lower_case: bool) -> collections.Counter:
    """How often each character occurs in `lines` as the tokenizer normalizes them
    (tf.text's `FastBertNormalizer`), without the spaces and control characters it
    drops."""
    normalizer = text.FastBertNormalizer(lower_case_nfd_strip_accents=lower_case)
    counts = collections.Counter()
    batch = 8192
    for start in range(0, len(lines), batch):
        normalized = normalizer.normalize(tf.constant(lines[start:start + batch]))
        code_points = tf.strings.unicode_decode(normalized, "UTF-8").flat_values
        values, _, n = tf.unique_with_counts(code_points)
        counts.update(dict(zip(values.numpy().tolist(), n.numpy().tolist())))
    return collections.Counter({chr(c): n for c, n in counts.items()
                                if unicodedata.category(chr(c)) not in _DROPPED})


def missing_characters_line(lines: list[str], tokens: list[str], lower_case: bool,
                            max_unique_chars: int) -> str:
    """One line: how many distinct characters of `lines` have no token (`c` or `##c`)
    in `tokens`, and their share of the characters, with the `--max_unique_chars` that
    would keep all but a negligible share where more would help."""
    counts = character_counts(lines, lower_case)
    vocab = set(tokens)
    missing = {c: n for c, n in counts.items() if c not in vocab and "##" + c not in vocab}
    total = sum(counts.values())
    share = sum(missing.values()) / max(total, 1)
    line = (f"{len(missing):,} of the sample's {len(counts):,} distinct characters have no "
            f"token ({share:.2%} of its characters; words with them become [UNK])")
    if share < NEGLIGIBLE_SHARE or len(counts) <= max_unique_chars:
        return line
    # The fewest most frequent characters that leave out under NEGLIGIBLE_SHARE.
    needed, covered = 0, 0
    for _, n in counts.most_common():
        if total - covered < NEGLIGIBLE_SHARE * total:
            break
        needed, covered = needed + 1, covered + n
    if needed <= max_unique_chars:  # missing for another reason (words over 50 characters)
        return line
    return (f"{line}; --max_unique_chars={needed} (now {max_unique_chars}) would keep all "
            f"but {NEGLIGIBLE_SHARE:.1%}, at two tokens (c, ##c) each")


def write_vocab(tokens: list[str], path: str) -> None:
    """Writes one token per line, atomically (a crash leaves no partial vocab.txt)."""
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    tmp = workdir_lib.aside(path)
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write("".join(t + "\n" for t in tokens))
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp):  # the old vocab stays, and no half-written one beside it
            tf.io.gfile.remove(tmp)
        raise
