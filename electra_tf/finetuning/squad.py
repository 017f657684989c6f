"""SQuAD 1.1 and 2.0: questions, their windows over the context, and answers back.

    JSON (train-v1.1.json, dev-v2.0.json, ...) or TFDS squad ─► `Question`s
    ─► `features`: [CLS] question [SEP] window of the context [SEP], windows every
       `doc_stride` tokens, tokenized by tf.text with character offsets (the tokenizer
       serving uses), the answer's characters → its tokens in each window
    ─► the model: top start positions and, per start, top end positions (`qa_model`)
    ─► `best_answers`: n-best spans per window (inside the context, in the window that
       gives the start its most context, at most `max_answer_length` tokens), the best
       across windows, its text from the context's characters; 2.0's no-answer score

Bad input is one line naming the file and the question id: JSON that is not SQuAD's, or
(training split only, as the original's `_add_examples`) a first answer that cannot be
found near its `answer_start` (`locate`: exact, else the same text a few characters
away, else a whitespace/case-insensitive match; with `on_bad="skip"` skipped and counted
in `Questions.skipped`). Dev questions are never dropped for their offsets: the metrics
score answer texts only, and every question counts, as in the official scripts.

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

import numpy as np
import tensorflow as tf

from electra_tf import errors
from electra_tf.text import tokenizer as tokenizer_lib

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


def _check(question: Question, train: bool) -> str | None:
    """The problem with a question, or None. Only training's first answer must be in the
    context (it is the target); the others, and dev answers, are scored as texts."""
    if train and not question.is_impossible and question.answer_chars() is None:
        text, start = question.answers[0], question.answer_starts[0]
        found = question.context[max(0, start):max(0, start) + len(text)]
        return (f"answer {text[:40]!r} is not in the context near answer_start={start} "
                f"(found {found[:40]!r})")
    if not question.question.strip():
        return "empty question"
    return None


class _Collector:
    def __init__(self, source: str, on_bad: str, train: bool):
        if on_bad not in ("error", "skip"):
            raise SquadDataError(f"on_bad must be 'error' or 'skip'; got {on_bad!r}")
        self.questions = Questions([], source)
        self.on_bad = on_bad
        self.train = train

    def add(self, question: Question, where: str):
        problem = _check(question, self.train)
        if problem is None:
            self.questions.items.append(question)
        elif self.on_bad == "error":
            raise SquadDataError(f"{where}: {problem}")
        else:
            self.questions.skipped += 1
            self.questions.first_skipped = self.questions.first_skipped or f"{where}: {problem}"

    def done(self) -> Questions:
        if not self.questions.items:
            raise SquadDataError(f"{self.questions.source}: no questions"
                                 + (f" ({self.questions.skipped} skipped)"
                                    if self.questions.skipped else ""))
        return self.questions


def read_json(path: str, on_bad: str = "error", train: bool = True) -> Questions:
    """The questions of one of SQuAD's JSON files (v1.1 or v2.0); `train`: a training
    split (its first answers must be found in the context, see `locate`)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SquadDataError(f"{path}: cannot read it: {e.strerror or e}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SquadDataError(f"{path}: invalid UTF-8 at byte {e.start}") from None
    except json.JSONDecodeError as e:
        raise SquadDataError(f"{path}:{e.lineno}:{e.colno}: not JSON ({e.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise SquadDataError(f"{path}: not a SQuAD file (no top-level \"data\" list)")
    collector = _Collector(path, on_bad, train)

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
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    name = TFDS_NAMES[version]
    where = data_dir or "TFDS's default data dir"
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        prepared = builder.is_prepared()
    except Exception as e:  # TFDS raises many types for "not there"
        raise SquadDataError(f"{name}: cannot open it in {where}: "
                             f"{(str(e).splitlines() or [type(e).__name__])[0]}") from None
    if not prepared:
        raise SquadDataError(f"{name} is not prepared in {where} (nothing is downloaded here): "
                             "prepare it with TFDS where there is network access, or give "
                             "SQuAD's JSON files with --config.data.dir")
    source = f"{name}:{split}"
    collector = _Collector(source, on_bad, train=split == "train")
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
        if not os.path.isfile(path):
            raise SquadDataError(f"no {name} in {data_dir}")
        return read_json(path, on_bad, train=split == "train")
    return read_tfds(version, split, tfds_data_dir, on_bad)


# ---------------------------------------------------------------------------- features


@dataclasses.dataclass
class Features:
    """The windows of a list of questions, as arrays [N, S] (N windows) and their maps."""

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    start_positions: np.ndarray      # [N] the answer's first token in the window, 0 if none
    end_positions: np.ndarray        # [N] its last token, 0 if none
    is_impossible: np.ndarray        # [N] 1: the question has no answer (the original's
    #                                  answerability target: per question, not per window)
    question_index: np.ndarray       # [N] which question
    # Only for evaluation (`features(..., spans=True)`; empty for training, which never
    # reads them: 8.7 kB a window at S=512, more than its 6.2 kB of model inputs):
    token_chars: list[np.ndarray]    # per window: [S, 2] context characters of each token
    max_context: list[np.ndarray]    # per window: [S] bool, this window is the token's best

    def __len__(self) -> int:
        return len(self.input_ids)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"input_ids": self.input_ids, "input_mask": self.input_mask,
                "segment_ids": self.segment_ids, "start_positions": self.start_positions,
                "end_positions": self.end_positions, "is_impossible": self.is_impossible}


def _tokenize(tokenizer, texts: list[str], chunk: int = 4096):
    """[(ids, char starts, char ends)] per text, from tf.text's offsets (bytes → chars)."""
    out = []
    for i in range(0, len(texts), chunk):
        part = texts[i:i + chunk]
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(part))
        for text, t, s, e in zip(part, ids.to_list(), starts.to_list(), ends.to_list()):
            # byte offset → character offset
            char_of = np.zeros(len(text.encode("utf-8")) + 1, np.int64)
            position = 0
            for c, ch in enumerate(text):
                n = len(ch.encode("utf-8"))
                char_of[position:position + n] = c
                position += n
            char_of[position] = len(text)
            out.append((np.asarray(t, np.int32), char_of[np.asarray(s, np.int64)],
                        char_of[np.asarray(e, np.int64)]))
    return out


def _windows(length: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of the windows over `length` context tokens (the original's rule:
    each starts `stride` after the last, the last reaches the end)."""
    spans, start = [], 0
    while True:
        span = min(length - start, max_tokens)
        spans.append((start, span))
        if start + span >= length:
            return spans
        start += min(span, stride)


def _max_context(spans, index: int, position: int) -> bool:
    """Whether window `index` gives token `position` its most context (min of the tokens
    left and right of it, + 0.01 · window length; the original's tie-break)."""
    best, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best is None or score > best:
            best, best_index = score, i
    return best_index == index


def features(questions: list[Question], vocab: tokenizer_lib.Vocab, lower_case: bool,
             max_seq_length: int = 512, doc_stride: int = 128,
             max_query_length: int = 64, spans: bool = True) -> Features:
    """The windows of `questions` (see the module docstring); `spans`: keep each window's
    `token_chars` and `max_context` (what `best_answers` needs; training does not)."""
    tokenizer = tokenizer_lib.make_tokenizer(vocab, lower_case=lower_case)
    contexts = sorted({q.context for q in questions})
    context_tokens = dict(zip(contexts, _tokenize(tokenizer, contexts)))
    question_tokens = _tokenize(tokenizer, [q.question for q in questions])
    rows = {k: [] for k in ("input_ids", "segment_ids", "start_positions", "end_positions",
                            "is_impossible", "question_index")}
    token_chars, max_context = [], []
    for index, (question, (query, _, _)) in enumerate(zip(questions, question_tokens)):
        query = query[:max_query_length]
        ids, starts, ends = context_tokens[question.context]
        max_tokens = max_seq_length - len(query) - 3
        if max_tokens < 1:
            raise SquadDataError(f"max_seq_length={max_seq_length} leaves no room for the "
                                 f"context after a {len(query)}-token question")
        answer = None
        located = None if question.is_impossible else question.answer_chars()
        if located:  # (a dev answer not found in the context: no target, still scored)
            first, last = located
            inside = np.nonzero((ends > first) & (starts < last))[0]
            if len(inside):  # (a whitespace-only answer has no tokens: no target)
                answer = (int(inside[0]), int(inside[-1]))
        windows = _windows(len(ids), max_tokens, doc_stride)
        offset = len(query) + 2                    # [CLS] question [SEP]
        for w, (start, length) in enumerate(windows):
            window = np.concatenate([[vocab.cls_id], query, [vocab.sep_id],
                                     ids[start:start + length], [vocab.sep_id]])
            segments = np.concatenate([np.zeros(offset, np.int32),
                                       np.ones(length + 1, np.int32)])
            if spans:
                chars = np.full((max_seq_length, 2), -1, np.int64)
                chars[offset:offset + length, 0] = starts[start:start + length]
                chars[offset:offset + length, 1] = ends[start:start + length]
                best = np.zeros(max_seq_length, bool)
                best[offset:offset + length] = [_max_context(windows, w, start + k)
                                                for k in range(length)]
                token_chars.append(chars)
                max_context.append(best)
            if answer and start <= answer[0] and answer[1] < start + length:
                s, e = answer[0] - start + offset, answer[1] - start + offset
            else:  # no answer in this window: [CLS], as the original
                s, e = 0, 0
            impossible = int(question.is_impossible)
            pad = max_seq_length - len(window)
            rows["input_ids"].append(np.pad(window, (0, pad), constant_values=vocab.pad_id))
            rows["segment_ids"].append(np.pad(segments, (0, pad)))
            rows["start_positions"].append(s)
            rows["end_positions"].append(e)
            rows["is_impossible"].append(impossible)
            rows["question_index"].append(index)
    input_ids = np.stack(rows["input_ids"]).astype(np.int32)
    return Features(input_ids=input_ids,
                    input_mask=(np.arange(max_seq_length)[None, :] <
                                (input_ids != vocab.pad_id).sum(1)[:, None]).astype(np.int32),
                    segment_ids=np.stack(rows["segment_ids"]).astype(np.int32),
                    start_positions=np.asarray(rows["start_positions"], np.int32),
                    end_positions=np.asarray(rows["end_positions"], np.int32),
                    is_impossible=np.asarray(rows["is_impossible"], np.int32),
                    question_index=np.asarray(rows["question_index"], np.int32),
                    token_chars=token_chars, max_context=max_context)


# ---------------------------------------------------------------------------- answers


@dataclasses.dataclass
class Answer:
    text: str              # the context's characters [start, end); "" if none is valid
    start: int             # character offsets in the context (-1, -1 if none)
    end: int
    score: float           # start + end log-probability of the span
    null_score: float      # the answerable classifier's "impossible" logit, the lowest
    #                        over the question's windows (as the original); computed for
    #                        1.1 too, but only 2.0's evaluation and export read it


def best_answers(questions: list[Question], feats: Features, outputs: dict[str, np.ndarray],
                 max_answer_length: int = 30) -> list[Answer]:
    """Each question's best span over its windows (see the module docstring).

    outputs: `start_top_log_probs` [N, K], `start_top_index` [N, K], `end_top_log_probs`
    [N, K, K] and `end_top_index` [N, K, K] (per start, its top ends) and
    `answerable_logit` [N], for the N windows of `feats`.
    """
    best: list[Answer] = [Answer("", -1, -1, -np.inf, np.inf) for _ in questions]
    for f in range(len(feats)):
        answer = best[feats.question_index[f]]
        question = questions[feats.question_index[f]]
        answer.null_score = min(answer.null_score, float(outputs["answerable_logit"][f]))
        chars, max_context = feats.token_chars[f], feats.max_context[f]
        for i, start in enumerate(outputs["start_top_index"][f]):
            if chars[start, 0] < 0 or not max_context[start]:
                continue  # in the question, a separator, padding, or better seen elsewhere
            for j, end in enumerate(outputs["end_top_index"][f, i]):
                if chars[end, 0] < 0 or not 0 <= end - start < max_answer_length:
                    continue
                score = float(outputs["start_top_log_probs"][f, i] +
                              outputs["end_top_log_probs"][f, i, j])
                if score > answer.score:
                    answer.start, answer.end = int(chars[start, 0]), int(chars[end, 1])
                    answer.text = question.context[answer.start:answer.end]
                    answer.score = score
    return best
