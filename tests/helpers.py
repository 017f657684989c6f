"""Small data that tests make for themselves: a vocab, a corpus, TFRecord shards."""

import os

from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import tokenizer

WORDS = ("the cat dog sat ran on under a mat log big small red blue and then it was "
         "very happy sad tree house").split()


def write_vocab(directory, words=WORDS) -> tokenizer.Vocab:
    """A vocab with the special tokens first, the given words, and a few suffixes."""
    path = os.path.join(directory, "vocab.txt")
    tokens = tokenizer.SPECIAL_TOKENS + [".", ","] + list(words) + ["##s", "##ed"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return tokenizer.Vocab.load(path)


def sentences(n, seed=0, min_words=3, max_words=12):
    """`n` random sentences over `WORDS`, reproducible for a seed."""
    import random  # pylint: disable=g-import-not-at-top
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words)))
            + " ." for _ in range(n)]


def write_corpus(directory, num_documents=40, sentences_per_document=8, seed=0,
                 name="corpus.txt") -> str:
    """A corpus file in the pre-training format; returns its path."""
    path = os.path.join(directory, name)
    docs = [sentences(sentences_per_document, seed=seed * 1000 + i)
            for i in range(num_documents)]
    corpus.write_corpus(corpus.documents_to_lines(docs), path)
    return path


def make_data(directory, vocab, max_seq_length=32, num_shards=2, seed=0, **corpus_kwargs):
    """Corpus → TFRecord shards + manifest in `directory/data`; returns that directory."""
    corpus_path = write_corpus(directory, seed=seed, **corpus_kwargs)
    out = os.path.join(directory, "data")
    writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, out,
                                  max_seq_length=max_seq_length, num_shards=num_shards,
                                  seed=seed, log=lambda _: None)
    return out


def write_pretrained_run(directory, max_seq_length=16):
    """A tiny pre-training workdir with random weights (config.json, vocab.txt, a
    model-only checkpoint), as export and fine-tuning read it. Returns (vocab, model)."""
    import json  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from configs import electra as electra_configs  # pylint: disable=g-import-not-at-top
    from electra_tf.model import pretrainer  # pylint: disable=g-import-not-at-top
    vocab = write_vocab(str(directory))
    config = electra_configs.get_config("tiny")
    config.data.max_seq_length = max_seq_length
    model = pretrainer.from_config(config.model, vocab.size).build_for(max_seq_length, 3)
    checkpoint = tf.train.Checkpoint(step=tf.Variable(7, dtype=tf.int64), model=model)
    checkpoint.save(os.path.join(directory, "checkpoints", "ckpt"))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config.to_dict(), f)
    return vocab, model
