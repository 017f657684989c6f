"""SQuAD's metrics as its official evaluation scripts compute them (v1.1 and v2.0).

Answers are compared after the scripts' normalisation: lower-cased, punctuation
(`string.punctuation`) removed, the articles a/an/the removed, whitespace collapsed.
Exact match is equality of the normalised strings; F1 is the harmonic mean of the
precision and recall of the normalised tokens' multiset; each question scores the maximum
over its gold answers. Scores are percentages over all questions (v1.1: a question
without a prediction scores 0, as its script counts it; v2.0's script fails on one in its
HasAns/NoAns totals, so `evaluate_v2` requires every question).

v2.0 (`evaluate_v2`): a question is answerable (HasAns) when its raw answer list is not
empty (the script's make_qid_to_has_ans: bool(qa['answers'])); gold answers empty after
normalisation are dropped, and a question left with none has the empty string as its
gold (so an answerable question whose only answer is "the" is HasAns with gold "");
F1 between an empty and a non-empty answer is 0, between two empty ones 1. With no-answer probabilities (`null_odds.json`), a
prediction whose probability exceeds the threshold (default 1.0: never) counts as "no
answer". It reports overall, HasAns_ and NoAns_ exact/F1/total, and the best thresholds
(best_exact, best_exact_thresh, best_f1, best_f1_thresh): the threshold on the
no-answer probability that maximises the score, searched as the v2.0 script does.

>>> normalize_answer("The  Cat's, hat!")
'cats hat'
>>> round(f1_score("the big red house", "a red house"), 4)
0.8
>>> exact_match("Denver Broncos", "the denver broncos.")
True
>>> v1 = [{"id": "q1", "answers": ["Denver Broncos", "Broncos"]},
...       {"id": "q2", "answers": ["1950"]}]
>>> evaluate_v1(v1, {"q1": "Broncos", "q2": "in 1950s"})
{'exact_match': 50.0, 'f1': 50.0}
"""

import collections
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the scripts' order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def f1_score(prediction: str, gold: str, v2: bool = True) -> float:
    """Token F1 of the normalised answers; with `v2`, v2.0's rule when either is empty
    (v1.1's script scores 0 then)."""
    predicted, expected = _tokens(prediction), _tokens(gold)
    if v2 and (not predicted or not expected):
        return float(predicted == expected)
    same = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def evaluate_v1(questions: list[dict], predictions: dict[str, str]) -> dict[str, float]:
    """SQuAD v1.1's `exact_match` and `f1` (percent). questions: [{"id", "answers": [text]}]."""
    exact = f1 = 0.0
    for question in questions:
        if question["id"] not in predictions:
            continue  # scores 0
        prediction = predictions[question["id"]]
        exact += max(exact_match(prediction, gold) for gold in question["answers"])
        f1 += max(f1_score(prediction, gold, v2=False) for gold in question["answers"])
    total = len(questions)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def evaluate_v2(questions: list[dict], predictions: dict[str, str],
                null_odds: dict[str, float] | None = None,
                threshold: float = 1.0) -> dict[str, float]:
    """SQuAD v2.0's metrics (percent): exact, f1, total, HasAns_*/NoAns_* and, with
    `null_odds` (no-answer probabilities), best_exact(_thresh) and best_f1(_thresh)."""
    missing = [q["id"] for q in questions if q["id"] not in predictions]
    if missing:
        raise ValueError(f"no prediction for {len(missing)} question(s), e.g. {missing[0]!r}")
    exact, f1, has_answer = {}, {}, {}
    for question in questions:
        qid = question["id"]
        golds = [a for a in question["answers"] if normalize_answer(a)] or [""]
        has_answer[qid] = bool(question["answers"])  # the raw list, as the script
        exact[qid] = float(max(exact_match(predictions[qid], g) for g in golds))
        f1[qid] = max(f1_score(predictions[qid], g) for g in golds)
    null_odds = null_odds or {}

    def thresholded(scores):
        return {qid: float(not has_answer[qid]) if null_odds.get(qid, 0.0) > threshold
                else score for qid, score in scores.items()}

    exact_t, f1_t = thresholded(exact), thresholded(f1)
    out = {}

    def summary(prefix, qids):
        n = len(qids)
        out[f"{prefix}exact"] = 100.0 * sum(exact_t[q] for q in qids) / n
        out[f"{prefix}f1"] = 100.0 * sum(f1_t[q] for q in qids) / n
        out[f"{prefix}total"] = n

    ids = [q["id"] for q in questions]
    summary("", ids)
    for prefix, flag in (("HasAns_", True), ("NoAns_", False)):
        subset = [q for q in ids if has_answer[q] == flag]
        if subset:
            summary(prefix, subset)
    if null_odds:
        for name, scores in (("exact", exact), ("f1", f1)):
            best, at = _best_threshold(scores, predictions, null_odds, has_answer)
            out[f"best_{name}"], out[f"best_{name}_thresh"] = best, at
    return out


def _best_threshold(scores, predictions, null_odds, has_answer) -> tuple[float, float]:
    """v2.0's search: start from "no answer everywhere" (every unanswerable question
    right), then admit the predictions in increasing no-answer probability."""
    score = best = float(sum(not has for has in has_answer.values()))
    best_at = 0.0
    for qid in sorted(null_odds, key=lambda q: null_odds[q]):
        if qid not in scores:  # odds of a question not in the data
            continue
        if has_answer[qid]:
            diff = scores[qid]
        else:
            diff = -1.0 if predictions[qid] else 0.0
        score += diff
        if score > best:
            best, best_at = score, null_odds[qid]
    return 100.0 * best / len(scores), best_at
