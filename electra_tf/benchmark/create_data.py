"""--mode=create_data: create_pretraining_data's MB/s of corpus against the tokenizer's
alone on the same lines (the ratio is what the rest of the writer costs), and the same job
on Apache Beam's DirectRunner with 1 and 2 worker processes (`data/beam.py`), each timed
from the call to the manifest (worker start-up included), on the same corpus."""

import os
import time

import tensorflow as tf

from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import tokenizer as tokenizer_lib


def run(workdir: str, corpus_path: str, vocab, *, seq_len: int,
        beam_workers: tuple[int, ...] = (1, 2)) -> dict:
    # Here, not at the top: tools/benchmark.py's other modes run where Apache Beam is
    # not installed (the GPU machines' pack, tools/device/rehearse.sh).
    from electra_tf.data import beam  # pylint: disable=g-import-not-at-top
    with tf.io.gfile.GFile(corpus_path, "r") as f:
        lines = [line.strip() for line in f]
    size_mb = tf.io.gfile.stat(corpus_path).length / 1e6

    tokenizer = tokenizer_lib.make_tokenizer(vocab)
    tokenize = tf.function(tokenizer.tokenize, autograph=False)
    tokenize(tf.constant(lines[:8]))  # trace outside the timing
    start = time.perf_counter()
    for i in range(0, len(lines), 2048):
        tokenize(tf.constant(lines[i:i + 2048]))
    tokenizer_mb_s = size_mb / (time.perf_counter() - start)

    out = os.path.join(workdir, "create_data_out")
    start, cpu_start = time.perf_counter(), time.process_time()
    result = writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, out,
                                           max_seq_length=seq_len, overwrite=True,
                                           log=lambda _: None)
    seconds = time.perf_counter() - start
    create_mb_s = size_mb / seconds
    # The writer's threads (tokenizer, Python's packing, serialization) overlap: what
    # several processes can add is bounded by the cores this leaves idle.
    cores_busy = (time.process_time() - cpu_start) / seconds
    figures = {
        "corpus_mb": round(size_mb, 1), "examples": result.num_examples,
        "tokenizer_alone_mb_per_sec": round(tokenizer_mb_s, 2),
        "create_pretraining_data_mb_per_sec": round(create_mb_s, 2),
        "ratio": round(create_mb_s / tokenizer_mb_s, 2), "seq_len": seq_len,
        "in_process_cores_busy": round(cores_busy, 2),
    }
    for workers in beam_workers:
        options = beam.pipeline_options(
            f"runner=DirectRunner,direct_num_workers={workers},"
            "direct_running_mode=multi_processing")
        start = time.perf_counter()
        on_beam = beam.write_pretraining_data(corpus.open_corpus(corpus_path), vocab,
                                              out + "_beam", options, max_seq_length=seq_len,
                                              overwrite=True, log=lambda _: None)
        mb_s = size_mb / (time.perf_counter() - start)
        if on_beam.num_examples != result.num_examples:
            raise RuntimeError(f"Beam wrote {on_beam.num_examples} examples, the in-process "
                               f"writer {result.num_examples}")
        figures[f"beam_{workers}_workers_mb_per_sec"] = round(mb_s, 2)
        figures[f"beam_{workers}_workers_vs_in_process"] = round(mb_s / create_mb_s, 2)
    return figures
