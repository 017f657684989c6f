"""The metrics GLUE reports, in plain NumPy (no scipy, no scikit-learn).

Every function takes `(predictions, labels)` as 1-D sequences of the same non-zero
length and returns a Python float. Classification metrics take class indices; the
correlations take real-valued scores. Values are fractions (accuracy 0.75, not 75.0);
the original ELECTRA prints them multiplied by 100.

Degenerate inputs give 0.0 rather than NaN: a constant column has no correlation with
anything (Pearson, Spearman, MCC), and F1 without a single true positive is 0. This is
what scikit-learn returns for MCC and F1, and keeps a summary or a "best checkpoint"
comparison well defined while a model still predicts one class.

>>> accuracy([1, 0, 1, 1], [1, 0, 0, 1])
0.75
>>> round(f1([1, 1, 0, 0], [1, 0, 0, 0]), 4)  # TP 1, FP 1, FN 0
0.6667
>>> round(matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0]), 4)
0.5774
>>> matthews_corrcoef([1, 1, 1, 1], [1, 0, 0, 1])  # constant predictions
0.0
>>> spearman([0.1, 0.4, 0.4, 0.9], [1.0, 2.0, 3.0, 4.0])  # ranks 1, 2.5, 2.5, 4
0.9486832980505138
>>> compute("mrpc", [1, 0, 1, 1], [1, 0, 0, 1])
{'accuracy': 0.75, 'f1': 0.8}
"""

import numpy as np

from electra_tf.finetuning.glue import specs


def _pair(predictions, labels, integer: bool) -> tuple[np.ndarray, np.ndarray]:
    """Both as 1-D arrays ([n] or [n, 1] accepted) of the same non-zero length."""
    arrays = []
    for name, values in (("predictions", predictions), ("labels", labels)):
        array = np.asarray(values)
        if array.ndim == 2 and array.shape[1] == 1:
            array = array[:, 0]
        if array.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one value per example). "
                             f"Received: shape {array.shape}")
        if integer:
            if array.dtype.kind not in "iub" and array.size:  # [] parses as float
                raise ValueError(f"{name} must be class indices (integers). "
                                 f"Received: dtype {array.dtype}")
            array = array.astype(np.int64)
        else:
            array = array.astype(np.float64)
        arrays.append(array)
    predictions, labels = arrays
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    if not len(labels):
        raise ValueError("no examples to score")
    return predictions, labels


def accuracy(predictions, labels) -> float:
    """The share of predictions equal to their label."""
    predictions, labels = _pair(predictions, labels, integer=True)
    return float(np.mean(predictions == labels))


def f1(predictions, labels) -> float:
    """F1 of the positive class 1 (binary tasks); 0.0 without a true positive."""
    predictions, labels = _pair(predictions, labels, integer=True)
    true_positives = np.sum((predictions == 1) & (labels == 1))
    if true_positives == 0:
        return 0.0
    # 2·P·R / (P + R) with P = TP / predicted positives, R = TP / gold positives.
    return float(2 * true_positives / (np.sum(predictions == 1) + np.sum(labels == 1)))


def matthews_corrcoef(predictions, labels) -> float:
    """Matthews correlation coefficient (multi-class form; binary as a special case).

    0.0 when either side is constant (the coefficient is undefined there).
    """
    predictions, labels = _pair(predictions, labels, integer=True)
    if min(predictions.min(), labels.min()) < 0:
        raise ValueError("class indices must be >= 0")
    num_classes = int(max(predictions.max(), labels.max())) + 1
    confusion = np.zeros((num_classes, num_classes), np.float64)  # [label, prediction]
    np.add.at(confusion, (labels, predictions), 1.0)
    n = confusion.sum()
    correct = np.trace(confusion)
    per_label = confusion.sum(axis=1)       # [num_classes] how often each class is gold
    per_prediction = confusion.sum(axis=0)  # [num_classes] how often each is predicted
    numerator = correct * n - per_prediction @ per_label
    denominator = np.sqrt((n * n - per_prediction @ per_prediction)
                          * (n * n - per_label @ per_label))
    if denominator == 0:
        return 0.0
    return float(numerator / denominator)


def pearson(predictions, labels) -> float:
    """Pearson's correlation coefficient; 0.0 when either side is constant."""
    predictions, labels = _pair(predictions, labels, integer=False)
    x = predictions - predictions.mean()
    y = labels - labels.mean()
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    if denominator == 0:
        return 0.0
    return float(np.clip(np.sum(x * y) / denominator, -1.0, 1.0))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the average of the ranks they span."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts_run = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    run = np.cumsum(starts_run) - 1                 # [n] run index of each sorted value
    first = np.flatnonzero(starts_run)              # [runs] first sorted position
    last = np.append(first[1:], len(values)) - 1    # [runs] last sorted position
    ranks = np.empty(len(values), np.float64)
    ranks[order] = (first + last)[run] / 2 + 1
    return ranks


def spearman(predictions, labels) -> float:
    """Spearman's rank correlation (Pearson's on average ranks); 0.0 if a side is constant."""
    predictions, labels = _pair(predictions, labels, integer=False)
    return pearson(_ranks(predictions), _ranks(labels))


METRICS = {
    "accuracy": accuracy,
    "f1": f1,
    "mcc": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}


def compute(task_name: str, predictions, labels) -> dict[str, float]:
    """The metrics GLUE reports for a task, by name (`TaskSpec.metrics`).

    `predictions` are class indices (or scores for stsb), one per example, in the order
    of `labels`. `specs.TASKS[task_name].primary_metric` names the one to select on.
    """
    spec = specs.get_task(task_name)
    return {name: METRICS[name](predictions, labels) for name in spec.metrics}
