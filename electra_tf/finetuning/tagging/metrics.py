"""Tagging's scores as conlleval computes them: entity-level precision, recall and F1 (a
predicted chunk counts when its type, first and last word equal a gold chunk's), overall
and per type, and token accuracy (words whose tag equals the gold tag). Chunks are read
from each side's tags by `conll.spans` (conlleval's rules); percentages, as conlleval
prints them; a score with nothing to divide is 0.

>>> gold = [["B-PER", "I-PER", "O", "B-LOC"]]
>>> predicted = [["B-PER", "I-PER", "O", "B-ORG"]]
>>> scores = evaluate(gold, predicted)
>>> scores["f1"], scores["precision"], scores["accuracy"], scores["PER_f1"], scores["LOC_recall"]
(50.0, 50.0, 75.0, 100.0, 0.0)
"""

import collections

from electra_tf.finetuning.tagging import conll


def _ratio(a: int, b: int) -> float:
    return 100.0 * a / b if b else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def evaluate(gold, predicted) -> dict[str, float]:
    """Scores of predicted tag sequences against gold ones (lists of lists, any scheme):
    precision, recall, f1, accuracy, and TYPE_precision/_recall/_f1 per type seen."""
    counts = collections.defaultdict(lambda: [0, 0, 0])   # type: [correct, predicted, gold]
    words = right = 0
    for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"{len(predicted_tags)} predicted tags for {len(gold_tags)} words")
        words += len(gold_tags)
        right += sum(g == p for g, p in zip(gold_tags, predicted_tags))
        gold_spans = set(conll.spans(gold_tags))
        predicted_spans = set(conll.spans(predicted_tags))
        for span in gold_spans:
            counts[span.type][2] += 1
        for span in predicted_spans:
            counts[span.type][1] += 1
            counts[span.type][0] += span in gold_spans
    correct, found, expected = (sum(c[i] for c in counts.values()) for i in range(3))
    precision, recall = _ratio(correct, found), _ratio(correct, expected)
    scores = {"precision": precision, "recall": recall, "f1": _f1(precision, recall),
              "accuracy": _ratio(right, words)}
    for kind in sorted(counts):
        c = counts[kind]
        p, r = _ratio(c[0], c[1]), _ratio(c[0], c[2])
        scores.update({f"{kind}_precision": p, f"{kind}_recall": r, f"{kind}_f1": _f1(p, r)})
    return scores
