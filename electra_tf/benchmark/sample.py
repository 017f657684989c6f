"""The input modes' data: the built-in sample corpus, repeated so that start-up costs do
not dominate, its vocab and its TFRecords, made once and cached in a workdir."""

import os
import time

import tensorflow as tf

from electra_tf import flags as common_flags
from electra_tf.data import pipeline
from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import sample_corpus
from electra_tf.text import tokenizer as tokenizer_lib
from electra_tf.text import vocab as vocab_lib


def prepare(workdir: str, corpus_copies: int, vocab_size: int) -> tuple:
    """(corpus path, Vocab): the sample corpus, `corpus_copies` times, and a vocab of
    `vocab_size` learned from it, in `workdir` (the `--workdir` flag's), made once."""
    common_flags.check_output_path("workdir", workdir, directory=True)
    tf.io.gfile.makedirs(workdir)
    corpus_path = os.path.join(workdir, "corpus.txt")
    if not tf.io.gfile.exists(corpus_path):
        lines = list(corpus.documents_to_lines(sample_corpus.stdlib_documents()))
        corpus.write_corpus(lines * corpus_copies, corpus_path)
    vocab_path = os.path.join(workdir, "vocab.txt")
    if not tf.io.gfile.exists(vocab_path):
        sample, _ = vocab_lib.sample_lines(corpus.read_lines([corpus_path],
                                                             corpus.CorpusStats()), 100_000)
        vocab_lib.write_vocab(vocab_lib.learn_vocab(sample, vocab_size), vocab_path)
    return corpus_path, tokenizer_lib.Vocab.load(vocab_path)


def data_dir(workdir: str, seq_len: int) -> str:
    return os.path.join(workdir, f"data_{seq_len}")


def sample_data(workdir: str, corpus_path: str, vocab, seq_len: int) -> list[str]:
    """TFRecords of `corpus_path` at `seq_len` (made once per workdir and length)."""
    directory = data_dir(workdir, seq_len)
    if not tf.io.gfile.exists(os.path.join(directory, writer.MANIFEST)):
        writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, directory,
                                      max_seq_length=seq_len, overwrite=True,
                                      log=lambda _: None)
    return pipeline.resolve_files(directory, seq_len, vocab)


def batches_per_sec(dataset, batches: int, warmup: int = 20) -> float:
    """Batches/s of iterating `dataset` (a tf.data or distributed dataset) alone."""
    iterator = iter(dataset)
    for _ in range(warmup):  # tracing, autotuning, shuffle and prefetch buffers
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches / (time.perf_counter() - start)
