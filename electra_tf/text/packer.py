"""Text → model inputs in the graph: what fine-tuning's tf.data and every export run.

`TextPacker.pack` tokenizes with tf.text's `FastBertTokenizer` (the run's vocab and
normalisation, the same ops as `create_pretraining_data`) and packs as pre-training
does: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, segment ids 0 then 1, padded and
truncated to S. A pair is truncated round-robin (one token from each side in turn, as
tf.text's `RoundRobinTrimmer`), computed with core ragged ops: the `RoundRobinTrim` kernel
exists only in TF Serving >= 2.20, and the exports must load in older servers.

>>> import tempfile, os
>>> from electra_tf.text import tokenizer
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w").write("\\n".join(tokenizer.SPECIAL_TOKENS + ["hello", "world"]) + "\\n")
>>> packer = TextPacker(tokenizer.Vocab.load(path), max_seq_length=6, lower_case=True)
>>> ids, mask, segments = packer.pack(tf.constant(["hello world"]), tf.constant(["world"]))
>>> ids.numpy().tolist(), mask.numpy().tolist(), segments.numpy().tolist()
([[2, 5, 6, 3, 6, 3]], [[1, 1, 1, 1, 1, 1]], [[0, 0, 0, 0, 1, 1]])
"""

import os
import tempfile

import tensorflow as tf
import tensorflow_text as text

from electra_tf.text import tokenizer as tokenizer_lib


class TextPacker(tf.Module):
    """Raw text → (input_ids, input_mask, segment_ids) [B, S] int32, in the graph."""

    def __init__(self, vocab: tokenizer_lib.Vocab, max_seq_length: int, lower_case: bool):
        super().__init__(name="text_packer")
        self.max_seq_length = max_seq_length
        self.tokenizer = tokenizer_lib.make_tokenizer(vocab, lower_case=lower_case)
        self.cls_id, self.sep_id, self.pad_id = vocab.cls_id, vocab.sep_id, vocab.pad_id
        # id → WordPiece, read from the vocab file shipped in assets/ when the model loads.
        self.vocab_asset = tf.saved_model.Asset(_clean_vocab_copy(vocab))
        self.id_to_token = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocab_asset, key_dtype=tf.int64,
                key_index=tf.lookup.TextFileIndex.LINE_NUMBER,
                value_dtype=tf.string, value_index=tf.lookup.TextFileIndex.WHOLE_LINE),
            default_value="")

    def pack(self, first, second=None):
        """`first` [B] string, and `second` [B] for pairs → (input_ids, input_mask,
        segment_ids) [B, S] int32."""
        first = self.tokenizer.tokenize(first)
        if second is None:
            segments = [first[:, :self.max_seq_length - 2]]
        else:
            second = self.tokenizer.tokenize(second)
            budget = tf.constant(self.max_seq_length - 3, tf.int64)
            n1, n2 = first.row_lengths(), second.row_lengths()             # int64
            # Round-robin: the shorter side keeps all it has up to half the budget, the
            # longer side takes the rest.
            keep2 = tf.minimum(n2, tf.maximum(budget // 2, budget - n1))
            keep1 = tf.minimum(n1, budget - keep2)
            segments = [_head(first, keep1), _head(second, keep2)]
        ids, segment_ids = text.combine_segments(
            segments, start_of_sequence_id=self.cls_id, end_of_segment_id=self.sep_id)
        ids, mask = text.pad_model_inputs(ids, self.max_seq_length, pad_value=self.pad_id)
        segment_ids, _ = text.pad_model_inputs(segment_ids, self.max_seq_length)
        return (tf.cast(ids, tf.int32), tf.cast(mask, tf.int32),
                tf.cast(segment_ids, tf.int32))

    def wordpiece_strings(self, ids, mask):
        """The WordPiece of each of `ids` [B, S] ("" where `mask` is 0), from the vocab asset."""
        return tf.where(mask > 0, self.id_to_token.lookup(tf.cast(ids, tf.int64)), "")


def _clean_vocab_copy(vocab: tokenizer_lib.Vocab) -> str:
    """The vocab's tokens, one per "\\n"-ended line (no "\\r"), as a temporary vocab.txt."""
    path = os.path.join(tempfile.mkdtemp(prefix="electra_export_"), "vocab.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(token + "\n" for token in vocab.tokens))
    return path


def _head(ragged, keep):
    """The first `keep[i]` items of each row of `ragged`."""
    positions = tf.ragged.range(ragged.row_lengths())
    return tf.ragged.boolean_mask(ragged, positions < tf.expand_dims(keep, 1))
