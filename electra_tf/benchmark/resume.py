"""--mode=resume: what resuming costs in the data. For each of `steps` (forged step
numbers; nothing is trained), the seconds from making the training input
(`pipeline.distributed_dataset` at that step, under `config.runtime`'s strategy) to its first
batch, the median of `repeats`; whether the stream started at step s+1 is the stream
started at s, one batch on; and, for scale, what re-reading every record before the last
step would take at this machine's TFRecord read rate (what resuming cost before
data/order.py)."""

import statistics
import time

import numpy as np
import tensorflow as tf

from electra_tf.benchmark import sample
from electra_tf.benchmark import settings


def run(config, workdir: str, corpus_path: str, vocab, *, seq_len: int, steps: list[int],
        repeats: int = 3, batch_size: int | None = None) -> dict:
    from electra_tf.training import distribute  # pylint: disable=g-import-not-at-top
    from electra_tf.data import pipeline  # pylint: disable=g-import-not-at-top

    settings.check_resume(steps=steps, repeats=repeats)
    with config.unlocked():
        if batch_size is not None:
            config.train.batch_size = batch_size
        config.data.max_seq_length = seq_len
    strategy = distribute.get_strategy(config.runtime)
    files = sample.sample_data(workdir, corpus_path, vocab, seq_len)
    masking_config = pipeline.masking_config(config, vocab)

    def first_batches(step, n=1):
        iterator = iter(pipeline.distributed_dataset(strategy, files, config, masking_config,
                                                     training=True, step=step))
        return [strategy.experimental_local_results(next(iterator)) for _ in range(n)]

    first_batches(1)  # tracing and the first reads, out of the timings
    timings = {s: [] for s in steps}
    for _ in range(repeats):
        for step in steps:
            start = time.perf_counter()
            first_batches(step)
            timings[step].append(time.perf_counter() - start)

    last = max(steps)
    ahead, started = first_batches(last, 2)[1], first_batches(last + 1)[0]
    exact = all(np.array_equal(a[k].numpy(), b[k].numpy())
                for a, b in zip(ahead, started) for k in a)

    # The records/s of reading the shards through, as resuming by skipping did.
    reader = tf.data.TFRecordDataset(files).repeat()
    count, start = 0, time.perf_counter()
    for _ in reader.batch(4096).take(50):
        count += 4096
    read_rate = count / (time.perf_counter() - start)
    records = last * config.train.batch_size
    return {
        "resume_seconds_at_step": {str(s): round(statistics.median(t), 3)
                                   for s, t in timings.items()},
        "continues_exactly": bool(exact),
        "records_before_last_step": records,
        "tfrecord_read_records_per_sec": round(read_rate),
        "replay_seconds_estimate": round(records / read_rate, 1),
        "batch_size": config.train.batch_size, "seq_len": seq_len,
        "shuffle_buffer": config.data.shuffle_buffer,
        "strategy": type(strategy).__name__,
    }
