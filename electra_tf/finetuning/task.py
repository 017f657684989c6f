"""What the fine-tuning loop asks of a task: the base class of the task family.

A task is a `Task` subclass with a `name`, registered in `tasks.TASKS` and made as
`Task(config)` (`tasks.get(name, config)`; config None where only class facts are read:
`configure`, `schedule`, `primary_metric`). It turns its data into `Rows`, builds its
head on the pre-trained encoder, computes its loss, scores the model's outputs and
exports the model for TF Serving. `finetuning/loop.py` knows nothing else about it: the
same strategies, batches, resume, best checkpoint and results for every task. The
members: glue/task.py (eight GLUE tasks), squad/task.py (SQuAD 1.1, 2.0),
tagging/task.py (CoNLL-2003, CoNLL-2000, any CoNLL-format set). A new task is a module
(or a package beside glue/ and squad/) with a subclass, and a line in `tasks.TASKS`:

    class Mine(task.Task):
        name = "mine"                       # config.task, configs/finetune.py's TASK
        eval_splits = ("validation",)
        primary_metric = "accuracy"
        schedule = task.Schedule(epochs=3.0)
        def configure(self, config): ...    # and the other hooks marked R below
        ...

The hooks (R: every member fills it in; the others have the default said):

  R configure(config)             its defaults and its own fields (configs/finetune.py)
    check_config()                one-line errors for its own fields; default: none
  R read(vocab, lower_case)       → Data: train Rows, {dev split: Rows}, {test split: Rows}
  R build_model(encoder)          → keras.Model on {input_ids, input_mask, segment_ids}
  R loss(model, inputs, labels)   → per-row loss [b] (the loop sums and divides by the
                                    global batch)
  R evaluate(split, rows, outputs) → Evaluation: metrics, files for the run dir
    predict_test(split, rows, outputs) → Evaluation: its one file for the run dir, and
                                    metrics where the test file holds the answers;
                                    default: no test predictions (config.predict_test)
  R export(model, vocab, max_seq_length, output, lower_case) → SavedModel path

`outputs` are the model's inference outputs (a tensor or a dict of them) for every row,
as numpy arrays in the rows' order: the loop gathers them from every replica and worker.
"""

import dataclasses
from collections.abc import Callable

import numpy as np


@dataclasses.dataclass
class Rows:
    """One split as the model sees it: host arrays of rows, turned into model inputs in
    tf.data by `prepare` (a batch of `columns` → (inputs dict, labels))."""

    columns: dict[str, np.ndarray]   # {name: [n, ...]}; text as object arrays of str
    prepare: Callable                # {name: [b, ...] tensor} → (inputs, labels)
    summary: str                     # for the log: "192 examples from dev.tsv (0 skipped)"
    payload: object = None           # what `evaluate` needs besides the outputs

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))


@dataclasses.dataclass
class Data:
    train: Rows
    evals: dict[str, Rows]           # the first split selects the best step
    tests: dict[str, Rows]           # unlabelled (config.predict_test)


@dataclasses.dataclass
class Evaluation:
    metrics: dict[str, float]
    files: dict[str, str] = dataclasses.field(default_factory=dict)  # run dir: the
    #                                  best step's predictions (SQuAD's predictions.json)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A task's fine-tuning defaults (the original ELECTRA's, configure_finetuning.py)."""

    epochs: float = 3.0
    max_seq_length: int = 128
    batch_size: int = 32
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01


class Task:
    """One fine-tuning task, made as `Task(config)` from the run's config (None where
    only the class attributes and `configure` are used). A member sets `name`,
    `eval_splits` and `primary_metric` (and `schedule` where the general defaults are
    not its original's) and implements the methods that raise `NotImplementedError`."""

    # Member: the class facts (read before a config exists).
    name: str = ""                     # config.task
    eval_splits: tuple[str, ...] = ()  # the first selects the best step
    primary_metric: str = ""           # of the first eval split: selects the best step
    # Defaults.
    schedule: Schedule = Schedule()    # the original ELECTRA's general fine-tuning defaults
    resume_keys: tuple[str, ...] = ()  # "section.key" a resume must keep (besides the
    #                                    loop's task, batch size, seed, max_seq_length)
    read_keys: tuple[str, ...] = ()    # "section.key" that `read` fills from the data
    #                                    (tagging's entity types): a resume must read the same
    signatures: tuple[str, ...] = ()   # of its SavedModel, for the export tool's message

    def __init__(self, config=None):
        self.config = config

    def configure(self, config) -> None:
        """Member: fills the task's own fields of a fresh config (its defaults,
        commented)."""
        raise NotImplementedError

    def check_config(self) -> None:
        """One-line `errors.UserError`s for the task's own fields that cannot work;
        default: nothing to check."""

    def read(self, vocab, lower_case: bool) -> Data:
        """Member: the run's data; bad input raises `errors.UserError` naming where."""
        raise NotImplementedError

    def build_model(self, encoder):
        """Member: the task's head on `encoder`, seeded by config.train.seed."""
        raise NotImplementedError

    def loss(self, model, inputs, labels):
        """Member: per-row training loss [b] (dropout on)."""
        raise NotImplementedError

    def evaluate(self, split: str, rows: Rows, outputs) -> Evaluation:
        """Member: the metrics of `split` (with `primary_metric`) from the outputs of
        its rows."""
        raise NotImplementedError

    def predict_test(self, split: str, rows: Rows, outputs) -> Evaluation:
        """A test split's predictions, one file in `files` (path in the run dir: text),
        and `metrics` where the test file holds the answers (a tagger's does, GLUE's
        not: {}); default: none."""
        raise NotImplementedError(f"{self.name} has no test predictions")

    def export(self, model, vocab, max_seq_length: int, output: str,
               lower_case: bool) -> str:
        """Member: writes the model as a SavedModel for TF Serving to `output`."""
        raise NotImplementedError
