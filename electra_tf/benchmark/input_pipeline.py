"""--mode=input: masked examples/s through the real input pipeline, and masking alone on
one cached batch with our selector and with tf.text's own (data/masking.py)."""

import tensorflow as tf
import tensorflow_text as text

from electra_tf.benchmark import sample
from electra_tf.data import masking
from electra_tf.data import pipeline


def run(workdir: str, corpus_path: str, vocab, *, seq_len: int, batch_size: int = 128,
        steps: int = 300) -> dict:
    files = sample.sample_data(workdir, corpus_path, vocab, seq_len)
    config = pipeline.masking_config_for(vocab, seq_len)
    pipeline_rate = batch_size * sample.batches_per_sec(pipeline.pretraining_dataset(
        files, batch_size, seq_len, config), steps)

    # Masking alone on one cached batch, with our selector and with tf.text's own.
    batch = next(iter(pipeline.pretraining_dataset(files, batch_size, seq_len, config)))
    unmasked = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    rates = {}
    for name, selector in (("batch_random_selector", masking.BatchRandomSelector),
                           ("tf_text_random_item_selector", text.RandomItemSelector)):
        fn = tf.autograph.experimental.do_not_convert(
            lambda b, s=selector: masking.mask_batch(b, config, selector_class=s))
        dataset = tf.data.Dataset.from_tensors(unmasked).repeat().map(
            fn, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        rates[name] = batch_size * sample.batches_per_sec(dataset, steps)
    return {
        "examples_per_sec": round(pipeline_rate),
        "masking_only_examples_per_sec": {k: round(v) for k, v in rates.items()},
        "batch_size": batch_size, "seq_len": seq_len,
    }
