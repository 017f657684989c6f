"""Corpus lines → tokenized, packed, serialized examples in TFRecord shards + manifest.

Tokenization is tf.text's `FastBertTokenizer` on batches of lines inside a tf.data
pipeline, so it runs on its own thread while Python packs and serializes the previous
batch. Shards are written under temporary names and renamed, and the manifest is
written last: a directory with a `manifest.json` is a complete one.
"""

import dataclasses
import datetime
import json
import os
from typing import Callable, Iterable

import tensorflow as tf

from electra_tf import errors
from electra_tf import workdir as workdir_lib
from electra_tf.data import examples
from electra_tf.data import order
from electra_tf.text import corpus
from electra_tf.text import tokenizer as tokenizer_lib

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "electra_tf.pretraining_data.v1"
SHARD_PATTERN = "pretrain_data.tfrecord-{:05d}-of-{:05d}"
# One shard per this many bytes of raw text (a shard is then ~100 MB of TFRecords).
BYTES_PER_SHARD = 64 * 2**20
MAX_DEFAULT_SHARDS = 1024
# The shortest example `examples.ExampleBuilder` packs: [CLS] A [SEP] B [SEP], a token each.
MIN_SEQ_LENGTH = 5
_LINES_PER_BATCH = 2048


class OutputExistsError(errors.UserError):
    """The output directory already holds a complete dataset."""


class EmptyOutputError(errors.UserError):
    """The corpus gave no example at all."""


def default_num_shards(input_bytes: int) -> int:
    """Shards sized to the corpus: one per 64 MiB of text, 1 to 1024."""
    return max(1, min(MAX_DEFAULT_SHARDS, -(-input_bytes // BYTES_PER_SHARD)))


@dataclasses.dataclass
class WriteResult:
    num_examples: int
    num_documents: int
    num_sentences: int
    num_tokens: int  # wordpieces kept in examples, without [CLS]/[SEP]
    input_bytes: int
    seconds: float
    manifest_path: str
    truncated_tokens: int = 0  # wordpieces the packing cut (in the manifest too)
    truncated_examples: int = 0


def _tokenized_batches(lines: Iterable[str], tokenizer, failures: list) -> tf.data.Dataset:
    """Batches of lines → (is_document_end [n], token flat values, row splits).

    The lines are read on a tf.data thread, where an exception would reach the caller
    as an anonymous TF error; it is put in `failures` instead, for the caller to raise.
    """

    def batches():
        batch = []
        try:
            for line in lines:
                batch.append(line)
                if len(batch) == _LINES_PER_BATCH:
                    yield batch
                    batch = []
        except Exception as e:  # pylint: disable=broad-except
            failures.append(e)
            return
        if batch:
            yield batch

    @tf.autograph.experimental.do_not_convert  # plain TF: skips a second of conversion
    def tokenize(strings):
        ids = tokenizer.tokenize(strings)  # [n, (wordpieces)] ragged int32
        return tf.equal(strings, ""), ids.flat_values, ids.row_splits

    dataset = tf.data.Dataset.from_generator(
        batches, output_signature=tf.TensorSpec([None], tf.string))
    return dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=True).prefetch(4)


class _Packer:
    """Feeds tokenized line batches to an `ExampleBuilder`; returns flat example batches."""

    def __init__(self, builder: examples.ExampleBuilder):
        self.builder = builder
        self._previous_end = True
        self.num_documents = self.num_sentences = self.num_tokens = 0

    def pack(self, is_end, flat, splits):
        """(is_end [n], flat ids, row splits [n+1]) → (ids, lengths, num_first) of examples."""
        flat = flat.numpy().tolist()  # one conversion per batch, then list slices
        splits = splits.numpy().tolist()
        ends = is_end.numpy().tolist()
        builder = self.builder
        ids, lengths, firsts = [], [], []
        for i, end in enumerate(ends):
            example = (builder.end_document() if end else
                       builder.add_sentence(flat[splits[i]:splits[i + 1]]))
            if example:
                ids += example[0]
                lengths.append(len(example[0]))
                firsts.append(example[1])
        # A document ends at an empty line after a sentence (runs of them are one end).
        self.num_documents += sum(e and not p for e, p in zip(ends, [self._previous_end] + ends))
        self.num_sentences += len(ends) - sum(ends)
        self._previous_end = ends[-1]
        return self._batch(ids, lengths, firsts)

    def finish(self):
        example = self.builder.end_document()
        if not example:
            return self._batch([], [], [])
        return self._batch(example[0], [len(example[0])], [example[1]])

    def _batch(self, ids, lengths, firsts):
        # [CLS] and one [SEP] per segment are not text: segment B exists when len > first.
        self.num_tokens += len(ids) - sum(2 + (n > f) for n, f in zip(lengths, firsts))
        return ids, lengths, firsts


def write_pretraining_data(
    source: corpus.Corpus,
    vocab: tokenizer_lib.Vocab,
    output_dir: str,
    max_seq_length: int = 128,
    num_shards: int = 1,
    lower_case: bool = True,
    seed: int = 0,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> WriteResult:
    """Writes the pre-training TFRecords for the lines of a corpus.

    What the corpus is, and what reading it skipped (`source.stats`), go into the
    manifest; progress lines go to `log`.
    """
    if num_shards < 1:
        raise ValueError(f"`num_shards` must be at least 1. Received: `num_shards={num_shards}`")
    # Before any file is touched: it checks max_seq_length.
    packer = _Packer(examples.ExampleBuilder(max_seq_length, vocab.cls_id, vocab.sep_id,
                                             seed=seed))
    manifest_path = os.path.join(output_dir, MANIFEST)
    if tf.io.gfile.exists(manifest_path) and not overwrite:
        raise OutputExistsError(f"{output_dir} already holds a dataset ({MANIFEST}); "
                                "choose another --output_dir or pass --overwrite")
    tf.io.gfile.makedirs(output_dir)

    names = [SHARD_PATTERN.format(i, num_shards) for i in range(num_shards)]
    tmp_paths = [os.path.join(output_dir, name + ".tmp") for name in names]
    writers = [tf.io.TFRecordWriter(path) for path in tmp_paths]
    counts = [0] * num_shards
    positions = [0] * num_shards  # bytes written to each shard
    chunk_offsets = [[] for _ in range(num_shards)]  # the training order's index
    progress, read = corpus.progress_of(source, log)
    failures = []  # exceptions raised on tf.data threads, re-raised here
    tokenizer = tokenizer_lib.make_tokenizer(vocab, lower_case=lower_case)
    tokenized = _tokenized_batches(source.lines, tokenizer, failures)

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.int32)] * 3)
    def serialize(input_ids, lengths, num_first):
        return examples.serialize(input_ids, lengths, num_first, max_seq_length, vocab.pad_id)

    def write(packed):
        nonlocal num_examples
        if not packed[1]:
            return
        for record in serialize(*(tf.constant(v, tf.int32) for v in packed)).numpy():
            shard = num_examples % num_shards
            if counts[shard] % order.CHUNK == 0:
                chunk_offsets[shard].append(positions[shard])
            writers[shard].write(record)
            counts[shard] += 1
            positions[shard] += len(record) + 16  # length, its CRC, the data, its CRC
            num_examples += 1

    num_examples = 0
    try:
        for batch in tokenized:
            write(packer.pack(*batch))
            # TFDS progress counts documents already; files count MB, plus documents.
            documents = ({} if source.stats.total_documents
                         else {"documents": packer.num_documents})
            progress.update(read(), **documents, examples=num_examples)
        write(packer.finish())
        if failures:
            raise failures[0]
        if not num_examples:
            raise EmptyOutputError(f"{source.flag()}: the corpus produced no examples "
                                   "(is every line empty?); nothing was written to "
                                   f"{output_dir}")
    except BaseException:
        for writer, path in zip(writers, tmp_paths):
            writer.close()
            tf.io.gfile.remove(path)
        raise
    for writer in writers:
        writer.close()
    sizes = [tf.io.gfile.stat(path).length for path in tmp_paths]
    if sizes != positions:  # the chunk offsets would point inside records
        raise RuntimeError(f"{output_dir}: shard sizes {sizes} differ from the records' "
                           f"framing {positions}")

    # Commit: drop the old manifest first, so no reader ever sees it beside new shards.
    old_shards = _listed_shards(manifest_path)
    if old_shards:
        tf.io.gfile.remove(manifest_path)
    for tmp, name in zip(tmp_paths, names):
        tf.io.gfile.rename(tmp, os.path.join(output_dir, name), overwrite=True)
    for stale in set(old_shards) - set(names):
        path = os.path.join(output_dir, stale)
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)

    result = WriteResult(num_examples, packer.num_documents, packer.num_sentences,
                         packer.num_tokens,
                         source.stats.bytes, progress.elapsed(), manifest_path,
                         packer.builder.truncated_tokens, packer.builder.truncated_examples)
    manifest = {
        "format": MANIFEST_FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "num_examples": num_examples,
        "num_documents": packer.num_documents,
        "num_sentences": packer.num_sentences,
        "num_tokens": packer.num_tokens,
        # Text the original's packing cuts (a segment longer than its share of
        # max_seq_length): left out of every example, counted here.
        "truncated_tokens": packer.builder.truncated_tokens,
        "truncated_examples": packer.builder.truncated_examples,
        "max_seq_length": max_seq_length,
        "seed": seed,
        "vocab": {"file": os.path.abspath(vocab.path), "sha256": vocab.sha256,
                  "size": vocab.size},
        "tokenizer": tokenizer_settings(lower_case),
        "source": source.source,
        "input": source.stats.as_dict(),
        # Each shard's size: a reader tells a truncated or overwritten shard by it. Its
        # chunk offsets: where records 0, chunk_records, 2·chunk_records, ... start
        # (data/order.py: a run resumes anywhere without reading what it skips).
        "chunk_records": order.CHUNK,
        "shards": [{"file": name, "num_examples": n, "bytes": size, "chunk_offsets": offsets}
                   for name, n, size, offsets in zip(names, counts, sizes, chunk_offsets)],
    }
    # Last, whole or not at all: a directory with a manifest is a complete one.
    workdir_lib.write_json(os.path.dirname(manifest_path), os.path.basename(manifest_path),
                           manifest)
    return result


def tokenizer_settings(lower_case: bool) -> dict:
    """The tokenization the data was made with; training and serving must match it."""
    return {"type": "FastBertTokenizer", "lower_case_nfd_strip_accents": lower_case,
            "suffix_indicator": "##", "max_bytes_per_word": 100,
            "unknown_token": tokenizer_lib.UNK}


def _listed_shards(manifest_path: str) -> list[str]:
    if not tf.io.gfile.exists(manifest_path):
        return []
    with tf.io.gfile.GFile(manifest_path) as f:
        return [shard["file"] for shard in json.load(f).get("shards", [])]
