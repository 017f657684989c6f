"""The packer (`text.packer`): pre-training's layout, eagerly and inside tf.data (as GLUE's
input pipeline runs it), and the WordPieces back from ids. Its round-robin truncation
against tf.text's own trimmer is tested with the export (tests/serving/test_export.py)."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.text import packer as packer_lib
from tests import helpers

SEQ = 8


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return helpers.write_vocab(str(tmp_path_factory.mktemp("vocab")))


def test_single_texts_and_pairs_are_packed_as_in_pre_training(vocab):
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    cls, sep, pad = vocab.cls_id, vocab.sep_id, vocab.pad_id
    the, cat, sat, dog = (vocab.id(w) for w in ("the", "cat", "sat", "dog"))
    ids, mask, segments = (t.numpy() for t in packer.pack(tf.constant(["The cat", ""])))
    assert ids.dtype == mask.dtype == segments.dtype == np.int32
    np.testing.assert_array_equal(ids, [[cls, the, cat, sep] + [pad] * 4,
                                        [cls, sep] + [pad] * 6])
    np.testing.assert_array_equal(mask, [[1] * 4 + [0] * 4, [1] * 2 + [0] * 6])
    assert not segments.any()
    ids, mask, segments = (t.numpy() for t in packer.pack(
        tf.constant(["the cat sat the cat sat"]), tf.constant(["dog"])))
    # A budget of SEQ - 3 = 5: the short side keeps its 1, the long side the other 4.
    np.testing.assert_array_equal(ids, [[cls, the, cat, sat, the, sep, dog, sep]])
    np.testing.assert_array_equal(segments, [[0] * 6 + [1] * 2])
    assert mask.all()


def test_packing_in_tf_data_gives_the_eager_result(vocab):
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    first = ["the cat sat", "a dog ran away from the big house", ""]
    second = ["dog", "", "the cat"]
    eager = [t.numpy() for t in packer.pack(tf.constant(first), tf.constant(second))]
    dataset = tf.data.Dataset.from_tensor_slices((first, second)).batch(3).map(packer.pack)
    for got, want in zip(next(iter(dataset)), eager):
        np.testing.assert_array_equal(got.numpy(), want)


def test_wordpiece_strings_are_the_vocab_tokens_and_empty_at_padding(vocab):
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    ids, mask, _ = packer.pack(tf.constant(["the cats"]))
    strings = packer.wordpiece_strings(ids, mask).numpy().astype(str)
    assert strings.tolist() == [["[CLS]", "the", "cat", "##s", "[SEP]", "", "", ""]]
