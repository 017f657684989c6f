"""SQuAD's metrics against cases worked by hand with the official scripts' rules."""

import pytest

from electra_tf.finetuning.squad import metrics as m


def test_normalisation_is_the_scripts():
    assert m.normalize_answer("An  Apple, the pie & A cake!") == "apple pie cake"
    assert m.normalize_answer("théâtre") == "théâtre"  # accents stay; only ASCII punctuation
    assert m.normalize_answer("anthem") == "anthem"    # articles are whole words


def test_f1_is_over_the_normalised_token_multiset():
    assert m.f1_score("Seine river", "the river Seine") == 1.0   # order does not matter
    # pred {a:2 b:1}, gold {a:1 b:1 c:1}: 2 shared; P 2/3, R 2/3.
    assert m.f1_score("x x y", "x y z") == pytest.approx(2 / 3)
    assert m.f1_score("", "") == 1.0 and m.f1_score("", "Paris") == 0.0  # v2.0's rule
    assert m.f1_score("", "the", v2=False) == 0.0  # v1.1: nothing in common, 0


def test_v1_takes_the_best_gold_answer_and_counts_missing_as_zero():
    questions = [{"id": "a", "answers": ["Denver Broncos", "The Broncos"]},
                 {"id": "b", "answers": ["Santa Clara, California"]},
                 {"id": "c", "answers": ["1950"]}]
    # a: exact on the 2nd gold; b: "santa clara" vs "santa clara california": P 1, R 2/3,
    # F1 0.8; c: missing.
    got = m.evaluate_v1(questions, {"a": "broncos!", "b": "Santa Clara"})
    assert got == pytest.approx({"exact_match": 100 / 3, "f1": 100 * 1.8 / 3})


V2 = [{"id": "q1", "answers": ["Paris"]},
      {"id": "q2", "answers": ["the river Seine", "Seine"]},
      {"id": "q3", "answers": []},
      {"id": "q4", "answers": []}]
PREDICTIONS = {"q1": "Paris", "q2": "Seine river", "q3": "", "q4": "tower"}
NULL_ODDS = {"q1": 0.1, "q2": 0.6, "q3": 0.9, "q4": 0.3}


def test_v2_has_answer_and_no_answer_totals():
    got = m.evaluate_v2(V2, PREDICTIONS)
    # exact: 1, 0, 1, 0; f1: 1, 1, 1, 0.
    assert got == pytest.approx({"exact": 50.0, "f1": 75.0, "total": 4,
                                 "HasAns_exact": 50.0, "HasAns_f1": 100.0, "HasAns_total": 2,
                                 "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2})


def test_v2_threshold_and_the_best_threshold_search():
    got = m.evaluate_v2(V2, PREDICTIONS, NULL_ODDS, threshold=0.5)
    # q2 (0.6) and q3 (0.9) become "no answer": q2 wrong (it has one), q3 right.
    assert (got["exact"], got["f1"]) == (50.0, 50.0)
    # From "no answer everywhere" (2 right), admit by odds: q1 +1 → 3 (best, at 0.1),
    # q4 −1 (answered, has none) → 2, q2 +0 (exact) / +1 (f1) → 2 / 3, q3 +0.
    assert (got["best_exact"], got["best_exact_thresh"]) == (75.0, 0.1)
    assert (got["best_f1"], got["best_f1_thresh"]) == (75.0, 0.1)


def test_v2_needs_every_question():
    with pytest.raises(ValueError, match="no prediction for 1 question"):
        m.evaluate_v2(V2, {k: v for k, v in PREDICTIONS.items() if k != "q4"})


def test_v2_has_answer_is_the_raw_answer_list_as_the_script():
    """make_qid_to_has_ans is bool(qa['answers']): an answer that normalises to nothing
    ("the") still makes the question HasAns, with "" as its only gold."""
    questions = [{"id": "t", "answers": ["the"]}, {"id": "n", "answers": []}]
    declined = m.evaluate_v2(questions, {"t": "", "n": ""}, {"t": 0.9, "n": 0.9},
                             threshold=0.5)
    # Declined ("no answer" by the odds): float(not has_ans) = 0 for t, 1 for n.
    assert declined["HasAns_total"] == 1 and declined["NoAns_total"] == 1
    assert (declined["HasAns_exact"], declined["HasAns_f1"]) == (0.0, 0.0)
    assert (declined["NoAns_exact"], declined["NoAns_f1"]) == (100.0, 100.0)
    # Not declined, the empty text equals the empty gold: the script scores it 1 (its
    # compute_exact("", "")), still under HasAns; a non-empty text scores 0.
    kept = m.evaluate_v2(questions, {"t": "", "n": ""})
    assert (kept["HasAns_total"], kept["HasAns_exact"], kept["HasAns_f1"]) == (1, 100.0, 100.0)
    answered = m.evaluate_v2(questions, {"t": "Paris", "n": ""})
    assert (answered["HasAns_exact"], answered["HasAns_f1"]) == (0.0, 0.0)
