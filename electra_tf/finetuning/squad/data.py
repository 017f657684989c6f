"""SQuAD 1.1 and 2.0: the questions, from SQuAD's JSON files or TFDS.

    JSON (train-v1.1.json, dev-v2.0.json, ...) or TFDS squad ─► `Question`s (`load`)
    ─► windows over each context, and answers back: `windows.py`

Bad input is one line naming the file and the question id: JSON that is not SQuAD's; a
1.1 question without an answer (`"answers": []` or `is_impossible`: 2.0's kind, which 1.1's
metrics cannot score); and, in a training split only, an empty question or (as the
original's `_add_examples`) a first answer that cannot be found near its `answer_start`
(`locate`: exact, else the same text a few characters away, else a whitespace/case-
insensitive match). With `on_bad="skip"` the bad questions are skipped and counted in
`Questions.skipped`. A dev question is never dropped for its text or offsets: the model
predicts an empty question from the context alone, the metrics score answer texts only,
and every question counts, as in the official scripts.

>>> q = Question("q1", "Where?", "It is in Paris, France.", ["Paris"], [9])
>>> q.answer_chars()
(9, 14)
>>> Question("q2", "Where?", "It is in Paris, France.", ["paris,  france"], [7]).answer_chars()
(9, 22)
"""

import dataclasses
import json
import os
import re

import tensorflow as tf

from electra_tf import errors
from electra_tf.finetuning import tfds as tfds_lib

# Files of each version, as SQuAD's site names them: (train, dev).
FILES = {"squad1": ("train-v1.1.json", "dev-v1.1.json"),
         "squad2": ("train-v2.0.json", "dev-v2.0.json")}
TFDS_NAMES = {"squad1": "squad/v1.1", "squad2": "squad/v2.0"}


class SquadDataError(errors.UserError):
    """SQuAD data that cannot be used: the message names the file and the question."""


@dataclasses.dataclass
class Question:
    qid: str
    question: str
    context: str
    answers: list[str]                 # gold texts (empty: unanswerable, 2.0)
    answer_starts: list[int]           # their character offsets in `context`

    @property
    def is_impossible(self) -> bool:
        return not self.answers

    def answer_chars(self) -> tuple[int, int] | None:
        """[start, end) characters of the first answer (the one training uses), found by
        `locate`; None when it is not in the context."""
        return locate(self.context, self.answers[0], self.answer_starts[0])


# How far from its answer_start an answer's text may be and still be found as its own.
_SLACK = 8


def locate(context: str, text: str, start: int) -> tuple[int, int] | None:
    """[start, end) of `text` in `context` near character `start`: there exactly, else the
    nearest exact occurrence starting within `_SLACK` characters of it, else the nearest
    such match ignoring case and the whitespace between words; None if there is none (the original
    ELECTRA skips such a training answer: "Could not find answer")."""
    if 0 <= start and context[start:start + len(text)] == text and text:
        return start, start + len(text)
    low = max(0, start - _SLACK)
    near = [m.start() + low for m in re.finditer(
        f"(?={re.escape(text)})", context[low:max(0, start) + len(text) + _SLACK])] if text else []
    if near:
        best = min(near, key=lambda c: abs(c - start))
        return best, best + len(text)
    words = text.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(map(re.escape, words)), re.IGNORECASE)
    matches = [m for m in pattern.finditer(context) if abs(m.start() - start) <= _SLACK]
    if not matches:
        return None
    best = min(matches, key=lambda m: abs(m.start() - start))
    return best.start(), best.end()


@dataclasses.dataclass
class Questions:
    items: list[Question]
    source: str
    skipped: int = 0
    first_skipped: str = ""

    def __len__(self) -> int:
        return len(self.items)


def _check(question: Question, train: bool, v2: bool) -> str | None:
    """The problem with a question, or None. Only training's first answer must be in the
    context (it is the target); the others, and dev answers, are scored as texts. Dev
    keeps every question its metrics can score (an empty one is predicted from the
    context alone): the official scripts count them all."""
    if not v2 and question.is_impossible:
        return ("no answer (\"answers\": [] or is_impossible): every SQuAD 1.1 question "
                "has one (unanswerable questions are task squad2's)")
    if not train:
        return None
    if not question.is_impossible and question.answer_chars() is None:
        text, start = question.answers[0], question.answer_starts[0]
        found = question.context[max(0, start):max(0, start) + len(text)]
        return (f"answer {text[:40]!r} is not in the context near answer_start={start} "
                f"(found {found[:40]!r})")
    if not question.question.strip():
        return "empty question"
    return None


class _Collector(errors.BadRows):
    def __init__(self, source: str, on_bad: str, train: bool, v2: bool):
        super().__init__(on_bad, SquadDataError)
        self.questions = Questions([], source)
        self.train, self.v2 = train, v2

    def add(self, question: Question, where: str):
        problem = _check(question, self.train, self.v2)
        if problem is None:
            self.questions.items.append(question)
        else:
            self.bad(where, problem)

    def done(self) -> Questions:
        if not self.questions.items:
            raise SquadDataError(f"{self.questions.source}: no questions"
                                 + (f" ({self.skipped} skipped)" if self.skipped else ""))
        self.questions.skipped = self.skipped
        self.questions.first_skipped = self.first_skipped
        return self.questions


def read_json(path: str, on_bad: str = "error", train: bool = True,
              version: str = "squad2") -> Questions:
    """The questions of one of SQuAD's JSON files of `version` (squad1|squad2); `train`:
    a training split (its first answers must be found in the context, see `locate`)."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:  # gs:// too
            raw = f.read()
    except (OSError, tf.errors.OpError) as e:
        reason = getattr(e, "strerror", None) or getattr(e, "message", None) or e
        raise SquadDataError(f"{path}: cannot read it: {reason}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SquadDataError(f"{path}: invalid UTF-8 at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise SquadDataError(f"{path}:{e.lineno}:{e.colno}: not JSON ({e.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise SquadDataError(f"{path}: not a SQuAD file (no top-level \"data\" list)")
    collector = _Collector(path, on_bad, train, v2=version == "squad2")

    def items(parent, key, where):  # parent[key], a list of objects, or a one-line error
        value = parent.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
            raise SquadDataError(f"{where}: \"{key}\" is not a list of objects")
        return value

    if not all(isinstance(article, dict) for article in data["data"]):
        raise SquadDataError(f"{path}: \"data\" is not a list of objects")
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(items(article, "paragraphs", f"{path}: data[{a}]")):
            where_paragraph = f"{path}: data[{a}].paragraphs[{p}]"
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise SquadDataError(f"{where_paragraph}: no \"context\" string")
            for qa in items(paragraph, "qas", where_paragraph):
                try:
                    qid = str(qa["id"])
                    answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                    question = Question(qid, str(qa["question"]), context,
                                        [str(x["text"]) for x in answers],
                                        [int(x["answer_start"]) for x in answers])
                except (KeyError, TypeError, ValueError) as e:
                    raise SquadDataError(f"{where_paragraph}: question {qa.get('id', '?')!r}: "
                                         f"missing or bad field ({e})") from None
                collector.add(question, f"{path}: question {qid}")
    return collector.done()


def read_tfds(version: str, split: str, data_dir: str | None, on_bad: str = "error"):
    """TFDS `squad/v1.1` or `squad/v2.0` prepared in `data_dir` (never downloaded)."""
    name = TFDS_NAMES[version]
    builder = tfds_lib.prepared_builder(name, data_dir, SquadDataError, "SQuAD's JSON files")
    source = f"{name}:{split}"
    collector = _Collector(source, on_bad, train=split == "train", v2=version == "squad2")
    for row in builder.as_dataset(split=split, shuffle_files=False).as_numpy_iterator():
        texts = [t.decode("utf-8") for t in row["answers"]["text"]]
        starts = [int(s) for s in row["answers"]["answer_start"]]
        if row.get("is_impossible", False):
            texts, starts = [], []
        qid = row["id"].decode("utf-8")
        collector.add(Question(qid, row["question"].decode("utf-8"),
                               row["context"].decode("utf-8"), texts, starts),
                      f"{source}: question {qid}")
    return collector.done()


def load(version: str, split: str, data_dir: str | None = None,
         tfds_data_dir: str | None = None, on_bad: str = "error") -> Questions:
    """split "train" or "validation" of `version` (squad1|squad2), from SQuAD's JSON files
    in `data_dir` when given, else from TFDS prepared in `tfds_data_dir`."""
    if data_dir:
        name = FILES[version][0 if split == "train" else 1]
        path = os.path.join(data_dir, name)
        if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
            raise SquadDataError(f"no {name} in {data_dir}")
        return read_json(path, on_bad, train=split == "train", version=version)
    return read_tfds(version, split, tfds_data_dir, on_bad)

