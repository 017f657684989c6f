"""The GLUE tasks ELECTRA is fine-tuned on: what each one is.

`TASKS` describes cola, sst2, mrpc, stsb, qqp, mnli, qnli and rte (`TaskSpec`: text
columns, labels, metrics, and the original ELECTRA's fine-tuning defaults). Labels are
class indices in the order of `TaskSpec.label_names` (the original ELECTRA's order, so
its classifier heads read ours), or the 0..5 similarity score for stsb.

>>> spec = TASKS["mnli"]
>>> spec.label_names, spec.num_labels, spec.eval_splits
(('contradiction', 'entailment', 'neutral'), 3, ('validation_matched', 'validation_mismatched'))
"""

import dataclasses

from electra_tf import errors


class GlueDataError(errors.UserError):
    """GLUE data that cannot be used: the message names the file and line, or the dataset."""


# ---------------------------------------------------------------------------- tasks

# The original ELECTRA's fine-tuning defaults, from google-research/electra
# configure_finetuning.py (FinetuningConfig.__init__): weight_decay_rate 0.01;
# warmup_proportion 0.1; train/eval_batch_size 32; max_seq_length 128; num_train_epochs 3,
# 10 when the single task is "rte" or "sts"; double_unordered True (used by its MRPC and
# STS tasks only: train on both sentence orders). Its learning rate and layer-wise decay
# depend on the model, not the task: finetuning/hparams.py.


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One GLUE task: its data, its labels, its metrics and its fine-tuning defaults."""

    name: str
    tfds_name: str                   # "glue/<name>"
    data_folders: tuple[str, ...]    # its folder in GLUE's download, in the original's layout
    text_columns: tuple[str, ...]    # 1 or 2 logical names (TFDS's feature names)
    label_names: tuple[str, ...]     # as in GLUE's TSVs; position = class index; () for stsb
    tfds_label_names: tuple[str, ...]  # TFDS's ClassLabel names of the same classes
    metrics: tuple[str, ...]         # names in glue.metrics.METRICS, as GLUE reports them
    primary_metric: str              # what the original ELECTRA's README reports
    eval_splits: tuple[str, ...] = ("validation",)
    is_regression: bool = False
    score_range: tuple[float, float] | None = None  # regression targets: GLUE's 0..5
    # Fine-tuning defaults of the original ELECTRA (see the comment above `TaskSpec`).
    num_train_epochs: float = 3.0
    double_unordered: bool = False   # also train on (text_b, text_a)
    weight_decay_rate: float = 0.01
    warmup_proportion: float = 0.1
    train_batch_size: int = 32
    eval_batch_size: int = 32
    max_seq_length: int = 128

    @property
    def num_labels(self) -> int:
        """Outputs of the task's head: one per class, 1 for a regression."""
        return 1 if self.is_regression else len(self.label_names)

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits with labels: train and the evaluation splits."""
        return ("train",) + self.eval_splits


_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    TaskSpec("cola", "glue/cola", ("CoLA", "cola"), ("sentence",), _BINARY,
             ("unacceptable", "acceptable"), ("mcc",), "mcc"),
    TaskSpec("sst2", "glue/sst2", ("SST-2", "sst"), ("sentence",), _BINARY,
             ("negative", "positive"), ("accuracy",), "accuracy"),
    TaskSpec("mrpc", "glue/mrpc", ("MRPC", "mrpc"), ("sentence1", "sentence2"), _BINARY,
             ("not_equivalent", "equivalent"), ("accuracy", "f1"), "accuracy",
             double_unordered=True),
    TaskSpec("stsb", "glue/stsb", ("STS-B", "sts"), ("sentence1", "sentence2"), (), (),
             ("pearson", "spearman"), "spearman", is_regression=True,
             score_range=(0.0, 5.0), num_train_epochs=10.0, double_unordered=True),
    TaskSpec("qqp", "glue/qqp", ("QQP", "qqp"), ("question1", "question2"), _BINARY,
             ("not_duplicate", "duplicate"), ("accuracy", "f1"), "accuracy"),
    TaskSpec("mnli", "glue/mnli", ("MNLI", "mnli"), ("premise", "hypothesis"),
             ("contradiction", "entailment", "neutral"),
             ("contradiction", "entailment", "neutral"), ("accuracy",), "accuracy",
             eval_splits=("validation_matched", "validation_mismatched")),
    TaskSpec("qnli", "glue/qnli", ("QNLI", "qnli"), ("question", "sentence"), _NLI2, _NLI2,
             ("accuracy",), "accuracy"),
    TaskSpec("rte", "glue/rte", ("RTE", "rte"), ("sentence1", "sentence2"), _NLI2, _NLI2,
             ("accuracy",), "accuracy", num_train_epochs=10.0),
)}


def get_task(name: str) -> TaskSpec:
    """The task called `name`; a `GlueDataError` naming the choices otherwise."""
    if name not in TASKS:
        raise GlueDataError(f"unknown GLUE task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]
