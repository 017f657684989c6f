"""Text scoring (docs/electric.md): the export's `score` signature on raw text, for
ELECTRA (Σ log P(original)) and ELECTRIC (−Σ energies) runs, and tools/score_text.py on
a one-pass model and on an MLM (pseudo-log-likelihood)."""

import json

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model.objectives import base
from electra_tf.serving import export
from electra_tf.text import packer as packer_lib
from tests import helpers

SEQ = helpers.SERVING_SEQ
TEXTS = ["the cat sat on the mat", "mat the on sat cat the", "", "a big red tree"]


def _runs(tmp_path_factory, objective):
    workdir = tmp_path_factory.mktemp(objective)
    vocab, model = helpers.write_pretrained_run(workdir, SEQ, objective=objective)
    return {"workdir": str(workdir), "vocab": vocab, "model": model}


@pytest.fixture(scope="module")
def electric(tmp_path_factory):
    """A tiny ELECTRIC run (random weights) and its export."""
    run = _runs(tmp_path_factory, "electric")
    run["exported"] = export.export_run(
        run["workdir"], str(tmp_path_factory.mktemp("models") / "electric" / "1"))
    return run


@pytest.fixture(scope="module")
def mlm(tmp_path_factory):
    return _runs(tmp_path_factory, "mlm")


def _packed(vocab):
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    return [t.numpy() for t in packer.pack(tf.constant(TEXTS))]


def test_the_score_signature_answers_raw_text(run, exported, electric, tmp_path):
    """ELECTRIC's run, in TF Serving's session loader: −Σ energies over the text's tokens
    ([CLS], [SEP] and padding left out), as serving_default's energies give them.
    ELECTRA's (loaded in process): Σ log(1 − P(replaced)) over the same tokens."""
    feeds = {"text": np.array(TEXTS, object)}
    served = helpers.session_run(electric["exported"], {
        "score": ("score", feeds), "default": ("serving_default", feeds)}, str(tmp_path))
    ids, mask, segments = _packed(electric["vocab"])
    np.testing.assert_array_equal(served["score"]["token_ids"], ids)
    counted = base.candidates({"input_mask": mask, "segment_ids": segments}).numpy()
    assert counted.sum() < mask.sum()  # [CLS] and [SEP] are real tokens not counted
    tokens = -served["default"]["energies"] * counted
    np.testing.assert_allclose(served["score"]["token_scores"], tokens, atol=1e-4)
    np.testing.assert_allclose(served["score"]["score"], tokens.sum(1), atol=1e-3)
    expected = export.score(electric["model"], ids, mask, segments)["score"].numpy()
    np.testing.assert_allclose(served["score"]["score"], expected, atol=1e-3)

    got = tf.saved_model.load(exported).signatures["score"](text=tf.constant(TEXTS))
    ids, mask, segments = _packed(run["vocab"])
    probability = export.discriminate(run["model"], ids, mask, segments)[
        "replaced_probability"].numpy()
    counted = base.candidates({"input_mask": mask, "segment_ids": segments}).numpy()
    tokens = np.log1p(-probability) * counted
    np.testing.assert_allclose(got["token_scores"].numpy(), tokens, atol=1e-4)
    np.testing.assert_allclose(got["score"].numpy(), tokens.sum(1), atol=1e-3)


def _scored(result):
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    rows = [line.split("\t", 1) for line in lines[:-1] if line]
    return [(float(score), text) for score, text in rows], json.loads(lines[-1])


def test_score_text_ranks_groups_with_a_one_pass_model(electric, tmp_path):
    path = tmp_path / "nbest.txt"
    path.write_text("the cat sat on the mat\nmat the on sat cat the\n\n"
                    "a big red tree\na big tree\nred\n")
    rows, summary = _scored(helpers.run_tool("score_text.py",
                                             f"--workdir={electric['workdir']}",
                                             f"--input={path}", "--pairs"))
    packer = packer_lib.TextPacker(electric["vocab"], SEQ, lower_case=True)
    texts = ["the cat sat on the mat", "mat the on sat cat the", "a big red tree",
             "a big tree", "red"]
    expected = dict(zip(texts, export.score(electric["model"], *packer.pack(
        tf.constant(texts)))["score"].numpy().tolist()))
    assert sorted(text for _, text in rows) == sorted(texts)
    for score, text in rows:
        assert score == pytest.approx(expected[text], abs=1e-3)
    groups = [rows[:2], rows[2:]]
    assert all([s for s, _ in g] == sorted([s for s, _ in g], reverse=True) for g in groups)
    first_best = np.mean([expected[texts[0]] > expected[texts[1]],
                          expected[texts[2]] > max(expected[texts[3]], expected[texts[4]])])
    assert summary["method"] == "one_pass" and summary["groups"] == 2
    assert summary["first_best"] == pytest.approx(first_best)


def test_score_text_computes_an_mlms_pseudo_log_likelihood(mlm, tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("the cat sat\na big red tree\n")
    rows, summary = _scored(helpers.run_tool("score_text.py", f"--workdir={mlm['workdir']}",
                                             f"--input={path}", "--batch_size=3"))
    model, vocab = mlm["model"], mlm["vocab"]
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    ids, mask, segments = (t.numpy() for t in packer.pack(tf.constant(["the cat sat",
                                                                        "a big red tree"])))
    candidates = base.candidates({"input_mask": mask, "segment_ids": segments}).numpy()
    for row, (score, _) in enumerate(rows):
        total = 0.0
        for t in np.nonzero(candidates[row])[0]:  # one masked copy per token, one by one
            masked = ids[row:row + 1].copy()
            masked[0, t] = vocab.mask_id
            sequence = model.discriminator({"token_ids": masked,
                                            "segment_ids": segments[row:row + 1],
                                            "padding_mask": mask[row:row + 1]})
            logits = model.discriminator_head(sequence, mask_positions=np.array([[t]]))
            total += float(tf.nn.log_softmax(logits[0, 0])[ids[row, t]])
        assert score == pytest.approx(total, abs=1e-3)
    assert summary["method"] == "pseudo_log_likelihood"
    assert summary["rows"] == int(candidates.sum()) == 3 + 4


def test_score_text_refuses_a_group_of_one_in_one_line(electric, tmp_path):
    path = tmp_path / "nbest.txt"
    path.write_text("a cat\na dog\n\nalone\n")
    line = helpers.one_line_error(helpers.run_tool(
        "score_text.py", f"--workdir={electric['workdir']}", f"--input={path}", "--pairs"))
    assert f"{path}:4: a group of one hypothesis" in line


def test_a_reranking_set_of_corrupted_copies_scores_in_pairs(electric, tmp_path):
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("the cat sat on the mat\n\nthe dog ran under a log\nred blue\n"
                       "the tree was very big\n")
    pairs = tmp_path / "pairs.txt"
    made = helpers.run_tool("make_reranking_set.py", f"--input={heldout}",
                            f"--output={pairs}", "--frequent=5")
    assert made.returncode == 0, made.stderr[-3000:]
    groups = [g.splitlines() for g in pairs.read_text().strip().split("\n\n")]
    assert len(groups) == 6  # three sentences of 4+ words, two corruptions each
    for (original, corrupted), kind in zip(groups, ["swap", "frequent"] * 3):
        a, b = original.split(), corrupted.split()
        assert len(a) == len(b) and a != b
        if kind == "swap":
            assert sorted(a) == sorted(b) and sum(x != y for x, y in zip(a, b)) == 2
        else:
            assert sum(x != y for x, y in zip(a, b)) == 1
    _, summary = _scored(helpers.run_tool("score_text.py", f"--workdir={electric['workdir']}",
                                          f"--input={pairs}", "--pairs"))
    assert summary["groups"] == 6 and 0.0 <= summary["first_best"] <= 1.0
    bad = helpers.run_tool("make_reranking_set.py", f"--input={heldout}",
                           f"--output={tmp_path / 'bad.txt'}", "--corruptions=shuffle")
    assert "--corruptions=shuffle: choose from swap, frequent" in helpers.one_line_error(bad)


def test_score_text_refuses_unreadable_input_in_one_line(tmp_path):
    """Bytes that are not UTF-8 (named by line; before the run is read) and a folder
    (before TensorFlow loads): one line, exit 2."""
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"a cat\ncaf\xe9 au lait\n")
    line = helpers.one_line_error(helpers.run_tool(
        "score_text.py", f"--workdir={tmp_path}", f"--input={bad}"))
    assert f"{bad}:2: not UTF-8 (byte 9)" in line
    line = helpers.one_line_error(helpers.run_tool(
        "score_text.py", f"--workdir={tmp_path}", f"--input={tmp_path}"))
    assert f"--input={tmp_path}: a directory" in line


def test_score_text_splits_its_input_at_newlines_alone(electric, tmp_path):
    """A hypothesis holding \\u2028 or \\x0c (str.splitlines' other breaks) stays one text,
    and a CRLF file reads as an LF one."""
    path = tmp_path / "nbest.txt"
    path.write_bytes("a big\u2028red tree\r\na big\x0ctree\r\n".encode("utf-8"))
    result = helpers.run_tool("score_text.py", f"--workdir={electric['workdir']}",
                              f"--input={path}", "--pairs")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.rstrip("\n").split("\n")  # not splitlines: the texts hold breaks
    assert json.loads(lines[-1])["texts"] == 2 and json.loads(lines[-1])["groups"] == 1
    assert sorted(line.split("\t", 1)[1] for line in lines[:-1]) == [
        "a big\x0ctree", "a big\u2028red tree"]


def test_make_reranking_set_leaves_out_lines_that_are_not_utf8(tmp_path):
    heldout = tmp_path / "heldout.txt"
    heldout.write_bytes(b"the cat sat on the mat\ncaf\xe9 is a nice word here\n"
                        b"the dog ran under a log\n")
    pairs = tmp_path / "pairs.txt"
    made = helpers.run_tool("make_reranking_set.py", f"--input={heldout}",
                            f"--output={pairs}", "--corruptions=swap", "--frequent=5")
    assert made.returncode == 0, made.stderr[-3000:]
    originals = [g.splitlines()[0] for g in pairs.read_text().strip().split("\n\n")]
    assert originals == ["the cat sat on the mat", "the dog ran under a log"]
    assert "1 line(s) not UTF-8 left out" in made.stderr
    line = helpers.one_line_error(helpers.run_tool(
        "make_reranking_set.py", f"--input={tmp_path}", f"--output={tmp_path / 'x.txt'}"))
    assert str(tmp_path) in line


def test_make_reranking_set_of_one_repeated_word_is_a_one_line_error(tmp_path):
    """Nothing to swap and no other frequent word: no pair, said in one line."""
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("la la la la\n")
    line = helpers.one_line_error(helpers.run_tool(
        "make_reranking_set.py", f"--input={heldout}", f"--output={tmp_path / 'p.txt'}"))
    assert "no sentence of 4 words or more that the corruptions change" in line
