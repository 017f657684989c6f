"""SQuAD's windows over each context, and answers back from the model's outputs.

    `Question`s (data.py) ─► `features`: [CLS] question [SEP] window of the context
       [SEP], windows every `doc_stride` tokens, tokenized by tf.text with character
       offsets (the tokenizer serving uses), the answer's characters → its tokens in
       each window
    ─► the model: top start positions and, per start, top end positions (`qa_model`)
    ─► `best_answers`: n-best spans per window (inside the context, in the window that
       gives the start its most context, at most `max_answer_length` tokens), the best
       across windows, its text from the context's characters; 2.0's no-answer score

>>> _windows(10, max_tokens=4, stride=3)  # (start, length) over 10 context tokens
[(0, 4), (3, 4), (6, 4)]
"""

import dataclasses

import numpy as np
import tensorflow as tf

from electra_tf.finetuning.squad import data as squad_data
from electra_tf.text import tokenizer as tokenizer_lib


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


def features(questions: list[squad_data.Question], vocab: tokenizer_lib.Vocab,
             lower_case: bool, max_seq_length: int = 512, doc_stride: int = 128,
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
            raise squad_data.SquadDataError(f"max_seq_length={max_seq_length} leaves no room "
                                            f"for the context after a {len(query)}-token "
                                            "question")
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


def best_answers(questions: list[squad_data.Question], feats: Features,
                 outputs: dict[str, np.ndarray], max_answer_length: int = 30) -> list[Answer]:
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
