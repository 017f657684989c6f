"""The pre-training example: one TFRecord schema, and the original's sentence packing.

An example is `[CLS] A [SEP] B [SEP]` padded to `max_seq_length`, stored as three int64
lists of that length. The schema is the original ELECTRA's, so TFRecords written by its
`build_pretraining_dataset.py` read here too, and ours read there. `FEATURES` is the
only description of it: the writer (`serialize`) and the reader (`parse`) both use it.

>>> builder = ExampleBuilder(max_seq_length=8, cls_id=2, sep_id=3, seed=1)
>>> builder.add_sentence([10, 11, 12]) is None  # 3 of 8 tokens: keeps growing
True
>>> builder.add_sentence([13, 14, 15, 16, 17])  # 8 tokens: ([CLS] A [SEP] B [SEP], len(A)+2)
([2, 10, 11, 12, 3, 13, 14, 3], 5)
"""

import random
import zlib

import numpy as np
import tensorflow as tf

from electra_tf import config_check

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")


def features(max_seq_length: int) -> dict[str, tf.io.FixedLenFeature]:
    """The TFRecord schema: each feature an int64 list of `max_seq_length` values."""
    return {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURE_NAMES}


def parse(serialized: tf.Tensor, max_seq_length: int) -> dict[str, tf.Tensor]:
    """Parses a batch of serialized examples (`[batch]` strings) to int32 `[batch, seq]`."""
    parsed = tf.io.parse_example(serialized, features(max_seq_length))
    # int64 is only the storage type; int32 is what TPUs and the embedding lookups want.
    return {name: tf.cast(parsed[name], tf.int32) for name in FEATURE_NAMES}


def _encode(message_type: str, fields: list[str], values: list[tf.Tensor],
            sizes: tf.Tensor) -> tf.Tensor:
    return tf.io.encode_proto(sizes=sizes, values=values, field_names=fields,
                              message_type=message_type)


def serialize(input_ids: tf.Tensor, lengths: tf.Tensor, num_first: tf.Tensor,
              max_seq_length: int, pad_id: int = 0) -> tf.Tensor:
    """Serializes packed examples to `tf.train.Example` strings, all at once.

    Args:
      input_ids: int32 [total], the unpadded ids of all examples, one after another.
      lengths: int32 [n], the number of ids of each example.
      num_first: int32 [n], how many of them are `[CLS] A [SEP]` (segment 0).

    Returns:
      string [n]: Examples with the three `FEATURES`, padded to `max_seq_length`.

    `tf.io.encode_proto` builds the nested messages (Int64List → Feature → map entry →
    Features → Example) for the whole batch in C++, on a tf.data thread: serializing
    in Python, once per example, was the largest cost of creating the data.
    """
    n = tf.shape(lengths)[0]
    positions = tf.range(max_seq_length)[None, :]  # [1, S]
    mask = positions < lengths[:, None]  # [n, S]
    values = {
        "input_ids": tf.RaggedTensor.from_row_lengths(input_ids, lengths).to_tensor(
            default_value=pad_id, shape=[None, max_seq_length]),
        "input_mask": mask,
        "segment_ids": mask & (positions >= num_first[:, None]),
    }
    one = tf.ones([n, 1], tf.int32)
    entries = []
    for name in FEATURE_NAMES:
        int64_list = _encode("tensorflow.Int64List", ["value"],
                             [tf.cast(values[name], tf.int64)],
                             tf.fill([n, 1], max_seq_length))
        feature = _encode("tensorflow.Feature", ["int64_list"], [int64_list[:, None]], one)
        entries.append(_encode("tensorflow.Features.FeatureEntry", ["key", "value"],
                               [tf.fill([n, 1], name), feature[:, None]],
                               tf.ones([n, 2], tf.int32)))
    features_msg = _encode("tensorflow.Features", ["feature"], [tf.stack(entries, axis=1)],
                           tf.fill([n, 1], len(FEATURE_NAMES)))
    return _encode("tensorflow.Example", ["features"], [features_msg[:, None]], one)


def document_key(first_sentence) -> int:
    """A document's 32-bit key for `ExampleBuilder.start_document`: the CRC-32 of its first
    sentence's token ids as int64s (any sequence of integers)."""
    return zlib.crc32(np.asarray(first_sentence, np.int64).tobytes())


class ExampleBuilder:
    """Packs a stream of tokenized sentences into examples, as the original ELECTRA does.

    The rules of `build_pretraining_dataset.py`, with its random draws in the same order:
    * sentences accumulate until their length reaches the target length; the end of a
      document (`end_document`) closes the example early;
    * 10% of examples are one segment; otherwise a sentence goes to segment A while A is
      empty, while it keeps A under `(target - 3) // 2`, or, with probability 1/2, when
      B is still empty and A is under that length; all others go to B;
    * A is cut to `max_seq_length - 2` tokens and B to what is left after `[CLS]`, `[SEP]`
      and `[SEP]`; an empty B is dropped with its `[SEP]`;
    * after each example, and at a document's start (`start_document`), 5% of the time
      the next target length is uniform in [5, max_seq_length] instead of
      `max_seq_length`.

    Calls return the finished example as `(input_ids, num_first)`, where the first
    `num_first` ids are `[CLS] A [SEP]`, or None while an example is still growing.
    Deterministic for a given `seed`; with `start_document` at each document's first
    sentence, each document's examples depend on (seed, that document) alone, not on
    what came before it, so any split of a corpus among processes (`data/beam.py`) packs
    the same examples as one pass over it. What the cuts drop is counted, never silent:
    `truncated_tokens` (tokens of the text left out) in `truncated_examples` examples.
    """

    def __init__(self, max_seq_length: int, cls_id: int, sep_id: int, seed: int = 0,
                 rng: random.Random | None = None):
        if max_seq_length < config_check.MIN_SEQ_LENGTH:
            raise ValueError(f"`max_seq_length` must be at least "
                             f"{config_check.MIN_SEQ_LENGTH}. "
                             f"Received: `max_seq_length={max_seq_length}`")
        self._max_length = max_seq_length
        self._target_length = max_seq_length
        self._cls = [cls_id]
        self._sep = [sep_id]
        self._seed = seed
        self._rng = rng or random.Random(seed)  # `rng` lets tests script the draws
        self._sentences: list[list[int]] = []
        self._length = 0
        self.truncated_tokens = 0
        self.truncated_examples = 0

    def start_document(self, key: int) -> None:
        """Begins a document: its draws come from (seed, `key`), its `document_key`. Its
        first target length is drawn as after an example: in the original it is the one
        the previous document's last example drew, so that one example in 20 of every
        kind (a document's first too) is built to a random target."""
        self._rng.seed((self._seed << 32) | key)
        self._draw_target()

    def _draw_target(self) -> None:
        """The next target length: 5% of the time uniform in [5, max_seq_length]."""
        if self._rng.random() < 0.05:
            self._target_length = self._rng.randint(5, self._max_length)
        else:
            self._target_length = self._max_length

    def add_sentence(self, token_ids: list[int]):
        """Adds one tokenized sentence; returns a finished example or None."""
        self._sentences.append(token_ids)
        self._length += len(token_ids)
        if self._length >= self._target_length:
            return self._finish()
        return None

    def end_document(self):
        """Closes the example being built, if any, at a document boundary."""
        if self._length:
            return self._finish()
        self._sentences = []
        return None

    def _finish(self):
        rng = self._rng
        if rng.random() < 0.1:
            first_target = 100_000  # one segment, as in single-sentence tasks
        else:
            first_target = (self._target_length - 3) // 2  # room for [CLS] and two [SEP]

        first: list[int] = []
        second: list[int] = []
        for sentence in self._sentences:
            # The order of the tests matters: it decides when a random number is drawn.
            if (not first or len(first) + len(sentence) < first_target or
                    (not second and len(first) < first_target and rng.random() < 0.5)):
                first += sentence
            else:
                second += sentence

        kept_first = first[:self._max_length - 2]
        kept_second = second[:max(0, self._max_length - len(kept_first) - 3)]
        cut = len(first) + len(second) - len(kept_first) - len(kept_second)
        self.truncated_tokens += cut
        self.truncated_examples += cut > 0
        first, second = kept_first, kept_second

        self._sentences = []
        self._length = 0
        self._draw_target()

        input_ids = self._cls + first + self._sep
        num_first = len(input_ids)
        if second:
            input_ids += second + self._sep
        return input_ids, num_first
