r"""Measures the speed of the data path; prints one JSON line last.

  python tools/benchmark.py --mode=input        # masked batches/s from real TFRecords
  python tools/benchmark.py --mode=create_data  # create_pretraining_data vs tokenizer alone

The corpus is the built-in sample corpus, repeated `--corpus_copies` times so that
start-up costs do not dominate; corpus, vocab and TFRecords are cached in --workdir.
"""

from electra_tf import cli  # first: quiets TF's start-up logging

import json
import os
import platform
import resource
import time

from absl import flags
import tensorflow as tf
import tensorflow_text as text

from electra_tf.data import masking
from electra_tf.data import pipeline
from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import tokenizer as tokenizer_lib
from electra_tf.text import vocab as vocab_lib

_MODE = flags.DEFINE_enum("mode", "input", ["input", "create_data"], "What to measure.")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/electra_tf_benchmark", "Cache directory.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "max_seq_length.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 128, "Batch size (input mode).")
_STEPS = flags.DEFINE_integer("steps", 300, "Timed batches (input mode).")
_CORPUS_COPIES = flags.DEFINE_integer("corpus_copies", 8, "Sample corpus repetitions.")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 8192, "Vocab size to learn.")


def _prepare():
    """Corpus (the sample, repeated), vocab and TFRecords in the workdir, made once."""
    workdir = _WORKDIR.value
    os.makedirs(workdir, exist_ok=True)
    corpus_path = os.path.join(workdir, "corpus.txt")
    if not os.path.exists(corpus_path):
        lines = list(corpus.documents_to_lines(corpus.stdlib_documents()))
        corpus.write_corpus(lines * _CORPUS_COPIES.value, corpus_path)
    vocab_path = os.path.join(workdir, "vocab.txt")
    if not os.path.exists(vocab_path):
        sample, _ = vocab_lib.sample_lines(corpus.read_lines([corpus_path],
                                                             corpus.CorpusStats()), 100_000)
        vocab_lib.write_vocab(vocab_lib.learn_vocab(sample, _VOCAB_SIZE.value), vocab_path)
    return corpus_path, tokenizer_lib.Vocab.load(vocab_path)


def _rate(dataset, batch_size, steps):
    iterator = iter(dataset)
    for _ in range(20):  # warm-up: tracing, autotuning, prefetch buffers
        next(iterator)
    start = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return steps * batch_size / (time.perf_counter() - start)


def bench_input(corpus_path, vocab):
    data_dir = os.path.join(_WORKDIR.value, f"data_{_SEQ_LEN.value}")
    if not os.path.exists(os.path.join(data_dir, writer.MANIFEST)):
        writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, data_dir,
                                      max_seq_length=_SEQ_LEN.value, overwrite=True,
                                      log=lambda _: None)
    files = pipeline.resolve_files(data_dir, _SEQ_LEN.value, vocab)
    config = pipeline.masking_config_for(vocab, _SEQ_LEN.value)
    batch_size, steps = _BATCH_SIZE.value, _STEPS.value
    pipeline_rate = _rate(pipeline.pretraining_dataset(
        files, batch_size, _SEQ_LEN.value, config), batch_size, steps)

    # Masking alone on one cached batch, with our selector and with tf.text's own.
    batch = next(iter(pipeline.pretraining_dataset(files, batch_size, _SEQ_LEN.value, config)))
    unmasked = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    rates = {}
    for name, selector in (("batch_random_selector", masking.BatchRandomSelector),
                           ("tf_text_random_item_selector", text.RandomItemSelector)):
        fn = tf.autograph.experimental.do_not_convert(
            lambda b, s=selector: masking.mask_batch(b, config, selector_class=s))
        dataset = tf.data.Dataset.from_tensors(unmasked).repeat().map(
            fn, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        rates[name] = _rate(dataset, batch_size, steps)
    return {
        "examples_per_sec": round(pipeline_rate),
        "masking_only_examples_per_sec": {k: round(v) for k, v in rates.items()},
        "batch_size": batch_size, "seq_len": _SEQ_LEN.value,
    }


def bench_create_data(corpus_path, vocab):
    with open(corpus_path, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    size_mb = os.path.getsize(corpus_path) / 1e6

    tokenizer = tokenizer_lib.make_tokenizer(vocab)
    tokenize = tf.function(tokenizer.tokenize)
    tokenize(tf.constant(lines[:8]))  # trace outside the timing
    start = time.perf_counter()
    for i in range(0, len(lines), 2048):
        tokenize(tf.constant(lines[i:i + 2048]))
    tokenizer_mb_s = size_mb / (time.perf_counter() - start)

    out = os.path.join(_WORKDIR.value, "create_data_out")
    start = time.perf_counter()
    result = writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, out,
                                           max_seq_length=_SEQ_LEN.value, overwrite=True,
                                           log=lambda _: None)
    create_mb_s = size_mb / (time.perf_counter() - start)
    return {
        "corpus_mb": round(size_mb, 1), "examples": result.num_examples,
        "tokenizer_alone_mb_per_sec": round(tokenizer_mb_s, 2),
        "create_pretraining_data_mb_per_sec": round(create_mb_s, 2),
        "ratio": round(create_mb_s / tokenizer_mb_s, 2), "seq_len": _SEQ_LEN.value,
    }


def main(argv):
    del argv
    corpus_path, vocab = _prepare()
    results = (bench_input if _MODE.value == "input" else bench_create_data)(corpus_path, vocab)
    results.update({
        "mode": _MODE.value,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "device": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores",
        "versions": {"tensorflow": tf.__version__, "tensorflow_text": text.__version__,
                     "python": platform.python_version()},
    })
    print(json.dumps(results))


if __name__ == "__main__":
    cli.app_run(main)
