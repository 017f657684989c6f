"""Tagging's words → WordPieces → windows of the model's length, and each word's
prediction back.

One implementation for fine-tuning (`finetuning/tagging/task.py` runs it eagerly on the
host, once per run) and the export (`export_tagging.py`, in the serving graph), so that
both read a sentence the same way:

    words [B, (W)] ─► tf.text WordPieces per word (a word with none, e.g. a lone control
       character, reads as [UNK]: every word has a first piece) ─► each sentence's T
       pieces ─► windows [CLS] pieces [SEP] of S = max_seq_length, room = S - 2 pieces,
       starting every `stride` pieces, as many as the sentence needs (the last reaches
       its end: no word is dropped, as the original's truncation drops them)
    ─► `word` [N, S]: at the first piece of each word, in the one window that owns it,
       the word's index in its sentence; -1 elsewhere (the original's rule: a word's
       label sits on its first piece, the other pieces are ignored)

Window w covers pieces [w·stride, w·stride + room) and owns the middle `stride` of them,
[w·stride + c, (w + 1)·stride + c) with c = (room − stride) // 2, the first window also
the pieces before, the last the pieces after: every piece is owned by exactly one window,
which holds it with at least c pieces of context on each side where the sentence has
them. A word is predicted in the window that owns its first piece.

>>> owner(np.arange(10), num_windows=3, room=4, stride=3)  # c = 0
array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
"""

import numpy as np
import tensorflow as tf

from electra_tf import errors
from electra_tf.text import tokenizer as tokenizer_lib


def owner(piece, num_windows, room: int, stride: int):
    """The window that owns piece `piece` of a sentence of `num_windows` windows (numpy
    or tensors, broadcast)."""
    c = (room - stride) // 2
    clip = np.clip if isinstance(piece, np.ndarray) else tf.clip_by_value
    return clip((piece - c) // stride, 0, num_windows - 1)


def check_geometry(max_seq_length: int, stride: int) -> None:
    if not 1 <= stride <= max_seq_length - 2:
        raise errors.UserError(f"config.data.stride={stride}: must be in 1.."
                               f"{max_seq_length - 2} (max_seq_length - 2 pieces per "
                               "window)")


class Windows(tf.Module):
    """Words [B, (W)] → model rows [N, S] and the word at each row position (module
    docstring)."""

    def __init__(self, vocab: tokenizer_lib.Vocab, max_seq_length: int, lower_case: bool,
                 stride: int):
        super().__init__(name="tagging_windows")
        check_geometry(max_seq_length, stride)
        self.tokenizer = tokenizer_lib.make_tokenizer(vocab, lower_case=lower_case)
        self.seq, self.room, self.stride = max_seq_length, max_seq_length - 2, stride
        self.cls_id, self.sep_id = vocab.cls_id, vocab.sep_id
        self.pad_id, self.unk_id = vocab.pad_id, vocab.unk_id

    def pieces(self, words: tf.RaggedTensor) -> tf.RaggedTensor:
        """[B, (W)] strings → [B, (W), (P)] int32 WordPieces, at least one per word."""
        flat = self.tokenizer.tokenize(words.flat_values)                   # [ΣW, (P)]
        n = flat.row_lengths()
        unk = tf.RaggedTensor.from_row_lengths(tf.fill([tf.size(n)], self.unk_id),
                                               tf.ones_like(n))
        padded = tf.concat([flat, unk], axis=1)                             # [ΣW, (P + 1)]
        keep = tf.ragged.range(padded.row_lengths()) < tf.maximum(n, 1)[:, None]
        return words.with_flat_values(tf.ragged.boolean_mask(padded, keep))

    def __call__(self, words: tf.RaggedTensor) -> dict:
        """input_ids, input_mask, segment_ids [N, S] int32; `example` [N] (the row's
        sentence), `word` [N, S] (the word predicted at each position, -1 for none)."""
        pieces = self.pieces(words)                                         # [B, (W), (P)]
        per_word = pieces.row_lengths(axis=2)                               # [B, (W)]
        tokens = pieces.merge_dims(1, 2)                                    # [B, (T)]
        n_tokens = tf.cast(tokens.row_lengths(), tf.int32)                  # [B]
        # The word of each piece, and whether it is the word's first: [B, (T)].
        word_ids = tf.ragged.range(tf.cast(words.row_lengths(), tf.int32))
        piece_word = tf.repeat(word_ids.flat_values, tf.cast(per_word.flat_values, tf.int32))
        piece_word = tokens.with_flat_values(piece_word)
        first = tokens.with_flat_values(tf.cast(
            tf.ragged.range(per_word.flat_values).flat_values == 0, tf.int32))

        num_windows = 1 + tf.maximum(0, -(-(n_tokens - self.room) // self.stride))  # [B]
        example = tf.repeat(tf.range(tf.size(num_windows)), num_windows)    # [N]
        index = tf.ragged.range(num_windows).flat_values                    # [N]
        start = index * self.stride                                         # first piece
        length = tf.minimum(self.room, tf.gather(n_tokens, example) - start)

        position = tf.range(self.seq)[None, :]                              # [1, S]
        col = lambda v: v[:, None]                                          # [N] → [N, 1]
        inside = (position >= 1) & (position <= col(length))
        piece = tf.where(inside, col(start) + position - 1, 0)              # [N, S]
        rows = tf.broadcast_to(col(example), tf.shape(piece))

        def lookup(table: tf.RaggedTensor):  # table[example of the row, piece]: [N, S]
            dense = tf.pad(table.to_tensor(0), [[0, 0], [0, 1]])  # an empty row gathers
            return tf.gather_nd(dense, tf.stack([rows, piece], -1))
        ids = tf.where(position == 0, self.cls_id,
                       tf.where(inside, lookup(tokens),
                                tf.where(position == col(length) + 1, self.sep_id,
                                         self.pad_id)))
        owned = owner(piece, col(tf.gather(num_windows, example)), self.room,
                      self.stride) == col(index)
        predicted = inside & owned & (lookup(first) == 1)
        mask = position <= col(length) + 1
        return {"input_ids": ids, "input_mask": tf.cast(mask, tf.int32),
                "segment_ids": tf.zeros_like(ids),
                "example": example, "word": tf.where(predicted, lookup(piece_word), -1)}


def gather_words(rows: dict, values, num_words):
    """`values` [N, S, ...] at each word's position → [ΣW, ...] in the words' order
    (sentence by sentence); `num_words` [B]. Every word is at exactly one position."""
    word = rows["word"]
    at = tf.where(word >= 0)                                                # [ΣW, 2]
    first_word = tf.cumsum(num_words, exclusive=True)                       # [B]
    flat = tf.gather(first_word, tf.gather(rows["example"], at[:, 0])) + tf.gather_nd(
        word, at)
    picked = tf.gather_nd(values, at)
    return tf.scatter_nd(flat[:, None], picked,
                         tf.concat([[tf.reduce_sum(num_words)], tf.shape(picked)[1:]], 0))
