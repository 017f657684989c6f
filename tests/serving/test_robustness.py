"""The exported text signatures on hostile input, in TF Serving's session loader.

Empty and whitespace-only text, 100,000 characters, mixed scripts and emoji, invalid UTF-8,
batches of 1 and 256: every row comes back in the documented shapes, packed as
`[CLS] ... [SEP]`, with finite probabilities. Every feed runs in one subprocess
(`helpers.session_run`); the export is the one `conftest.py` shares with `test_export.py`.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from electra_tf.text import packer as packer_lib
from tests import helpers

SEQ = helpers.SERVING_SEQ
LONG = ("the Cat 🐕 и 猫 عربي " * 6000)[:100_000]  # 100,000 characters, many words
INVALID = [b"the \xff cat \xed\xa0\x80 dog \xc3",  # stray byte, encoded surrogate, cut
           b"\x80\x80\x80",  # continuation bytes only
           b"red \xf0\x9f\x90 \xc0\xaf blue"]  # truncated emoji, overlong "/"
EDGES = ["".encode(), " \t\r\n\x0c\u2028\u3000  ".encode(), LONG.encode(), b"x" * 100_000,
         "The CAT и 猫 🐕‍🦺 שלום العربية e\u0301 👍🏽 ０１".encode(), b"the\x00cat\x01\x7f",
         *INVALID, *[b.decode("utf-8", "replace").encode() for b in INVALID]]


def _random_texts(n, seed=0):
    """`n` texts of random code points (ASCII words, CJK, RTL, combining, emoji,
    controls), up to 3,000 characters, with a few invalid UTF-8 bytes spliced in."""
    rng = np.random.default_rng(seed)
    pools = [list("the cat sat on a mat "), [chr(c) for c in range(0x4E00, 0x4E40)],
             [chr(c) for c in range(0x05D0, 0x05EA)] + [chr(c) for c in range(0x0627, 0x064A)],
             [chr(c) for c in range(0x0300, 0x0370)], [chr(c) for c in range(0x1F600, 0x1F650)],
             ["\x00", "\t", "\r", "\n", "\x0c", "\u2028", "\u200d", "\ufeff"]]
    texts = []
    for _ in range(n):
        length = int(rng.choice([0, 1, 5, 50, 500, 3000]))
        pool = pools[rng.integers(len(pools))] + pools[0]
        data = "".join(rng.choice(pool, length)).encode()
        if length and rng.random() < 0.3:
            cut = int(rng.integers(len(data)))
            data = data[:cut] + bytes(rng.integers(0x80, 0x100, 3, dtype=np.uint8)) + data[cut:]
        texts.append(data)
    return texts


@pytest.fixture(scope="module")
def served(run, exported, tmp_path_factory):
    """The vocab, the export directory and the session loader's answer to every feed."""
    pair_text, pair_other = LONG.encode() + INVALID[0], INVALID[1] + LONG.encode()
    requests = {
        "edges": ("serving_default", {"text": np.array(EDGES, dtype=object)}),
        "one": ("serving_default", {"text": np.array([b""], dtype=object)}),  # no tokens
        "many": ("serving_default", {"text": np.array(_random_texts(256), dtype=object)}),
        "pair": ("serving_pair", {"text": np.array([pair_text, b""], dtype=object),
                                  "text_pair": np.array([pair_other, b" "], dtype=object)}),
    }
    outputs = helpers.session_run(exported, requests, str(tmp_path_factory.mktemp("out")))
    return {"vocab": run["vocab"], "export_dir": exported, "requests": requests,
            "outputs": outputs}


def _check_rows(out, batch, vocab, num_segments=1):
    """The documented outputs, well-formed for each of `batch` rows."""
    probability, ids = out["replaced_probability"], out["token_ids"]
    mask, tokens = out["input_mask"], out["tokens"]
    assert probability.shape == ids.shape == mask.shape == tokens.shape == (batch, SEQ)
    assert probability.dtype == np.float32
    assert ids.dtype == mask.dtype == np.int32
    assert np.isfinite(probability).all()
    assert ((probability >= 0) & (probability <= 1)).all()
    assert set(np.unique(mask)) <= {0, 1}
    assert (np.diff(mask, axis=1) <= 0).all(), "input_mask is not a prefix of ones"
    lengths = mask.sum(1)
    assert (lengths >= 1 + num_segments).all()  # at least [CLS] and a [SEP] per segment
    assert ((ids >= 0) & (ids < vocab.size)).all()
    assert (ids[:, 0] == vocab.cls_id).all()
    assert (ids[np.arange(batch), lengths - 1] == vocab.sep_id).all()
    assert ((ids == vocab.sep_id).sum(1) == num_segments).all()
    assert (ids[mask == 0] == vocab.pad_id).all()
    assert (probability[mask == 0] == 0).all()
    words = tokens.astype(bytes)
    assert (words[mask == 0] == b"").all()
    assert [w.decode() for w in words[mask == 1]] == [vocab.tokens[i] for i in ids[mask == 1]]
    return lengths


def test_edge_cases_in_one_batch(served):
    vocab, out = served["vocab"], served["outputs"]["edges"]
    lengths = _check_rows(out, len(EDGES), vocab)
    ids = out["token_ids"]
    assert lengths[0] == lengths[1] == 2  # "" and whitespace: [CLS] [SEP]
    assert lengths[2] == SEQ  # 100,000 characters are cut to S
    np.testing.assert_array_equal(ids[2, 1:4], [vocab.id("the"), vocab.id("cat"),
                                                vocab.unk_id])
    np.testing.assert_array_equal(ids[3, :3], [vocab.cls_id, vocab.unk_id, vocab.sep_id])
    assert lengths[4] > 2 and lengths[5] > 2
    # Invalid UTF-8 reads as if each bad sequence were U+FFFD (an unknown word piece).
    n = len(INVALID)
    np.testing.assert_array_equal(ids[-2 * n:-n], ids[-n:])
    np.testing.assert_array_equal(out["replaced_probability"][-2 * n:-n],
                                  out["replaced_probability"][-n:])
    np.testing.assert_array_equal(ids[-2 * n, :6], [vocab.cls_id, vocab.id("the"),
                                                     vocab.unk_id, vocab.id("cat"),
                                                     vocab.unk_id, vocab.id("dog")])


def test_batch_of_one_with_no_token_at_all_equals_its_row_in_a_batch(served):
    vocab, outputs = served["vocab"], served["outputs"]
    one = outputs["one"]
    assert _check_rows(one, 1, vocab).tolist() == [2]
    np.testing.assert_array_equal(one["token_ids"], outputs["edges"]["token_ids"][:1])
    np.testing.assert_allclose(one["replaced_probability"],
                               outputs["edges"]["replaced_probability"][:1], atol=1e-5)


def test_batch_of_256_random_texts_matches_the_in_process_packer(served):
    vocab, out = served["vocab"], served["outputs"]["many"]
    _check_rows(out, 256, vocab)
    texts = served["requests"]["many"][1]["text"]
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    ids, mask, _ = packer.pack(tf.constant(list(texts)))
    np.testing.assert_array_equal(out["token_ids"], ids.numpy())
    np.testing.assert_array_equal(out["input_mask"], mask.numpy())


def test_extreme_pair(served):
    vocab, out = served["vocab"], served["outputs"]["pair"]
    lengths = _check_rows(out, 2, vocab, num_segments=2)
    # Both sides longer than the budget S - 3 = 13: round-robin keeps 7 and 6.
    assert lengths.tolist() == [SEQ, 3]
    sep = np.flatnonzero(out["token_ids"][0] == vocab.sep_id).tolist()
    assert sep == [8, SEQ - 1]
    assert out["token_ids"][0, 9] == vocab.unk_id  # the pair's leading invalid bytes
    np.testing.assert_array_equal(out["token_ids"][1, :3], [vocab.cls_id, vocab.sep_id,
                                                            vocab.sep_id])


def test_graph_needs_no_op_beyond_the_documented_tf_text_ops(served):
    """The ops-version contract (`MIN_TF_SERVING`): everything else is core TF."""
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(served["export_dir"], "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    graph = proto.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    ops |= {node.op for function in graph.library.function for node in function.node_def}
    assert "FastBertNormalize" in ops
    beyond_core = {op for op in ops if not hasattr(tf.raw_ops, op)}
    assert beyond_core <= {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets"}, beyond_core
