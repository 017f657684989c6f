"""Synthetic pre-training batches: the pipeline's exact structure and static shapes, with
random ids in a given vocabulary (so that the vocabulary projection costs what it costs in
real training).

>>> batch = synthetic_examples(2, 16, num_predictions=3, vocab_size=40)
>>> batch["input_ids"].shape, batch["masked_lm_positions"].shape
((2, 16), (2, 3))
"""

import numpy as np
import tensorflow as tf


def synthetic_examples(num_examples: int, seq_len: int, num_predictions: int,
                       vocab_size: int, mask_id: int = 4, seed: int = 0) -> dict:
    """`num_examples` examples of the pipeline's structure: full-length two-segment
    sequences of random ids, `num_predictions` distinct masked positions (most of them
    real, the tail padding as in the pipeline), [MASK] at 85% of them."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, (num_examples, seq_len), dtype=np.int32)
    ids[:, 0] = 2  # [CLS]
    ids[:, -1] = 3  # [SEP]
    segments = np.zeros_like(ids)
    segments[:, seq_len // 2:] = 1
    num_real = max(1, min(num_predictions, round(0.15 * seq_len)))
    positions = np.zeros((num_examples, num_predictions), np.int32)
    weights = np.zeros((num_examples, num_predictions), np.float32)
    masked = ids.copy()
    for row in range(num_examples):
        chosen = np.sort(rng.choice(np.arange(1, seq_len - 1), num_real, replace=False))
        positions[row, :num_real] = chosen
        weights[row, :num_real] = 1.0
        replace = chosen[rng.random(num_real) < 0.85]
        masked[row, replace] = mask_id
    lm_ids = np.take_along_axis(ids, positions, axis=1) * (weights > 0)
    return {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": segments,
            "masked_input_ids": masked, "masked_lm_positions": positions,
            "masked_lm_ids": lm_ids.astype(np.int32), "masked_lm_weights": weights}


def synthetic_dataset(strategy, config, num_predictions: int, vocab_size: int):
    """A distributed dataset of 4 global batches of synthetic examples, repeated."""
    global_batch, seq_len = config.train.batch_size, config.data.max_seq_length
    examples = synthetic_examples(4 * global_batch, seq_len, num_predictions, vocab_size)

    def make(context):
        local = context.get_per_replica_batch_size(global_batch)
        dataset = tf.data.Dataset.from_tensor_slices(examples).repeat()
        return dataset.batch(local, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return strategy.distribute_datasets_from_function(make)
