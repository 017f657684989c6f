"""A fine-tuned SQuAD model as a SavedModel for TF Serving: question and context in,
the answer out. Every step of the fine-tuning's evaluation runs in the graph.

    serving_default  question, context [B] string → answer [B] string (the context's own
                     characters), start, end [B] int32 (its characters [start, end) in the
                     context; -1 if none), score [B] float32 (the span's start + end
                     log-probability), and for SQuAD 2.0 no_answer_score [B] float32

    question, context ─► tf.text tokenization with byte offsets (the training tokenizer)
    ─► windows: [CLS] question (≤ max_query_length tokens) [SEP] context tokens [SEP] of
       max_seq_length, every doc_stride context tokens (`squad.windows.features`' rule),
       as many as each context needs: N windows for the B requests, through the model
       `WINDOWS_PER_CALL` at a time (the end head's memory grows with windows × beam × S)
    ─► the head's beam: top starts [N, K] and, per start, top ends [N, K, K]
    ─► spans in the context, whose start has its most context in this window
       (`squad.windows._max_context`), at most max_answer_length tokens ─► the best over
       the request's windows (`squad.windows.best_answers`) ─► bytes ─► characters, and
       its text

Both inputs are checked in the graph (`export.check_texts`): vectors of one length, else
InvalidArgument naming the input.

No context is truncated: a long one is read in as many windows as it needs. A request
whose context has no valid span (an empty context) answers "" at -1, -1 with score
`NO_SPAN_SCORE` (the lowest float32: JSON has no -inf). SQuAD 2.0: `no_answer_score` is
the lowest "impossible" logit over the windows; above the run's `null_threshold` the
answer is "" at -1, -1 (score still the best span's).

Ops beyond core TF: tf.text's FastBertNormalize and FastWordpieceTokenizeWithOffsets, as
`export.py`: TF Serving >= 2.12.
"""

import keras
import numpy as np
import tensorflow as tf

from electra_tf import errors
from electra_tf.serving import export
from electra_tf.text import tokenizer as tokenizer_lib

NO_SPAN_SCORE = float(np.finfo(np.float32).min)
# Windows per model call: the joint end head holds [windows, beam, S, 512] floats (Base:
# 21 MB per window at S 512, beam 20), so a long context goes through in slices.
WINDOWS_PER_CALL = 8
WARMUP_QUESTIONS = ("What does ELECTRA detect?", "")
WARMUP_CONTEXTS = ("ELECTRA detects replaced tokens.", "")


class Windows(tf.Module):
    """(question, context) strings [B] → windows [N, S] over each context, in the graph."""

    def __init__(self, vocab: tokenizer_lib.Vocab, max_seq_length: int, lower_case: bool,
                 doc_stride: int, max_query_length: int):
        super().__init__(name="qa_windows")
        if max_seq_length - max_query_length - 3 < 1:
            raise errors.UserError(f"max_seq_length={max_seq_length} leaves no context "
                                   f"token after a {max_query_length}-token question")
        self.tokenizer = tokenizer_lib.make_tokenizer(vocab, lower_case=lower_case)
        self.seq, self.stride, self.max_query = max_seq_length, doc_stride, max_query_length
        self.cls_id, self.sep_id, self.pad_id = vocab.cls_id, vocab.sep_id, vocab.pad_id
        # The most windows one context token can be in: windows start every `step` =
        # min(room, stride) tokens and hold `room` <= S - 3 (room >= S - max_query - 3).
        self.overlap = -(-(max_seq_length - 3) // min(max_seq_length - max_query_length - 3,
                                                       doc_stride)) + 1

    def __call__(self, question, context) -> dict:
        """input_ids, input_mask, segment_ids [N, S] int32; per window: `example` [N]
        (its request), `index` [N] (its rank among the request's windows), `start` [N]
        (its first context token), `length` [N] (context tokens), `offset` [N] (the
        row position of its first context token), and its request's `step`, `room`,
        `tokens` and `windows` [N] (window spacing, context tokens per window, context
        tokens, windows); per request: `num_windows` [B], context tokens' byte
        `token_starts`/`token_ends` [B, T + 1] (padded)."""
        query = self.tokenizer.tokenize(question)[:, :self.max_query]      # [B, (Q)]
        tokens, starts, ends = self.tokenizer.tokenize_with_offsets(context)  # [B, (T)]
        n_query = tf.cast(query.row_lengths(), tf.int32)                   # [B]
        n_tokens = tf.cast(tokens.row_lengths(), tf.int32)                 # [B]
        room = self.seq - n_query - 3          # context tokens per window [B], >= 1
        step = tf.minimum(room, self.stride)
        num_windows = 1 + tf.maximum(0, -(-(n_tokens - room) // step))   # ceil, >= 1
        example = tf.repeat(tf.range(tf.size(num_windows)), num_windows)  # [N]
        index = tf.ragged.range(num_windows).flat_values                  # [N]
        start = index * tf.gather(step, example)
        length = tf.minimum(tf.gather(room, example), tf.gather(n_tokens, example) - start)
        offset = tf.gather(n_query, example) + 2                           # [CLS] q [SEP]

        # Dense per-request tables, one padding column so that an empty row still gathers.
        batch = tf.size(n_query)
        query_table = tf.pad(query.to_tensor(self.pad_id, shape=[batch, self.max_query]),
                             [[0, 0], [0, 1]], constant_values=self.pad_id)
        token_table = tf.pad(tokens.to_tensor(self.pad_id), [[0, 0], [0, 1]],
                             constant_values=self.pad_id)                  # [B, T + 1]
        position = tf.range(self.seq)[None, :]                             # [1, S]
        col = lambda v: v[:, None]                                         # [N] → [N, 1]
        in_query = (position >= 1) & (position < col(offset) - 1)
        in_context = (position >= col(offset)) & (position < col(offset + length))
        rows = tf.broadcast_to(col(example), tf.shape(in_query))           # [N, S]

        def lookup(table, columns):  # table[example of the row, column]: [N, S]
            return tf.gather_nd(table, tf.stack([rows, columns], -1))
        query_ids = lookup(query_table, tf.where(in_query, position - 1, 0))
        context_ids = lookup(token_table,
                             tf.where(in_context, col(start) + position - col(offset), 0))
        last = col(offset + length)                                        # the final [SEP]
        ids = tf.where(position == 0, self.cls_id,
                       tf.where(in_query, query_ids,
                                tf.where((position == col(offset) - 1) | (position == last),
                                         self.sep_id,
                                         tf.where(in_context, context_ids, self.pad_id))))
        mask = position <= last
        return {"input_ids": ids, "input_mask": tf.cast(mask, tf.int32),
                "segment_ids": tf.cast(mask & (position >= col(offset)), tf.int32),
                "example": example, "index": index, "start": start, "length": length,
                "offset": offset, "num_windows": num_windows,
                "step": tf.gather(step, example), "room": tf.gather(room, example),
                "tokens": tf.gather(n_tokens, example),
                "windows": tf.gather(num_windows, example),
                "token_starts": tf.pad(starts.to_tensor(), [[0, 0], [0, 1]]),
                "token_ends": tf.pad(ends.to_tensor(), [[0, 0], [0, 1]])}


def run_in_slices(model, rows: dict, size: int = WINDOWS_PER_CALL) -> dict:
    """The model's inference outputs for the [N, S] rows, `size` rows per call (a
    `tf.map_fn` loop): [N, ...] each, as one call would give."""
    n = tf.shape(rows["input_ids"])[0]
    seq = rows["input_ids"].shape[1]
    pad = -n % size   # extra rows of padding (mask 0), dropped after
    inputs = {k: tf.reshape(tf.pad(rows[k], [[0, pad], [0, 0]]), [-1, size, seq])
              for k in ("input_ids", "input_mask", "segment_ids")}
    k = min(model.beam_size, seq)
    signature = {"start_top_log_probs": tf.TensorSpec([size, k], tf.float32),
                 "start_top_index": tf.TensorSpec([size, k], tf.int32),
                 "end_top_log_probs": tf.TensorSpec([size, k, k], tf.float32),
                 "end_top_index": tf.TensorSpec([size, k, k], tf.int32),
                 "answerable_logit": tf.TensorSpec([size], tf.float32)}
    outputs = tf.map_fn(lambda x: model(x, training=False), inputs,
                        fn_output_signature=signature)
    return {name: tf.reshape(v, tf.concat([[-1], tf.shape(v)[2:]], 0))[:n]
            for name, v in outputs.items()}


def best_spans(windows: dict, outputs: dict, context, max_answer_length: int,
               overlap: int) -> dict:
    """The best span of each request over its windows (`squad.windows.best_answers` in
    the graph): answer [B] string, start, end [B] int32 characters, score [B] float32,
    found [B] bool. `windows`: `Windows`' output; `overlap`: its `overlap`."""
    start_index, end_index = outputs["start_top_index"], outputs["end_top_index"]
    k = start_index.shape[1]                                   # the beam, static
    first, offset = windows["start"][:, None], windows["offset"][:, None]
    length = windows["length"][:, None]
    num_windows = windows["num_windows"]                       # [B]

    def in_context(position, rank):  # row positions [N, K(, K)] of context tokens
        shape = [-1] + [1] * (rank - 1)
        return ((position >= tf.reshape(offset, shape)) &
                (position < tf.reshape(offset + length, shape)))

    # A start counts only in the window that gives its token the most context: the
    # windows that can hold context token c (w from c // step down, `overlap` of them)
    # scored as `squad.windows._max_context` does, in integers (100 × the context on the token's
    # shorter side + the window's length; the first window wins a tie): [N, K, overlap].
    def per_row(name):
        return tf.cast(windows[name], tf.int64)[:, None, None]
    token = tf.cast(first + start_index - offset, tf.int64)[:, :, None]   # [N, K, 1]
    w = token // per_row("step") - tf.range(overlap, dtype=tf.int64)
    w_start = w * per_row("step")
    w_length = tf.minimum(per_row("room"), per_row("tokens") - w_start)
    inside = ((w >= 0) & (w < per_row("windows")) & (token >= w_start) &
              (token < w_start + w_length))
    most = 100 * tf.minimum(token - w_start, w_start + w_length - 1 - token) + w_length
    key = tf.where(inside, most * 2**32 - w, -2**62)
    best_window = tf.gather(w, tf.argmax(key, axis=-1), batch_dims=2)      # [N, K]
    valid_start = in_context(start_index, 2) & (
        best_window == tf.cast(windows["index"], tf.int64)[:, None])
    span = end_index - start_index[:, :, None]                            # [N, K, K]
    valid = (valid_start[:, :, None] & in_context(end_index, 3) & (span >= 0) &
             (span < max_answer_length))
    score = outputs["start_top_log_probs"][:, :, None] + outputs["end_top_log_probs"]
    score = tf.where(valid, score, -np.inf)

    # The best of each request's windows × K × K candidates: [B, W · K · K].
    per_request = tf.RaggedTensor.from_row_lengths(
        tf.reshape(score, [-1, k * k]), num_windows).merge_dims(1, 2)
    per_request = per_request.to_tensor(-np.inf)
    best = tf.cast(tf.argmax(per_request, axis=1), tf.int32)              # [B]
    best_score = tf.reduce_max(per_request, axis=1)
    window = tf.cumsum(num_windows, exclusive=True) + best // (k * k)     # [B] row n
    i, j = best % (k * k) // k, best % k
    start_position = tf.gather_nd(start_index, tf.stack([window, i], 1))
    end_position = tf.gather_nd(end_index, tf.stack([window, i, j], 1))
    found = tf.math.is_finite(best_score)   # else the positions point anywhere: token 0
    to_token = tf.gather(windows["start"] - windows["offset"], window)
    byte_start = tf.gather(windows["token_starts"],
                           tf.where(found, start_position + to_token, 0), batch_dims=1)
    byte_end = tf.gather(windows["token_ends"],
                         tf.where(found, end_position + to_token, 0), batch_dims=1)

    # Bytes → characters: the number of the context's characters that start before.
    _, char_starts = tf.strings.unicode_decode_with_offsets(context, "UTF-8",
                                                            errors="replace")
    char_table = char_starts.to_tensor(np.iinfo(np.int64).max)            # [B, C]
    start_char = tf.reduce_sum(tf.cast(char_table < byte_start[:, None], tf.int32), 1)
    end_char = tf.reduce_sum(tf.cast(char_table < byte_end[:, None], tf.int32), 1)
    text = tf.strings.substr(context, tf.where(found, byte_start, 0),
                             tf.where(found, byte_end - byte_start, 0), unit="BYTE")
    return {"answer": text, "start": tf.where(found, start_char, -1),
            "end": tf.where(found, end_char, -1),
            "score": tf.where(found, best_score, NO_SPAN_SCORE), "found": found}


def export_question_answerer(model, vocab: tokenizer_lib.Vocab, output: str, *,
                             max_seq_length: int, lower_case: bool, doc_stride: int,
                             max_query_length: int, max_answer_length: int,
                             null_threshold: float | None = None) -> str:
    """A fine-tuned `finetuning.model.QuestionAnswerer` as a SavedModel (see the module
    docstring); `null_threshold` (SQuAD 2.0) adds `no_answer_score`."""
    export.check_output(output)
    windows = Windows(vocab, max_seq_length, lower_case, doc_stride, max_query_length)

    def answer(question, context):
        question, context = export.check_texts(question=question, context=context)
        rows = windows(question, context)
        outputs = run_in_slices(model, rows)
        spans = best_spans(rows, outputs, context, max_answer_length, windows.overlap)
        result = {k: spans[k] for k in ("answer", "start", "end", "score")}
        if null_threshold is not None:
            no_answer = tf.math.unsorted_segment_min(
                outputs["answerable_logit"], rows["example"], tf.size(question))
            answered = spans["found"] & (no_answer <= null_threshold)
            result.update(answer=tf.where(answered, spans["answer"], ""),
                          start=tf.where(answered, spans["start"], -1),
                          end=tf.where(answered, spans["end"], -1),
                          no_answer_score=no_answer)
        return result

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(windows)
    archive.add_endpoint("serving_default", answer,
                         # Unknown rank, checked in `answer`: see `export._input_specs`.
                         [tf.TensorSpec(None, tf.string, "question"),
                          tf.TensorSpec(None, tf.string, "context")])
    warmup = {"question": np.array(WARMUP_QUESTIONS, object),
              "context": np.array(WARMUP_CONTEXTS, object)}
    return export.write_archive(archive, output, [("serving_default", warmup)])
