"""Tagging's scores against an independent scorer: seqeval 1.2.2 (its default mode is
conlleval's), on the same predictions, well-formed or not."""

import random

import pytest
from seqeval import metrics as seqeval_metrics  # pinned in requirements-test.txt

from electra_tf.finetuning.tagging import conll
from electra_tf.finetuning.tagging import metrics

TAGS = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC",
        "B-ORG", "I-ORG"]


def _sentences(rng, n, tags):
    return [[rng.choice(tags) for _ in range(rng.randint(1, 15))] for _ in range(n)]


def _noisy(rng, gold, tags, rate):
    return [[rng.choice(tags) if rng.random() < rate else t for t in s] for s in gold]


@pytest.mark.parametrize("scheme", ["random", *conll.SCHEMES])
def test_scores_equal_seqevals(scheme):
    """Overall and per-type precision, recall, F1 and the token accuracy, on random tag
    sequences (any transition) and on each scheme's well-formed ones, with noise."""
    rng = random.Random(sum(map(ord, scheme)))
    for _ in range(20):
        if scheme == "random":
            gold = _sentences(rng, 30, TAGS)
            predicted = _noisy(rng, gold, TAGS, 0.3)
        else:
            def well_formed(tags_):
                return conll.tags(conll.spans(tags_), len(tags_), scheme)
            gold = [well_formed(s) for s in _sentences(rng, 30, TAGS)]
            predicted = [well_formed(s) for s in _noisy(rng, gold, TAGS, 0.2)]
        ours = metrics.evaluate(gold, predicted)
        report = seqeval_metrics.classification_report(gold, predicted, output_dict=True,
                                                       zero_division=0)
        assert ours["f1"] == pytest.approx(100 * seqeval_metrics.f1_score(gold, predicted))
        assert ours["precision"] == pytest.approx(
            100 * seqeval_metrics.precision_score(gold, predicted))
        assert ours["recall"] == pytest.approx(
            100 * seqeval_metrics.recall_score(gold, predicted))
        assert ours["accuracy"] == pytest.approx(
            100 * seqeval_metrics.accuracy_score(gold, predicted))
        kinds = {k for k in report if k.isupper()}
        assert kinds == {k.split("_")[0] for k in ours if k.split("_")[0].isupper()}
        for kind in kinds:
            for name, key in (("precision", "precision"), ("recall", "recall"),
                              ("f1", "f1-score")):
                assert ours[f"{kind}_{name}"] == pytest.approx(100 * report[kind][key]), (
                    kind, name)


def test_nothing_to_score_is_zero_and_lengths_must_match():
    assert metrics.evaluate([["O", "O"]], [["O", "O"]]) == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 100.0}
    with pytest.raises(ValueError, match="1 predicted tags for 2 words"):
        metrics.evaluate([["O", "O"]], [["O"]])
