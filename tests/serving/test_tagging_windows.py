"""Tagging's windows (every word predicted exactly once, in a window that gives it
context) and the export's in-graph chunks and tags (equal to `conll`'s on the host)."""

import random

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import errors
from electra_tf.finetuning.tagging import conll
from electra_tf.serving import export_tagging
from electra_tf.serving import tagging_windows
from tests import helpers

PIECES = ["the", "cats", "sat", "logged", "x", "\x00", ",", "big", "a.b"]  # 1-3 pieces;
#                                     "x" is [UNK], "\x00" has no piece (read as [UNK])


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return helpers.write_vocab(str(tmp_path_factory.mktemp("vocab")))


@pytest.mark.parametrize("seq,stride", [(8, 1), (8, 3), (8, 6), (12, 5), (32, 15)])
def test_every_word_is_predicted_once_with_its_first_piece(vocab, seq, stride):
    rng = random.Random(seq * 100 + stride)
    sentences = [[rng.choice(PIECES) for _ in range(rng.choice([0, 1, 3, 9, 25, 40]))]
                 for _ in range(12)]
    windows = tagging_windows.Windows(vocab, seq, True, stride)
    words = tf.ragged.constant(sentences, dtype=tf.string, row_splits_dtype=tf.int64)
    rows = {k: v.numpy() for k, v in windows(words).items()}
    pieces = windows.pieces(words).to_list()
    room, c = seq - 2, (seq - 2 - stride) // 2
    for b, sentence in enumerate(sentences):
        mine = np.nonzero(rows["example"] == b)[0]
        n_pieces = sum(len(p) for p in pieces[b])
        assert len(mine) == 1 + max(0, -(-(n_pieces - room) // stride))  # as few as needed
        found = {}
        for n in mine:
            ids, length = rows["input_ids"][n], rows["input_mask"][n].sum()
            assert ids[0] == vocab.cls_id and ids[length - 1] == vocab.sep_id
            assert np.all(ids[length:] == vocab.pad_id)
            for position in np.nonzero(rows["word"][n] >= 0)[0]:
                word = rows["word"][n, position]
                assert word not in found, (b, word)
                found[word] = True
                assert ids[position] == pieces[b][word][0]  # the word's first piece
                flat = sum(len(p) for p in pieces[b][:word])
                # Context: c pieces on each side, where the sentence has them.
                assert position - 1 >= min(c, flat)
                assert length - 2 - position >= min(c, n_pieces - 1 - flat)
        assert sorted(found) == list(range(len(sentence)))
    assert all(len(p) >= 1 for s in pieces for p in s)  # "\x00" reads as [UNK]
    # gather_words: each word's value at its one position, sentence by sentence.
    num_words = tf.constant([len(s) for s in sentences], tf.int32)
    gathered = tagging_windows.gather_words(rows, tf.constant(rows["input_ids"]), num_words)
    assert gathered.numpy().tolist() == [p[0] for s in pieces for p in s]


def test_window_geometry_is_checked():
    with pytest.raises(errors.UserError, match=r"config.data.stride=7: must be in 1..6"):
        tagging_windows.check_geometry(8, 7)
    tagging_windows.check_geometry(8, 6)


@pytest.mark.parametrize("scheme", conll.SCHEMES)
def test_in_graph_chunks_and_tags_equal_the_hosts(scheme):
    """`export_tagging.chunks` / `write_tags` on random label sequences (any transition)
    give `conll.spans` and `conll.tags` of them."""
    labels = conll.labels(["A", "B"], "bioes") + ["I-C"]
    types = ["", "A", "B", "C"]
    prefix_of = [export_tagging._PREFIX_CODES[conll.split_tag(l)[0]] for l in labels]  # pylint: disable=protected-access
    kind_of = [types.index(conll.split_tag(l)[1]) for l in labels]
    rng = random.Random(1)
    sentences = [[rng.randrange(len(labels)) for _ in range(rng.randint(1, 12))]
                 for _ in range(200)]
    flat = tf.constant([i for s in sentences for i in s])
    index = tf.ragged.constant([list(range(len(s))) for s in sentences]).flat_values
    lengths = tf.constant([len(s) for s in sentences])
    last = index == tf.repeat(lengths - 1, lengths)
    kind = tf.gather(kind_of, flat)
    spans = export_tagging.chunks(tf.gather(prefix_of, flat), kind, index == 0, last)
    tags = export_tagging.write_tags(spans, kind, tf.constant(types), scheme).numpy()
    starts, ends = spans["starts"].numpy(), spans["ends"].numpy()
    offset = 0
    for sentence in sentences:
        names = [labels[i] for i in sentence]
        want = conll.spans(names)
        n = len(sentence)
        got_starts = np.nonzero(starts[offset:offset + n])[0].tolist()
        got_ends = np.nonzero(ends[offset:offset + n])[0].tolist()
        assert got_starts == [s.start for s in want] and got_ends == [s.end - 1 for s in want]
        assert [t.decode() for t in tags[offset:offset + n]] == conll.tags(want, n, scheme)
        offset += n
