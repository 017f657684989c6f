"""Tests of `electra_tf.finetuning.glue.metrics` against values worked out by hand."""

import math

import numpy as np
import pytest

from electra_tf.finetuning.glue import metrics as m
from electra_tf.finetuning.glue import specs


def test_accuracy():
    assert m.accuracy([1, 0, 2, 2], [1, 1, 2, 0]) == 0.5
    assert m.accuracy(np.array([1, 1], np.int32), np.array([1, 1], np.int64)) == 1.0
    assert isinstance(m.accuracy([1], [1]), float)


def test_f1():
    # TP 2 (positions 0, 3), FP 1 (position 1), FN 1 (position 4): P = R = 2/3.
    assert m.f1([1, 1, 0, 1, 0], [1, 0, 0, 1, 1]) == pytest.approx(2 / 3)
    # TP 1, FP 0, FN 2: P = 1, R = 1/3, F1 = 2 · (1/3) / (4/3) = 1/2.
    assert m.f1([1, 0, 0], [1, 1, 1]) == pytest.approx(0.5)
    assert m.f1([0, 0, 0], [0, 0, 0]) == 0.0  # no positives anywhere: no true positive
    assert m.f1([0, 0, 0], [1, 1, 0]) == 0.0


def test_matthews_corrcoef_binary():
    # TP 2, TN 2, FP 1, FN 1: (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = 3/9.
    assert m.matthews_corrcoef([1, 1, 0, 1, 0, 0], [1, 0, 0, 1, 1, 0]) == pytest.approx(1 / 3)
    assert m.matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert m.matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_matthews_corrcoef_multiclass():
    # Confusion [label, prediction]: (0,0) (1,1) (2,2) (1,0). n = 4, 3 correct; per label
    # (1, 2, 1), per prediction (2, 1, 1): (3·4 − 5) / sqrt((16 − 6)(16 − 6)) = 0.7.
    assert m.matthews_corrcoef([0, 1, 2, 0], [0, 1, 2, 1]) == pytest.approx(0.7)


@pytest.mark.parametrize("predictions, labels", [
    ([1, 1, 1, 1], [1, 0, 0, 1]),  # a model that predicts one class
    ([0, 1, 0, 1], [1, 1, 1, 1]),
    ([0, 0], [0, 0]),
])
def test_matthews_corrcoef_degenerate_is_zero(predictions, labels):
    assert m.matthews_corrcoef(predictions, labels) == 0.0


def test_pearson():
    # x − mean = (−1, 0, 1), y − mean = (−4/3, −1/3, 5/3): Σxy = 3, Σx² = 2, Σy² = 14/3.
    assert m.pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / math.sqrt(2 * 14 / 3))
    assert m.pearson([1, 2, 3], [6, 4, 2]) == pytest.approx(-1.0)
    assert m.pearson([2.5, 2.5, 2.5], [1, 2, 4]) == 0.0  # constant: no NaN
    assert m.pearson([1.0], [3.0]) == 0.0


def test_ranks_average_ties():
    # Sorted: 10 10 20 20 20 30 → ranks 1.5 1.5 4 4 4 6.
    assert m._ranks(np.array([10., 20., 10., 30., 20., 20.])).tolist() == [
        1.5, 4.0, 1.5, 6.0, 4.0, 4.0]


def test_spearman():
    assert m.spearman([1, 2, 3, 4], [1, 4, 9, 100]) == pytest.approx(1.0)  # monotone
    assert m.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ranks (1.5, 1.5, 3) and (1, 2.5, 2.5): centred (−.5, −.5, 1), (−1, .5, .5):
    # Σxy = .75, Σx² = Σy² = 1.5 → 0.5.
    assert m.spearman([1, 1, 2], [1, 2, 2]) == pytest.approx(0.5)
    # Ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): 4.5 / sqrt(4.5 · 5) = sqrt(0.9).
    assert m.spearman([0.1, 0.4, 0.4, 0.9], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))
    assert m.spearman([3, 3, 3], [1, 2, 3]) == 0.0


def test_compute_reports_glues_metrics_per_task():
    assert m.compute("cola", [1, 1, 0, 1, 0, 0], [1, 0, 0, 1, 1, 0]) == {
        "mcc": pytest.approx(1 / 3)}
    assert m.compute("mrpc", [1, 1, 0, 1, 0], [1, 0, 0, 1, 1]) == {
        "accuracy": 0.6, "f1": pytest.approx(2 / 3)}
    assert set(m.compute("qqp", [1], [1])) == {"accuracy", "f1"}
    assert m.compute("mnli", [0, 1, 2, 2], [0, 1, 2, 1]) == {"accuracy": 0.75}
    for task in ("sst2", "qnli", "rte"):
        assert m.compute(task, [0, 1], [0, 0]) == {"accuracy": 0.5}
    # Scores as a [n, 1] regression head gives them.
    result = m.compute("stsb", np.array([[1.0], [2.0], [3.0]], np.float32), [1.0, 2.0, 4.0])
    assert result == {"pearson": pytest.approx(3 / math.sqrt(2 * 14 / 3)),
                      "spearman": pytest.approx(1.0)}
    for spec in specs.TASKS.values():
        assert all(isinstance(v, float) for v in m.compute(spec.name, [1, 0], [1, 1]).values())


@pytest.mark.parametrize("predictions, labels, problem", [
    ([1, 0], [1], "2 predictions for 1 labels"),
    ([], [], "no examples"),
    (np.zeros((2, 3), np.int32), [1, 0], r"predictions must be 1-D.*\(2, 3\)"),
    ([0.2, 0.8], [0, 1], "predictions must be class indices"),
])
def test_bad_arguments(predictions, labels, problem):
    with pytest.raises(ValueError, match=problem):
        m.accuracy(predictions, labels)


def test_compute_unknown_task():
    with pytest.raises(specs.GlueDataError, match="unknown GLUE task"):
        m.compute("wnli", [1], [1])
