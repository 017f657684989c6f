"""A fine-tuned tagger (named entities, chunks) as a SavedModel for TF Serving: raw text
or pre-split words in, entities and tags out. Every step of the fine-tuning's
evaluation runs in the graph.

    serving_default  text [B] string → per entity (padded to the request's most, E):
                       entity_type [B, E] string, entity_start, entity_end [B, E] int32
                       (characters [start, end) of the input, -1 padding), entity_text
                       [B, E] string (the input's own characters), entity_score [B, E]
                       float32 (the mean over its words of the predicted tag's
                       probability), num_entities [B] int32; per word (padded to W):
                       words [B, W] string, tags [B, W] string ("" padding)
    words            words [B, W] string (pre-split, "" pads a row) → tags [B, W] string,
                     tag_score [B, W] float32 (the probability of the label the model
                     chose, also where the entities' tags are rewritten in the data's
                     scheme, e.g. an I- that starts an entity as B-; "" and 0 at padding)

    text ─► words: tf.text's pre-tokens with their byte offsets (whitespace and
       punctuation split, as BERT's basic tokenizer: a word is a piece that is not a
       "##" continuation, with the continuations after it)
    ─► `tagging_windows.Windows` (the fine-tuning's own windows: every word predicted
       once, none dropped) ─► the model ─► each word's label ─► chunks by conlleval's
       rules (as `finetuning.tagging.conll.spans`) ─► tags in the training files'
       scheme; entities' bytes ─► characters

Inputs are checked in the graph as the other exports check them: `text` a vector
(`export.check_texts`), `words` a matrix, else InvalidArgument naming the input.
Ops beyond core TF: tf.text's FastBertNormalize and FastWordpieceTokenizeWithOffsets, as
`export.py`: TF Serving >= 2.12.
"""

import keras
import numpy as np
import tensorflow as tf

from electra_tf.serving import export
from electra_tf.serving import tagging_windows as windows_lib
from electra_tf.text import tokenizer as tokenizer_lib

WARMUP_TEXTS = ("ELECTRA was trained in Mountain View .", "")
WARMUP_WORDS = (("ELECTRA", "was", "trained", "in", "Mountain", "View", "."),
                ("", "", "", "", "", "", ""))
_PREFIX_CODES = {"O": 0, "B": 1, "I": 2, "E": 3, "S": 4}


def split_words(tokenizer, is_continuation, text):
    """text [B] → (words [B, (W)] string, each word's byte start and end [ΣW] int64)."""
    tokens, starts, ends = tokenizer.tokenize_with_offsets(text)             # [B, (T)]
    first = tf.logical_not(tf.gather(is_continuation, tokens.flat_values))  # [ΣT]
    word_of_piece = tf.cumsum(tf.cast(first, tf.int32)) - 1
    num_words = tf.reduce_sum(tokens.with_flat_values(tf.cast(first, tf.int32)), axis=1)
    total = tf.reduce_sum(num_words)
    start = tf.math.unsorted_segment_min(starts.flat_values, word_of_piece, total)
    end = tf.math.unsorted_segment_max(ends.flat_values, word_of_piece, total)
    sentence = tf.repeat(tf.range(tf.size(num_words)), num_words)
    text_of_word = tf.strings.substr(tf.gather(text, sentence), start, end - start,
                                     unit="BYTE")
    words = tf.RaggedTensor.from_row_lengths(text_of_word, tf.cast(num_words, tf.int64))
    return words, start, end


def _shift(values, boundary, fill, forward: bool):
    """values[i - 1] (forward) or values[i + 1], `fill` where `boundary` [ΣW] (a
    sentence's first word, or its last)."""
    pad = tf.fill([1], fill)
    shifted = tf.concat([pad, values[:-1]], 0) if forward else tf.concat([values[1:], pad], 0)
    return tf.where(boundary, fill, shifted)


def chunks(prefix, kind, first_word, last_word) -> dict:
    """conlleval's chunks (`finetuning.tagging.conll.spans`) of flat per-word tags
    [ΣW] (prefix codes of `_PREFIX_CODES`, type ids, 0 for O): `starts` and `ends`
    [ΣW] bool, a chunk's first and last word; sentences' first and last words by
    `first_word`, `last_word`."""
    o, b, i, e, s = (_PREFIX_CODES[p] for p in "OBIES")
    prev_prefix = _shift(prefix, first_word, o, True)
    prev_kind = _shift(kind, first_word, 0, True)
    next_prefix = _shift(prefix, last_word, o, False)
    next_kind = _shift(kind, last_word, 0, False)
    one_of = lambda x, *codes: tf.reduce_any(tf.stack([x == c for c in codes]), 0)
    inside = prefix != o
    starts = inside & (one_of(prefix, b, s) | one_of(prev_prefix, o, e, s) |
                       (prev_kind != kind))
    ends = inside & (one_of(prefix, e, s) | one_of(next_prefix, b, s, o) |
                     (next_kind != kind))
    return {"starts": starts, "ends": ends, "inside": inside,
            "after_end": _shift(ends, first_word, False, True), "prev_kind": prev_kind}


def write_tags(spans: dict, kind, type_names, scheme: str):
    """Per-word tag strings [ΣW] writing `chunks`' spans in `scheme` (as
    `finetuning.tagging.conll.tags`)."""
    if scheme not in ("iob1", "iob2", "bioes"):  # "auto" is resolved when the data is read
        raise ValueError(f"scheme={scheme!r}: not one of iob1, iob2, bioes")
    starts, ends = spans["starts"], spans["ends"]
    if scheme == "bioes":
        prefix = tf.where(starts & ends, "S", tf.where(starts, "B", tf.where(ends, "E", "I")))
    elif scheme == "iob2":
        prefix = tf.where(starts, "B", "I")
    else:  # iob1: B only right after a chunk of the same type
        prefix = tf.where(starts & spans["after_end"] & (spans["prev_kind"] == kind), "B", "I")
    tag = tf.strings.join([prefix, tf.gather(type_names, kind)], "-")
    return tf.where(spans["inside"], tag, "O")


class Tagging(tf.Module):
    """Words [B, (W)] → per word [ΣW], in the graph: its `label` id and its
    probability (`score`), its type id (`kind`), the chunks (`spans`: `chunks`' flags),
    its tag in `scheme` (`tags`) and its request (`sentence`)."""

    def __init__(self, model, vocab: tokenizer_lib.Vocab, max_seq_length: int,
                 lower_case: bool, stride: int, labels: list[str], scheme: str):
        super().__init__(name="tagging")
        self.model = model
        self.windows = windows_lib.Windows(vocab, max_seq_length, lower_case, stride)
        self.is_continuation = tf.constant([t.startswith("##") for t in vocab.tokens])
        parts = [("O", "") if label == "O" else tuple(label.split("-", 1))
                 for label in labels]
        self.type_names = [""] + sorted({kind for _, kind in parts if kind})
        self.prefix_of = tf.constant([_PREFIX_CODES[p] for p, _ in parts], tf.int32)
        self.kind_of = tf.constant([self.type_names.index(k) for _, k in parts], tf.int32)
        self.scheme = scheme

    def __call__(self, words: tf.RaggedTensor) -> dict:
        rows = self.windows(words)
        logits = self.model({k: rows[k] for k in export.ID_INPUTS}, training=False)
        num_words = tf.cast(words.row_lengths(), tf.int32)
        probabilities = windows_lib.gather_words(rows, tf.nn.softmax(logits), num_words)
        label = tf.argmax(probabilities, -1, output_type=tf.int32)           # [ΣW]
        index = tf.ragged.range(num_words).flat_values                       # in sentence
        last = index == tf.repeat(num_words - 1, num_words)
        prefix, kind = tf.gather(self.prefix_of, label), tf.gather(self.kind_of, label)
        spans = chunks(prefix, kind, index == 0, last)
        return {"label": label, "score": tf.reduce_max(probabilities, -1),
                "kind": kind, "spans": spans,
                "tags": write_tags(spans, kind, tf.constant(self.type_names), self.scheme),
                "sentence": tf.repeat(tf.range(tf.size(num_words)), num_words)}


def to_chars(text, sentence, byte_offsets):
    """Byte offsets [N] into text[sentence] → character offsets (the characters starting
    before), int32: one binary search in every text's character starts laid end to end
    (each text's from the bytes of those before it), so memory grows with the texts plus
    the offsets, not with their product (one long text with many entities)."""
    _, char_starts = tf.strings.unicode_decode_with_offsets(text, "UTF-8", errors="replace")
    base = tf.cumsum(tf.cast(tf.strings.length(text, unit="BYTE"), tf.int64),
                     exclusive=True)                                            # [B]
    starts = char_starts.flat_values + tf.gather(base, char_starts.value_rowids())  # rising
    at = tf.searchsorted(starts, tf.gather(base, sentence) + byte_offsets, side="left",
                         out_type=tf.int64)
    return tf.cast(at - tf.gather(char_starts.row_splits, sentence), tf.int32)


def _check_words(words):
    """`words`, checked in the graph: a matrix of strings (else InvalidArgument)."""
    check = tf.debugging.Assert(tf.equal(tf.rank(words), 2), [tf.strings.format(
        "words must be a matrix of strings, shape [batch, words] (\"\" pads a row); got "
        "shape {}", tf.shape(words))])
    with tf.control_dependencies([check]):
        words = tf.identity(words)
    words.set_shape([None, None])
    return words


def export_tagger(model, vocab: tokenizer_lib.Vocab, output: str, *, max_seq_length: int,
                  lower_case: bool, stride: int, labels: list[str], scheme: str) -> str:
    """A fine-tuned `tagging.model.Tagger` (classes `labels`) as a SavedModel (module
    docstring); tags are written in `scheme`."""
    export.check_output(output)
    tagging = Tagging(model, vocab, max_seq_length, lower_case, stride, labels, scheme)

    def from_text(text):
        (text,) = export.check_texts(text=text)
        words, byte_start, byte_end = split_words(tagging.windows.tokenizer,
                                                  tagging.is_continuation, text)
        out = tagging(words)
        first, last = (tf.where(out["spans"][k])[:, 0] for k in ("starts", "ends"))
        sentence = tf.gather(out["sentence"], first)                          # [ΣE]
        start, end = tf.gather(byte_start, first), tf.gather(byte_end, last)
        total = tf.concat([[0.0], tf.cumsum(out["score"])], 0)
        score = ((tf.gather(total, last + 1) - tf.gather(total, first)) /
                 tf.cast(last - first + 1, tf.float32))
        batch = tf.size(text)

        def per_request(values, fill):
            return tf.RaggedTensor.from_value_rowids(values, sentence, batch).to_tensor(fill)
        return {
            "entity_type": per_request(tf.gather(tf.constant(tagging.type_names),
                                                 tf.gather(out["kind"], first)), ""),
            "entity_start": per_request(to_chars(text, sentence, start), -1),
            "entity_end": per_request(to_chars(text, sentence, end), -1),
            "entity_text": per_request(tf.strings.substr(tf.gather(text, sentence), start,
                                                         end - start, unit="BYTE"), ""),
            "entity_score": per_request(score, 0.0),
            "num_entities": tf.math.bincount(tf.cast(sentence, tf.int32), minlength=batch,
                                             maxlength=batch, dtype=tf.int32),
            "words": words.to_tensor(""),
            "tags": words.with_flat_values(out["tags"]).to_tensor(""),
        }

    def from_words(words):
        words = _check_words(words)
        present = tf.not_equal(words, "")
        out = tagging(tf.ragged.boolean_mask(words, present))
        at = tf.where(present)
        return {"tags": tf.tensor_scatter_nd_update(tf.fill(tf.shape(words), ""), at,
                                                    out["tags"]),
                "tag_score": tf.tensor_scatter_nd_update(
                    tf.zeros(tf.shape(words), tf.float32), at, out["score"])}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(tagging)
    # Unknown rank, checked in the functions: see `export._input_specs`.
    archive.add_endpoint("serving_default", from_text, [tf.TensorSpec(None, tf.string, "text")])
    archive.add_endpoint("words", from_words, [tf.TensorSpec(None, tf.string, "words")])
    warmup = [("serving_default", {"text": np.array(WARMUP_TEXTS, object)}),
              ("words", {"words": np.array(WARMUP_WORDS, object)})]
    return export.write_archive(archive, output, warmup)
