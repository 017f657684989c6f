"""Dynamic masking: rates, exclusions, static shapes, whole words, eagerly and inside tf.data."""

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


def checked_rows(batch, out, max_predictions):
    """Checks what every masking keeps (static shapes, labels, nothing changed outside
    the chosen positions, never a special token); yields (row, its ids, chosen positions)."""
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
        yield row, ids[row], chosen


def check_invariants(batch, out, max_predictions):
    for _, ids, chosen in checked_rows(batch, out, max_predictions):
        # The number chosen is ceil(15% of the maskable tokens), capped.
        maskable = int(np.sum(~np.isin(ids, [PAD, CLS, SEP])))
        assert len(chosen) == min(int(np.ceil(maskable * 0.15)), max_predictions)


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


def chosen_values(batch, out):
    """(new, old): the ids at every chosen position after and before masking."""
    ids = batch["input_ids"].numpy()
    positions, weights = out["masked_lm_positions"].numpy(), out["masked_lm_weights"].numpy()
    rows = np.repeat(np.arange(ids.shape[0])[:, None], positions.shape[1], 1)
    chosen = weights > 0
    return (out["masked_input_ids"].numpy()[rows[chosen], positions[chosen]],
            ids[rows[chosen], positions[chosen]])


@pytest.mark.parametrize("whole_words", [False, True])
def test_electra_default_is_85_percent_mask_15_unchanged_no_random(whole_words):
    if whole_words:  # the same split, per token of the chosen words
        batch = make_words_batch(batch_size=256)
        out = masking.mask_batch(batch, words_config())
    else:
        batch = make_batch(batch_size=256)
        out = masking.mask_batch(batch, config())
    new, old = chosen_values(batch, out)
    mask_rate = np.mean(new == MASK)
    assert 0.82 < mask_rate < 0.88, mask_rate
    assert np.all((new == MASK) | (new == old))  # never a random token


def test_bert_80_10_10_is_selectable():
    batch = make_batch(batch_size=256)
    new, old = chosen_values(batch, masking.mask_batch(
        batch, config(mask_token_rate=0.8, random_token_rate=0.1)))
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
    # Seeded: one draw, the same every run (unseeded, ~1% of draws fell under the bound:
    # each count is ~400 ± 19, the bound 3 standard deviations down).
    positions = masking.mask_batch(batch, config(seq_length=12), seed=tf.constant(
        [0, 1], tf.int64))["masked_lm_positions"].numpy()
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


# ---------------------------------------------------------------- whole-word masking
PIECES = tuple(range(500, VOCAB))  # the `##` pieces of the test vocab; 10..499 begin words


def make_words_batch(batch_size=64, seq_length=128, seed=0):
    """[CLS] A [SEP] B [SEP] rows of words of 1-4 tokens (a start and `##` pieces), of
    random length, padded; B starts with a piece in some rows (a data cut mid-word)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros([batch_size, seq_length], np.int32)
    for row in range(batch_size):
        length = int(rng.integers(8, seq_length + 1))
        tokens = []
        while len(tokens) < length:
            tokens += [int(rng.integers(10, 500))] + list(
                rng.integers(500, VOCAB, size=int(rng.integers(0, 4))))
        ids[row, :length] = tokens[:length]
        split = int(rng.integers(2, length - 2))
        ids[row, [0, split, length - 1]] = [CLS, SEP, SEP]
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant((ids != PAD).astype(np.int32)),
            "segment_ids": tf.zeros_like(ids)}


def words_config(seq_length=128, **kwargs):
    return config(seq_length, whole_word_masking=True, continuation_ids=PIECES, **kwargs)


def words_of(row_ids):
    """The (start, end) of each word of a row's real tokens, as docs/data.md defines them."""
    words = []
    for i, token in enumerate(row_ids):
        if token == PAD:
            break
        starts = token not in PIECES or i == 0 or row_ids[i - 1] in (CLS, SEP)
        if starts or token in (CLS, SEP):
            words.append([i, i + 1])
        else:
            words[-1][1] = i + 1
    return words


def check_whole_words(batch, out, max_predictions):
    """Whole words only, never past the budget, and the budget used as far as words fit."""
    for row, ids, chosen in checked_rows(batch, out, max_predictions):
        n, chosen = len(chosen), set(chosen.tolist())
        words = [(s, e) for s, e in words_of(ids.tolist()) if ids[s] not in (CLS, SEP)]
        taken = [(s, e) for s, e in words if s in chosen]
        for s, e in words:  # a word is chosen whole or not at all
            assert chosen.isdisjoint(range(s, e)) or chosen >= set(range(s, e)), (row, s, e)
        assert sum(e - s for s, e in taken) == n
        maskable = int(np.sum(~np.isin(ids, [PAD, CLS, SEP])))
        budget = min(int(np.ceil(maskable * 0.15)), max_predictions)
        assert n <= budget
        # Every word left out was longer than what the words taken left of the budget.
        assert all(e - s > budget - n for s, e in words if (s, e) not in taken), row


def test_group_words_splits_at_pieces_specials_and_cut_words():
    ids = tf.constant([[CLS, 10, 600, 601, 11, SEP, 700, 12, 800, SEP, PAD]])
    words = masking._group_words(  # pylint: disable=protected-access
        tf.RaggedTensor.from_tensor(ids, lengths=[10]), ids, words_config())
    assert words.to_list() == [[[CLS], [10, 600, 601], [11], [SEP], [700], [12, 800], [SEP]]]


def test_whole_words_eagerly_with_static_shapes():
    batch = make_words_batch()
    out = masking.mask_batch(batch, words_config())
    for name, tensor in out.items():
        assert tensor.shape.is_fully_defined(), name
    check_whole_words(batch, out, 19)
    # Words of several pieces are among the chosen (the grouping is not per token).
    chosen = out["masked_lm_ids"].numpy()[out["masked_lm_weights"].numpy() > 0]
    assert np.isin(chosen, PIECES).mean() > 0.3


def test_whole_words_inside_tf_data_are_deterministic_for_the_seed_and_step():
    batch = make_words_batch(batch_size=16)
    cfg = words_config()

    def masked(seed):
        dataset = tf.data.Dataset.from_tensors(batch).repeat(3).enumerate().map(
            lambda step, b: masking.mask_batch(
                b, cfg, seed=tf.random.experimental.stateless_fold_in(
                    tf.constant([seed, 1], tf.int64), step)))
        for spec in dataset.element_spec.values():
            assert spec.shape.is_fully_defined()
        return [out["masked_input_ids"].numpy() for out in dataset]

    for out in tf.data.Dataset.from_tensors(batch).map(lambda b: masking.mask_batch(b, cfg)):
        check_whole_words(batch, out, 19)
    first, again, other = masked(0), masked(0), masked(1)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # each step its own masks
    assert not np.array_equal(first[0], other[0])
    # Eagerly, the same seed masks as inside tf.data.
    eager = masking.mask_batch(batch, cfg, seed=tf.random.experimental.stateless_fold_in(
        tf.constant([0, 1], tf.int64), tf.constant(0, tf.int64)))
    np.testing.assert_array_equal(eager["masked_input_ids"].numpy(), first[0])


def test_whole_words_fill_the_budget_where_words_fit():
    batch = make_words_batch(batch_size=256)
    weights = masking.mask_batch(batch, words_config())["masked_lm_weights"].numpy()
    # Short words fill most of what long ones leave.
    maskable = np.sum(~np.isin(batch["input_ids"].numpy(), [PAD, CLS, SEP]), axis=1)
    budget = np.minimum(np.ceil(maskable * 0.15), weights.shape[1]).sum()
    assert 0.95 * budget < weights.sum() <= budget


def test_whole_words_without_pieces_mask_tokens_at_the_same_rate():
    batch = make_batch(batch_size=256, seq_length=512)  # no id is a `##` piece
    cfg = config(seq_length=512, whole_word_masking=True)
    out = masking.mask_batch(batch, cfg)
    check_invariants(batch, out, cfg.max_predictions)  # ceil(15%) of the tokens exactly
