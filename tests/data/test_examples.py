"""Packing rules (exact small cases with scripted random draws) and the schema round trip."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import examples

CLS, SEP = 2, 3


class ScriptedRng:
    """Returns the scripted values of `random()` and `randint()`, and checks all were used."""

    def __init__(self, randoms=(), randints=()):
        self.randoms = list(randoms)
        self.randints = list(randints)

    def random(self):
        return self.randoms.pop(0)

    def randint(self, low, high):
        value = self.randints.pop(0)
        assert low <= value <= high
        return value

    def assert_done(self):
        assert not self.randoms and not self.randints


def tokens(start, n):
    return list(range(start, start + n))


def builder(rng, max_seq_length=16):
    return examples.ExampleBuilder(max_seq_length, CLS, SEP, rng=rng)


def test_single_segment_takes_every_sentence_and_truncates():
    rng = ScriptedRng(randoms=[0.05, 0.5])  # < 0.1: one segment; >= 0.05: full target
    b = builder(rng)
    assert b.add_sentence(tokens(10, 5)) is None
    assert b.add_sentence(tokens(20, 6)) is None
    ids, num_first = b.add_sentence(tokens(30, 7))  # 18 >= 16: done
    a = (tokens(10, 5) + tokens(20, 6) + tokens(30, 7))[:14]  # max_seq_length - 2
    assert ids == [CLS] + a + [SEP]
    assert num_first == 16
    rng.assert_done()


def test_second_sentence_joins_a_on_a_coin_flip_then_b_is_truncated():
    # first target (16 - 3) // 2 = 6. s1 starts A; s2 would overflow A (4 + 3 >= 6) but
    # B is empty and A is short: coin 0.3 < 0.5 puts it in A; s3 goes to B (A is full).
    rng = ScriptedRng(randoms=[0.5, 0.3, 0.9])
    b = builder(rng)
    s1, s2, s3 = tokens(10, 4), tokens(20, 3), tokens(30, 9)
    assert b.add_sentence(s1) is None and b.add_sentence(s2) is None
    ids, num_first = b.add_sentence(s3)
    assert ids == [CLS] + s1 + s2 + [SEP] + s3[:16 - 7 - 3] + [SEP]
    assert num_first == 9 and len(ids) == 16
    rng.assert_done()


def test_losing_coin_flip_sends_the_rest_to_b():
    rng = ScriptedRng(randoms=[0.5, 0.7, 0.9])  # coin 0.7 >= 0.5: s2 to B, then s3 too
    b = builder(rng)
    s1, s2, s3 = tokens(10, 4), tokens(20, 3), tokens(30, 9)
    b.add_sentence(s1), b.add_sentence(s2)
    ids, num_first = b.add_sentence(s3)
    assert ids == [CLS] + s1 + [SEP] + (s2 + s3)[:16 - 4 - 3] + [SEP]
    assert num_first == 6
    rng.assert_done()


def test_sentences_that_fit_go_to_a_without_a_draw():
    rng = ScriptedRng(randoms=[0.5, 0.9, 0.9])  # no coin for s2 (2 + 3 < 6); one for s3
    b = builder(rng)
    assert b.add_sentence(tokens(10, 2)) is None
    assert b.add_sentence(tokens(20, 3)) is None
    ids, num_first = b.add_sentence(tokens(30, 11))
    assert ids[:num_first] == [CLS] + tokens(10, 2) + tokens(20, 3) + [SEP]
    assert ids[num_first:] == tokens(30, 11)[:16 - 5 - 3] + [SEP]
    rng.assert_done()


def test_random_target_length_applies_to_the_next_example():
    rng = ScriptedRng(randoms=[0.5, 0.01, 0.5, 0.9], randints=[7])
    b = builder(rng)
    b.add_sentence(tokens(10, 16))  # first example; then target becomes 7
    assert b.add_sentence(tokens(40, 3)) is None
    ids, _ = b.add_sentence(tokens(50, 4))  # 7 >= 7
    assert len(ids) == 1 + 3 + 1 + 4 + 1
    rng.assert_done()


def test_a_documents_first_example_has_a_random_target_one_time_in_20():
    """The original draws the target after each example and keeps it into the next
    document; here each document draws its first (from its own seeded draws). A
    one-sentence document of 100 tokens closes at its sentence only under a random target
    <= 100: 5% x 96/124 = 3.9% of documents (seeded: no flakiness; 0 before)."""
    b = examples.ExampleBuilder(128, CLS, SEP, seed=0)
    early = 0
    for key in range(4000):
        b.start_document(key)
        early += b.add_sentence(tokens(10, 100)) is not None
        b.end_document()
    assert 0.03 < early / 4000 < 0.048, early


def test_document_end_closes_the_example_and_empty_documents_draw_nothing():
    rng = ScriptedRng(randoms=[0.5, 0.9])
    b = builder(rng)
    assert b.end_document() is None  # nothing pending: no example, no draw
    b.add_sentence(tokens(10, 3))
    ids, num_first = b.end_document()
    assert ids == [CLS] + tokens(10, 3) + [SEP] and num_first == 5
    assert b.end_document() is None
    rng.assert_done()


def test_same_seed_same_examples_and_examples_fit():
    def run(seed):
        b = examples.ExampleBuilder(64, CLS, SEP, seed=seed)
        rng = np.random.default_rng(0)
        out = []
        for i in range(2000):
            ex = b.add_sentence(tokens(10, int(rng.integers(1, 11))))
            if ex:
                out.append(ex)
            if i % 500 == 499 and (ex := b.end_document()):
                out.append(ex)
        return out

    first = run(1)
    assert first == run(1) and first != run(2)
    assert all(len(ids) <= 64 and ids[0] == CLS and ids[-1] == SEP for ids, _ in first)
    single = sum(len(ids) == n for ids, n in first) / len(first)
    assert 0.05 < single < 0.3  # 10% by rule, plus examples whose B came out empty


def test_min_length_is_checked():
    with pytest.raises(ValueError, match="max_seq_length=4"):
        examples.ExampleBuilder(4, CLS, SEP)


def test_serialize_parse_round_trip_and_matches_protobuf_examples():
    ids = [[CLS, 7, 8, SEP, 9, SEP], [CLS, 5, SEP]]
    firsts = [4, 3]
    serialized = examples.serialize(
        tf.constant(sum(ids, []), tf.int32), tf.constant([6, 3]), tf.constant(firsts),
        max_seq_length=8, pad_id=0)
    parsed = examples.parse(serialized, 8)
    assert parsed["input_ids"].dtype == tf.int32
    assert parsed["input_ids"].numpy().tolist() == [ids[0] + [0, 0], ids[1] + [0] * 5]
    assert parsed["input_mask"].numpy().tolist() == [[1] * 6 + [0] * 2, [1] * 3 + [0] * 5]
    assert parsed["segment_ids"].numpy().tolist() == [[0] * 4 + [1] * 2 + [0] * 2, [0] * 8]

    # What the original ELECTRA's writer builds for the first example.
    reference = tf.train.Example()
    for name, values in (("input_ids", ids[0] + [0, 0]), ("input_mask", [1] * 6 + [0, 0]),
                         ("segment_ids", [0] * 4 + [1, 1, 0, 0])):
        reference.features.feature[name].int64_list.value[:] = values
    assert tf.train.Example.FromString(serialized[0].numpy()) == reference


def test_parse_rejects_a_wrong_length_with_a_clear_error():
    serialized = examples.serialize(tf.constant([CLS, SEP]), tf.constant([2]),
                                    tf.constant([2]), max_seq_length=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Key: (input_ids|input_mask|segment_ids)"):
        examples.parse(serialized, 8)
