"""Learning a WordPiece vocabulary with tf.text's BERT vocab learner.

The learner keeps a count of every distinct word in memory and iterates over them, so a
large corpus is *sampled*: a uniform reservoir sample of `sample_lines` lines (1M by
default, plenty for a 30k vocabulary) is what it learns from, and the tool says so.

>>> lines = ["the cat sat on the mat", "the dog sat on the log"] * 50
>>> vocab = learn_vocab(lines, vocab_size=60)
>>> vocab[:5], "the" in vocab, "sat" in vocab
(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'], True, True)
"""

import os
import random
from typing import Callable, Iterable

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

from electra_tf import progress
from electra_tf import workdir as workdir_lib
from electra_tf.text import tokenizer


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
                extra_reserved: tuple[str, ...] = (),
                log: Callable[[str], None] | None = None) -> list[str]:
    """Learns a WordPiece vocab of about `vocab_size` tokens (at most, past a floor).

    tf.text's learner always keeps every character and its `##` form, so a tiny
    `vocab_size` is exceeded; from a few hundred tokens up it is an upper bound.

    The words are split exactly as `FastBertTokenizer` splits them at training time
    (same lower-casing and accent stripping), and the special tokens come first, so
    `[PAD]` has id 0. `log` gets progress lines: the word count's (lines, with an ETA),
    then the start of the learning itself (tf.text's learner reports nothing inside).
    """
    if vocab_size <= len(tokenizer.SPECIAL_TOKENS):
        raise ValueError(f"`vocab_size` must exceed the {len(tokenizer.SPECIAL_TOKENS)} "
                         f"special tokens. Received: `vocab_size={vocab_size}`")
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
    return bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocab_size,
        reserved_tokens=tokenizer.SPECIAL_TOKENS + list(extra_reserved),
        bert_tokenizer_params={"lower_case": lower_case},
        learn_params={},
    )


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
