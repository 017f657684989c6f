"""Dynamic masking: rates, exclusions, static shapes, eagerly and inside tf.data."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import masking

PAD, CLS, SEP, MASK, VOCAB = 0, 2, 3, 4, 1000


def make_batch(batch_size=64, seq_length=128, seed=0):
    """[CLS] A [SEP] B [SEP] rows of random length, padded with [PAD]."""
    rng = np.random.default_rng(seed)
    ids = np.zeros([batch_size, seq_length], np.int32)
    segments = np.zeros_like(ids)
    for row in range(batch_size):
        length = int(rng.integers(8, seq_length + 1))
        split = int(rng.integers(2, length - 2))
        ids[row, :length] = rng.integers(10, VOCAB, size=length)
        ids[row, [0, split, length - 1]] = [CLS, SEP, SEP]
        segments[row, split + 1:length] = 1
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant((ids != PAD).astype(np.int32)),
            "segment_ids": tf.constant(segments)}


def config(seq_length=128, **kwargs):
    return masking.MaskingConfig(
        vocab_size=VOCAB, mask_id=MASK, special_ids=(PAD, CLS, SEP),
        max_predictions=masking.max_predictions_per_seq(kwargs.get("mask_prob", 0.15),
                                                         seq_length), **kwargs)


def check_invariants(batch, out, max_predictions):
    ids = batch["input_ids"].numpy()
    masked = out["masked_input_ids"].numpy()
    positions = out["masked_lm_positions"].numpy()
    labels = out["masked_lm_ids"].numpy()
    weights = out["masked_lm_weights"].numpy()
    assert positions.shape == labels.shape == weights.shape == (ids.shape[0], max_predictions)
    for row in range(ids.shape[0]):
        n = int(weights[row].sum())
        assert weights[row].tolist() == [1.0] * n + [0.0] * (max_predictions - n)
        chosen = positions[row, :n]
        assert np.all(np.diff(chosen) > 0)  # distinct, in order
        assert not np.isin(ids[row, chosen], [PAD, CLS, SEP]).any()
        assert labels[row, :n].tolist() == ids[row, chosen].tolist()
        changed = np.nonzero(masked[row] != ids[row])[0]
        assert set(changed) <= set(chosen)  # nothing outside the chosen positions moves
        # The number chosen is ceil(15% of the maskable tokens), capped.
        maskable = int(np.sum(~np.isin(ids[row], [PAD, CLS, SEP])))
        assert n == min(int(np.ceil(maskable * 0.15)), max_predictions)
    return masked, positions, weights


def test_static_shapes_and_invariants_eagerly():
    batch = make_batch()
    cfg = config()
    assert cfg.max_predictions == 19  # int((0.15 + 0.005) * 128), as in the original
    out = masking.mask_batch(batch, cfg)
    for name in ("masked_input_ids", "masked_lm_positions", "masked_lm_ids"):
        assert out[name].dtype == tf.int32
    assert out["masked_lm_weights"].dtype == tf.float32
    check_invariants(batch, out, 19)


def test_inside_tf_data_shapes_are_static():
    batch = make_batch(batch_size=16)
    cfg = config()
    dataset = tf.data.Dataset.from_tensors(batch).repeat(3).map(
        lambda b: masking.mask_batch(b, cfg))
    for name, spec in dataset.element_spec.items():
        assert spec.shape.is_fully_defined(), name
    for out in dataset:
        check_invariants(batch, out, 19)


def test_electra_default_is_85_percent_mask_15_unchanged_no_random():
    batch = make_batch(batch_size=256)
    out = masking.mask_batch(batch, config())
    ids = batch["input_ids"].numpy()
    masked, positions, weights = (out[k].numpy() for k in
                                  ("masked_input_ids", "masked_lm_positions", "masked_lm_weights"))
    rows = np.repeat(np.arange(ids.shape[0])[:, None], positions.shape[1], 1)
    chosen = weights > 0
    new = masked[rows[chosen], positions[chosen]]
    old = ids[rows[chosen], positions[chosen]]
    mask_rate = np.mean(new == MASK)
    assert 0.82 < mask_rate < 0.88, mask_rate
    assert np.all((new == MASK) | (new == old))  # never a random token


def test_bert_80_10_10_is_selectable():
    batch = make_batch(batch_size=256)
    out = masking.mask_batch(batch, config(mask_token_rate=0.8, random_token_rate=0.1))
    ids = batch["input_ids"].numpy()
    masked = out["masked_input_ids"].numpy()
    positions, weights = out["masked_lm_positions"].numpy(), out["masked_lm_weights"].numpy()
    rows = np.repeat(np.arange(ids.shape[0])[:, None], positions.shape[1], 1)
    chosen = weights > 0
    new, old = masked[rows[chosen], positions[chosen]], ids[rows[chosen], positions[chosen]]
    assert 0.77 < np.mean(new == MASK) < 0.83
    other = np.mean((new != MASK) & (new != old))  # random token (rarely equal to the old)
    assert 0.07 < other < 0.13


def test_overall_rate_is_mask_prob_of_maskable_tokens():
    batch = make_batch(batch_size=256, seq_length=512)
    out = masking.mask_batch(batch, config(seq_length=512))
    ids = batch["input_ids"].numpy()
    maskable = np.sum(~np.isin(ids, [PAD, CLS, SEP]))
    rate = out["masked_lm_weights"].numpy().sum() / maskable
    assert 0.15 <= rate < 0.153  # ceil per row adds at most one per row


def test_selection_varies_between_calls():
    batch = make_batch(batch_size=8)
    cfg = config()
    a = masking.mask_batch(batch, cfg)["masked_lm_positions"].numpy()
    b = masking.mask_batch(batch, cfg)["masked_lm_positions"].numpy()
    assert not np.array_equal(a, b)  # dynamic masking: new positions every epoch


def test_positions_are_uniform_over_maskable_tokens():
    ids = np.full([4000, 12], 50, np.int32)
    ids[:, 0], ids[:, 11] = CLS, SEP
    batch = {"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
             "segment_ids": tf.zeros_like(ids)}
    positions = masking.mask_batch(batch, config(seq_length=12))["masked_lm_positions"].numpy()
    counts = np.bincount(positions[:, :2].ravel(), minlength=12)  # ceil(.15 * 10) = 2 each
    assert counts[0] == counts[11] == 0
    assert counts[1:11].min() > 0.85 * counts[1:11].mean()


@pytest.mark.parametrize("kwargs, field", [
    ({"mask_prob": 0.0}, "mask_prob"),
    ({"mask_prob": 1.5}, "mask_prob"),
    ({"mask_token_rate": 0.9, "random_token_rate": 0.2}, "random_token_rate"),
])
def test_bad_rates_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        masking.MaskingConfig(vocab_size=VOCAB, mask_id=MASK, special_ids=(PAD,),
                              max_predictions=5, **kwargs)
