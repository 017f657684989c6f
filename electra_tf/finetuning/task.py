"""What the fine-tuning loop asks of a task: the interface of the task family.

A task (`tasks.get(name, config)`: a GLUE task in `glue/task.py`, SQuAD in
`squad/task.py`) turns its data into `Rows`, builds its head on the pre-trained encoder,
computes its loss, scores the model's outputs and exports the model for TF Serving.
`finetuning/loop.py` knows nothing else about it: the same strategies, batches, resume,
best checkpoint and results for every task. A new task family (NER, say) is a new
package beside glue/ and squad/ with a `Task` subclass, and a line in `tasks.TASKS`.

    configure(config)             its defaults and its own fields (configs/finetune.py)
    check_config()                one-line errors for its own fields
    read(vocab, lower_case)       → Data: train Rows, {dev split: Rows}, {test split: Rows}
    build_model(encoder)          → keras.Model on {input_ids, input_mask, segment_ids}
    loss(model, inputs, labels)   → per-row loss [b] (the loop sums and divides by the
                                    global batch)
    evaluate(split, rows, outputs) → Evaluation: metrics, files for the run dir
    predict_test(split, rows, outputs) → (file in the run dir, its text)
    export(model, vocab, max_seq_length, output, lower_case) → SavedModel path

`outputs` are the model's inference outputs (a tensor or a dict of them) for every row,
as numpy arrays in the rows' order: the loop gathers them from every replica and worker.
"""

import abc
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


class Task(abc.ABC):
    """One fine-tuning task; `config` is the run's (None where only `configure` is used)."""

    name: str
    eval_splits: tuple[str, ...]
    primary_metric: str              # of the first eval split: selects the best step
    schedule: Schedule
    resume_keys: tuple[str, ...] = ()  # "section.key" a resume must keep (besides the
    #                                    loop's task, batch size, seed, max_seq_length)
    read_keys: tuple[str, ...] = ()    # "section.key" that `read` fills from the data
    #                                    (tagging's entity types): a resume must read the same
    signatures: tuple[str, ...] = ()   # of its SavedModel, for the export tool's message

    def __init__(self, config=None):
        self.config = config

    @abc.abstractmethod
    def configure(self, config) -> None:
        """Fills the task's own fields of a fresh config (its defaults, commented)."""

    def check_config(self) -> None:
        """One-line `errors.UserError`s for the task's own fields that cannot work."""

    @abc.abstractmethod
    def read(self, vocab, lower_case: bool) -> Data:
        """The run's data; bad input raises `errors.UserError` naming where."""

    @abc.abstractmethod
    def build_model(self, encoder):
        """The task's head on `encoder`, seeded by config.train.seed."""

    @abc.abstractmethod
    def loss(self, model, inputs, labels):
        """Per-row training loss [b] (dropout on)."""

    @abc.abstractmethod
    def evaluate(self, split: str, rows: Rows, outputs) -> Evaluation:
        """The metrics of `split` (with `primary_metric`) from the outputs of its rows."""

    def predict_test(self, split: str, rows: Rows, outputs) -> tuple[str, str]:
        """(path in the run dir, text) of a test split's predictions."""
        raise NotImplementedError(f"{self.name} has no test predictions")

    @abc.abstractmethod
    def export(self, model, vocab, max_seq_length: int, output: str,
               lower_case: bool) -> str:
        """Writes the model as a SavedModel for TF Serving to `output`."""
