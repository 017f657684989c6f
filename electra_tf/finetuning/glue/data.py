"""GLUE's examples: one split of a task (`specs.TASKS`), from either source.

`load` returns the `Examples` of one split, from either source:

* GLUE's own TSV files (`data_dir`: the `glue_data` folder of GLUE's download script,
  or one task's folder in it, such as `glue_data/CoLA`), read by `read_tsv`;
* TFDS `glue/<task>`, already prepared in a local data dir (nothing is downloaded).

Labels are class indices in the order of `TaskSpec.label_names`, or the 0..5 similarity
score for stsb (`label_index`). Test splits (`load_test`, `load_tests`) have no labels,
but each row's GLUE index, for the leaderboard's submission files (`submission_rows`);
MNLI's include GLUE's diagnostic set (AX.tsv), predicted when it is there.

Bad input is reported, never guessed around: a row with missing columns or a label
outside the task's label set raises `GlueDataError` naming `file:line` (1-based, the
header is line 1), or with `on_bad="skip"` is skipped and counted in `Examples.skipped`.
Invalid UTF-8, a wrong header and a file without a single example are always errors;
blank lines are not rows and are passed over. An empty text is a text of no tokens
(GLUE's QQP train.tsv has a few empty question2s, which the original trains on, as
`[CLS] a [SEP]`; here an empty second text is an empty segment, `[CLS] a [SEP] [SEP]`):
kept, and counted in one warning per file.

>>> label_index("mnli", "neutral"), label_index("stsb", "3.8")
(2, 3.8)
>>> split_file("mnli", "validation_mismatched")
'dev_mismatched.tsv'
"""

import csv
import dataclasses
import math
import os

import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf.finetuning import tfds as tfds_lib
from electra_tf.finetuning.glue import specs

# ---------------------------------------------------------------------------- labels


def label_index(task: str, raw: str) -> int | float:
    """A label as written in GLUE's TSVs → class index (float score for stsb).

    Raises `GlueDataError` (without a location; `read_tsv` adds it) for anything else.
    """
    spec = specs.get_task(task)
    value = raw.strip()
    if spec.is_regression:
        try:
            score = float(value)
        except ValueError:
            raise specs.GlueDataError(f"score {_show(raw)} is not a number") from None
        low, high = spec.score_range
        if not (math.isfinite(score) and low <= score <= high):
            raise specs.GlueDataError(f"score {_show(raw)} is outside {low:g}..{high:g}")
        return score
    if value not in spec.label_names:
        raise specs.GlueDataError(f"label {_show(raw)} is not one of "
                                  f"{', '.join(spec.label_names)}")
    return spec.label_names.index(value)


def _show(value: str, limit: int = 40) -> str:
    """A value for a one-line message: quoted, escaped, shortened."""
    return repr(value if len(value) <= limit else value[:limit] + "...")


# ---------------------------------------------------------------------------- examples


@dataclasses.dataclass
class Examples:
    """The examples of one split: texts, labels, and what reading skipped."""

    text_a: list[str]
    text_b: list[str] | None         # None for single-sentence tasks
    labels: np.ndarray               # [n] int32 class index, or float32 score (stsb)
    source: str                      # the file, or "glue/<task>:<split>" for TFDS
    skipped: int = 0                 # bad rows skipped with on_bad="skip"
    first_skipped: str = ""          # "where: problem" of the first one
    ids: list[str] | None = None     # test splits: each row's GLUE index (labels are 0)

    def __len__(self) -> int:
        return len(self.text_a)


class _Collector(errors.BadRows):
    """Accumulates examples; applies `on_bad` to rows that cannot be used."""

    def __init__(self, spec: specs.TaskSpec, source: str, on_bad: str):
        super().__init__(on_bad, specs.GlueDataError)
        self.spec, self.source = spec, source
        self.texts: list[list[str]] = [[] for _ in spec.text_columns]
        self.labels: list = []
        self.empty, self.first_empty = 0, ""

    def add(self, where: str, texts: list[str], label) -> None:
        empty = [c for c, text in zip(self.spec.text_columns, texts) if not text.strip()]
        if empty:
            self.empty += 1
            self.first_empty = self.first_empty or f"{where}: {' and '.join(empty)}"
        for column, text in zip(self.texts, texts):
            column.append(text)
        self.labels.append(label)

    def examples(self) -> Examples:
        if not self.labels:
            note = f" ({self.skipped} bad rows skipped)" if self.skipped else ""
            raise specs.GlueDataError(f"{self.source}: no {self.spec.name} examples{note}")
        if self.empty:
            logging.warning("%s: %d example(s) with an empty text, kept (no tokens); "
                            "first: %s", self.source, self.empty, self.first_empty)
        dtype = np.float32 if self.spec.is_regression else np.int32
        return Examples(text_a=self.texts[0],
                        text_b=self.texts[1] if len(self.texts) > 1 else None,
                        labels=np.asarray(self.labels, dtype), source=self.source,
                        skipped=self.skipped, first_skipped=self.first_skipped)


# ---------------------------------------------------------------------------- GLUE's TSVs


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where a task's texts and label are in its train/dev TSV rows (0-based; -1 = last)."""

    text: tuple[int, ...]
    label: int
    header: dict[int, str] | None   # column → name GLUE's header has there; None: no header


# GLUE's files as its download script writes them (and as the original ELECTRA reads them,
# finetune/classification/classification_tasks.py): CoLA has no header (source, label,
# original mark, sentence); STS-B and MNLI carry extra columns, their label is the last.
_LAYOUTS = {
    "cola": _Layout((3,), 1, None),
    "sst2": _Layout((0,), 1, {0: "sentence", 1: "label"}),
    "mrpc": _Layout((3, 4), 0, {0: "Quality", 3: "#1 String", 4: "#2 String"}),
    "stsb": _Layout((7, 8), -1, {7: "sentence1", 8: "sentence2", -1: "score"}),
    "qqp": _Layout((3, 4), 5, {3: "question1", 4: "question2", 5: "is_duplicate"}),
    "mnli": _Layout((8, 9), -1, {8: "sentence1", 9: "sentence2", -1: "gold_label"}),
    "qnli": _Layout((1, 2), 3, {1: "question", 2: "sentence", 3: "label"}),
    "rte": _Layout((1, 2), 3, {1: "sentence1", 2: "sentence2", 3: "label"}),
}


@dataclasses.dataclass(frozen=True)
class _Test:
    """One unlabelled test split: its file, and the file its predictions go to."""

    file: str                # in the task's folder of GLUE's download
    submission: str          # the file GLUE's leaderboard wants its predictions in
    folder: str = ""         # else in this folder of GLUE's download, beside the task's
    tfds: str = ""           # "<dataset>:<split>" in TFDS; "": the same split of glue/<task>
    optional: bool = False   # absent: no predictions and a warning (`load_tests`)


# The test splits of each task; then the id and the text columns, by header name (GLUE's
# test files all have one; MNLI's has more columns than its dev files). GLUE's diagnostic
# set is predicted by the MNLI model (AX.tsv of a submission): a test split of MNLI's in
# its own folder, glue_data/diagnostic, and TFDS dataset, glue/ax, with MNLI's columns.
_TESTS = {
    "cola": ({"test": _Test("test.tsv", "CoLA.tsv")}, ("index", "sentence")),
    "sst2": ({"test": _Test("test.tsv", "SST-2.tsv")}, ("index", "sentence")),
    "mrpc": ({"test": _Test("test.tsv", "MRPC.tsv")}, ("index", "#1 String", "#2 String")),
    "stsb": ({"test": _Test("test.tsv", "STS-B.tsv")}, ("index", "sentence1", "sentence2")),
    "qqp": ({"test": _Test("test.tsv", "QQP.tsv")}, ("id", "question1", "question2")),
    "mnli": ({"test_matched": _Test("test_matched.tsv", "MNLI-m.tsv"),
              "test_mismatched": _Test("test_mismatched.tsv", "MNLI-mm.tsv"),
              "diagnostic": _Test("diagnostic.tsv", "AX.tsv", folder="diagnostic",
                                  tfds="glue/ax:test", optional=True)},
             ("index", "sentence1", "sentence2")),
    "qnli": ({"test": _Test("test.tsv", "QNLI.tsv")}, ("index", "question", "sentence")),
    "rte": ({"test": _Test("test.tsv", "RTE.tsv")}, ("index", "sentence1", "sentence2")),
}


def test_splits(task: str) -> dict[str, str]:
    """{test split: the leaderboard's file name for its predictions} of `task`."""
    return {split: test.submission
            for split, test in _TESTS[specs.get_task(task).name][0].items()}


_SPLIT_FILES = {"train": "train.tsv", "validation": "dev.tsv",
                "validation_matched": "dev_matched.tsv",
                "validation_mismatched": "dev_mismatched.tsv"}


def _check_split(spec: specs.TaskSpec, split: str) -> None:
    if split not in spec.splits:
        raise specs.GlueDataError(f"{spec.name} has no split {split!r} with labels; "
                                  f"choose one of {', '.join(spec.splits)}")


def split_file(task: str, split: str) -> str:
    """The name of a split's file in GLUE's download (train.tsv, dev.tsv, ...)."""
    spec = specs.get_task(task)
    _check_split(spec, split)
    return _SPLIT_FILES[split]


def _lines(path: str):
    """(line number, text without its line end) of a UTF-8 file; blank lines left out."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:  # gs:// too
            for n, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise specs.GlueDataError(f"{path}:{n}: invalid UTF-8 ({e.reason} at byte "
                                              f"{e.start} of the line)") from None
                if n == 1:
                    line = line.removeprefix("\ufeff")  # a byte-order mark
                line = line.rstrip("\r\n")
                if line.strip(" "):  # a line of tabs is a row (of empty columns)
                    yield n, line
    except (OSError, tf.errors.OpError) as e:
        reason = getattr(e, "strerror", None) or getattr(e, "message", None) or e
        raise specs.GlueDataError(f"{path}: cannot read it: {reason}") from e


def _columns(line: str) -> list[str]:
    # QUOTE_NONE: GLUE's sentences hold unbalanced quotes, which are text, not quoting.
    return next(csv.reader((line,), delimiter="\t", quoting=csv.QUOTE_NONE))


def read_tsv(task: str, path: str, on_bad: str = "error") -> Examples:
    """The examples of one of GLUE's train/dev TSV files for `task`.

    `on_bad="error"` raises `GlueDataError` at the first bad row; `"skip"` skips bad
    rows and counts them. A wrong header, invalid UTF-8 and a file without examples
    are errors either way.
    """
    spec = specs.get_task(task)
    layout = _LAYOUTS[spec.name]
    collector = _Collector(spec, path, on_bad)
    # A row needs every text column, and its label must be a column of its own.
    needed = max(layout.text) + (2 if layout.label < 0 else 1)
    needed = max(needed, layout.label + 1)
    lines = _lines(path)
    if layout.header is not None:
        first = next(lines, None)
        if first is not None:
            _check_header(spec, path, *first, layout.header)
    for n, line in lines:
        where = f"{path}:{n}"
        try:
            row = _columns(line)
        except csv.Error as e:
            collector.bad(where, f"unreadable row ({e})")
            continue
        if len(row) < needed:
            collector.bad(where, f"{len(row)} column(s), {spec.name} rows have at least "
                                 f"{needed}")
            continue
        try:
            label = label_index(spec.name, row[layout.label])
        except specs.GlueDataError as e:
            collector.bad(where, str(e))
            continue
        collector.add(where, [row[i] for i in layout.text], label)
    return collector.examples()


def _check_header(spec: specs.TaskSpec, path: str, n: int, line: str,
                  expected: dict[int, str]) -> None:
    """The first line must be GLUE's header for the task: otherwise the file is another's."""
    try:
        header = _columns(line)
    except csv.Error:
        header = []
    wrong = len(header) <= max(expected) or any(
        header[i].strip() != name for i, name in expected.items())
    if wrong:
        want = ", ".join(f"{name!r} at column {i + 1 if i >= 0 else 'last'}"
                         for i, name in expected.items())
        raise specs.GlueDataError(f"{path}:{n}: not the header of GLUE's {spec.name} files "
                                  f"(expected {want}); found {_show(line, 80)}")


def find_file(task: str, split: str, data_dir: str) -> str:
    """A split's TSV in `data_dir`: GLUE's download folder, or the task's folder in it."""
    spec = specs.get_task(task)
    return _find(spec, split_file(task, split), data_dir)


class _Missing(specs.GlueDataError):
    """Data that is not there: a file, or a TFDS dataset not prepared (for an optional
    test split, no error: `load_tests`)."""


def _find(spec: specs.TaskSpec, name: str, data_dir: str, folder: str = "") -> str:
    """`name` in `data_dir` or in the task's folder in it; with `folder`, in that folder of
    GLUE's download instead, `data_dir` being the download or a task's folder in it."""
    if folder:  # glue_data/diagnostic: in data_dir, or beside it
        folders = [os.path.join(data_dir, folder), os.path.join(_parent(data_dir), folder)]
    else:
        folders = [os.path.join(data_dir, f) for f in spec.data_folders]
    candidates = [os.path.join(data_dir, name)] + [os.path.join(f, name) for f in folders]
    for path in candidates:
        if tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path):
            return path
    if not tf.io.gfile.isdir(data_dir):
        raise _Missing(f"GLUE data dir {data_dir} does not exist")
    raise _Missing(f"no {name} for {spec.name} in {data_dir} (looked for "
                   f"{', '.join(os.path.relpath(p, data_dir) for p in candidates)})")


def _parent(path: str) -> str:
    """The folder that holds the folder `path` (a local path or a URL such as gs://)."""
    if "://" in path:
        return os.path.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(path))


# ---------------------------------------------------------------------------- TFDS


def _tfds_builder(dataset: str, split: str, data_dir: str | None):
    """(builder, "<dataset>:<split>") of a split prepared in `data_dir`; never downloads."""
    builder = tfds_lib.prepared_builder(dataset, data_dir, _Missing, "GLUE's TSV files")
    source = f"{dataset}:{split}"
    if split not in builder.info.splits:
        raise _Missing(f"{source}: no such split in {tfds_lib.where(data_dir)}; "
                       f"it has {', '.join(sorted(builder.info.splits))}")
    return builder, source


def _read_tfds(spec: specs.TaskSpec, split: str, data_dir: str | None, on_bad: str) -> Examples:
    """A split of `glue/<task>` prepared in `data_dir`, read without downloading."""
    builder, source = _tfds_builder(spec.tfds_name, split, data_dir)
    to_index = _tfds_label_map(spec, builder)
    collector = _Collector(spec, source, on_bad)
    dataset = builder.as_dataset(split=split, shuffle_files=False)
    n = 0
    for batch in dataset.batch(4096).as_numpy_iterator():
        for i, label in enumerate(batch["label"]):
            n += 1
            where = f"{source} example {n}"
            try:
                texts = [batch[column][i].decode("utf-8") for column in spec.text_columns]
            except UnicodeDecodeError:
                raise specs.GlueDataError(f"{where}: invalid UTF-8") from None
            if spec.is_regression:
                score = float(label)
                low, high = spec.score_range
                if not (math.isfinite(score) and low <= score <= high):
                    collector.bad(where, f"score {score:g} is outside {low:g}..{high:g}")
                    continue
                collector.add(where, texts, score)
            elif 0 <= label < len(to_index):
                collector.add(where, texts, to_index[label])
            else:  # -1: the test splits' missing labels
                collector.bad(where, f"no label ({label})")
    return collector.examples()


def _tfds_label_map(spec: specs.TaskSpec, builder) -> list[int]:
    """TFDS class id → our class index, matched by name (MNLI's orders differ)."""
    if spec.is_regression:
        return []
    names = list(builder.info.features["label"].names)
    if sorted(names) != sorted(spec.tfds_label_names):
        raise specs.GlueDataError(f"{spec.tfds_name}: its labels {names} are not "
                                  f"{list(spec.tfds_label_names)}")
    return [spec.tfds_label_names.index(name) for name in names]


# ---------------------------------------------------------------------------- test splits


def read_test_tsv(task: str, path: str) -> Examples:
    """One of GLUE's unlabelled test files: every row, its index and its texts (columns
    found by the header's names). A submission needs every row: a bad one is an error."""
    spec = specs.get_task(task)
    wanted = _TESTS[spec.name][1]
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise specs.GlueDataError(f"{path}: no {spec.name} test examples")
    try:
        header = [c.strip() for c in _columns(first[1])]
    except csv.Error:
        header = []
    missing = [name for name in wanted if name not in header]
    if missing:
        raise specs.GlueDataError(f"{path}:{first[0]}: not the header of GLUE's {spec.name} test "
                                  f"file (no {', '.join(map(repr, missing))} column); found "
                                  f"{_show(first[1], 80)}")
    where = [header.index(name) for name in wanted]
    columns: list[list[str]] = [[] for _ in wanted]
    for n, line in lines:
        try:
            row = _columns(line)
        except csv.Error as e:
            raise specs.GlueDataError(f"{path}:{n}: unreadable row ({e})") from None
        if len(row) <= max(where):
            raise specs.GlueDataError(f"{path}:{n}: {len(row)} column(s), {spec.name} test rows "
                                      f"have {len(header)}")
        for column, i in zip(columns, where):
            column.append(row[i])
    if not columns[0]:
        raise specs.GlueDataError(f"{path}: no {spec.name} test examples")
    return Examples(text_a=columns[1], text_b=columns[2] if len(columns) > 2 else None,
                    labels=np.zeros(len(columns[0]), np.float32 if spec.is_regression
                                    else np.int32),
                    source=path, ids=[i.strip() for i in columns[0]])


def _read_tfds_test(spec: specs.TaskSpec, dataset: str, split: str,
                    data_dir: str | None) -> Examples:
    builder, source = _tfds_builder(dataset, split, data_dir)
    ids: list[str] = []
    columns: list[list[str]] = [[] for _ in spec.text_columns]
    for batch in builder.as_dataset(split=split, shuffle_files=False).batch(4096) \
            .as_numpy_iterator():
        ids.extend(str(int(i)) for i in batch["idx"])
        for column, name in zip(columns, spec.text_columns):
            try:
                column.extend(text.decode("utf-8") for text in batch[name])
            except UnicodeDecodeError:
                raise specs.GlueDataError(f"{source}: invalid UTF-8 near example "
                                          f"{len(ids)}") from None
    if not ids:
        raise specs.GlueDataError(f"{source}: no {spec.name} test examples")
    return Examples(text_a=columns[0], text_b=columns[1] if len(columns) > 1 else None,
                    labels=np.zeros(len(ids), np.float32 if spec.is_regression else np.int32),
                    source=source, ids=ids)


def load_test(task: str, split: str, data_dir: str | None = None,
              tfds_data_dir: str | None = None) -> Examples:
    """The unlabelled examples of a test split (`test_splits(task)`), with their ids, from
    GLUE's TSVs in `data_dir` or TFDS (`glue/<task>`, MNLI's diagnostic set `glue/ax`)
    prepared in `tfds_data_dir`."""
    spec = specs.get_task(task)
    tests = _TESTS[spec.name][0]
    if split not in tests:
        raise specs.GlueDataError(f"{spec.name} has no test split {split!r}; choose one of "
                                  f"{', '.join(tests)}")
    test = tests[split]
    if not data_dir:
        dataset, _, tfds_split = (test.tfds or f"{spec.tfds_name}:{split}").partition(":")
        return _read_tfds_test(spec, dataset, tfds_split, tfds_data_dir)
    return read_test_tsv(spec.name, _find(spec, test.file, data_dir, test.folder))


def load_tests(task: str, data_dir: str | None = None,
               tfds_data_dir: str | None = None) -> dict[str, Examples]:
    """{split: examples} of every test split of `task` (`load_test`). An optional split
    that is not there (MNLI's diagnostic set) is left out with a one-line warning saying
    where it was looked for; once there, its bad rows are errors as in any test file."""
    spec = specs.get_task(task)
    tests = {}
    for split, test in _TESTS[spec.name][0].items():
        try:
            tests[split] = load_test(spec.name, split, data_dir, tfds_data_dir)
        except _Missing as e:
            if not test.optional:
                raise
            logging.warning("%s: no %s written (%s test split): %s", spec.name,
                            test.submission, split, e)
    return tests


def submission_rows(task: str, ids: list[str], predictions: np.ndarray) -> list[str]:
    """GLUE's submission format: the header, then `index<TAB>prediction` per example; the
    prediction is the label as GLUE's files write it (0/1, entailment, ...) or the score
    (clipped to the task's range)."""
    spec = specs.get_task(task)
    rows = ["index\tprediction"]
    for index, prediction in zip(ids, predictions):
        if spec.is_regression:
            low, high = spec.score_range
            value = f"{min(max(float(prediction), low), high):.3f}"
        else:
            value = spec.label_names[int(prediction)]
        rows.append(f"{index}\t{value}")
    return rows


# ---------------------------------------------------------------------------- one entry


def load(task: str, split: str, data_dir: str | None = None,
         tfds_data_dir: str | None = None, on_bad: str = "error") -> Examples:
    """The examples of `split` ("train" or one of `TASKS[task].eval_splits`).

    From GLUE's TSVs in `data_dir` when it is given, otherwise from TFDS `glue/<task>`
    prepared in `tfds_data_dir` (TFDS's default dir when None). Never downloads.
    """
    spec = specs.get_task(task)
    _check_split(spec, split)
    if data_dir:
        return read_tsv(spec.name, find_file(spec.name, split, data_dir), on_bad)
    return _read_tfds(spec, split, tfds_data_dir, on_bad)
