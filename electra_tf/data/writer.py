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
import resource
from typing import Callable, Iterable

import tensorflow as tf

from electra_tf import config_check
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
MIN_SEQ_LENGTH = config_check.MIN_SEQ_LENGTH
LINES_PER_BATCH = 2048


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
    num_shards: int = 0


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
                if len(batch) == LINES_PER_BATCH:
                    yield batch
                    batch = []
        except Exception as e:  # pylint: disable=broad-except
            failures.append(e)
            return
        if batch:
            yield batch

    dataset = tf.data.Dataset.from_generator(
        batches, output_signature=tf.TensorSpec([None], tf.string))
    return dataset.map(tokenize_fn(tokenizer), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=True).prefetch(4)


def tokenize_fn(tokenizer):
    """strings [n] → (is_document_end [n], token flat values, row splits [n+1])."""

    @tf.autograph.experimental.do_not_convert  # plain TF: skips a second of conversion
    def tokenize(strings):
        ids = tokenizer.tokenize(strings)  # [n, (wordpieces)] ragged int32
        return tf.equal(strings, ""), ids.flat_values, ids.row_splits

    return tokenize


class _Packer:
    """Feeds tokenized line batches to an `ExampleBuilder`; returns flat example batches."""

    def __init__(self, builder: examples.ExampleBuilder):
        self.builder = builder
        self._previous_end = True
        self.num_documents = self.num_sentences = self.num_tokens = 0

    def pack(self, is_end, flat, splits):
        """(is_end [n], flat ids, row splits [n+1]) → (ids, lengths, num_first) of examples."""
        array = flat.numpy()
        flat = array.tolist()  # one conversion per batch, then list slices
        splits = splits.numpy().tolist()
        ends = is_end.numpy().tolist()
        builder = self.builder
        ids, lengths, firsts = [], [], []
        previous_end = self._previous_end
        for i, end in enumerate(ends):
            if end:
                example = builder.end_document()
            else:
                if previous_end:  # the first sentence of a document seeds its draws
                    builder.start_document(
                        examples.document_key(array[splits[i]:splits[i + 1]]))
                example = builder.add_sentence(flat[splits[i]:splits[i + 1]])
            previous_end = end
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


class Encoder:
    """Tokenized line batches → serialized examples, and what they hold (`counts`).

    The one path from tokens to records, shared by the in-process writer and every
    Apache Beam worker (`data/beam.py`): the same packing, the same serialization.
    """

    def __init__(self, vocab: tokenizer_lib.Vocab, max_seq_length: int, lower_case: bool,
                 seed: int):
        # Before any file is touched: it checks max_seq_length.
        self._packer = _Packer(examples.ExampleBuilder(max_seq_length, vocab.cls_id,
                                                       vocab.sep_id, seed=seed))
        self.tokenizer = tokenizer_lib.make_tokenizer(vocab, lower_case=lower_case)

        @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.int32)] * 3)
        def serialize(input_ids, lengths, num_first):
            return examples.serialize(input_ids, lengths, num_first, max_seq_length,
                                      vocab.pad_id)

        self._serialize = serialize

    def encode(self, is_end, flat, splits):
        """One tokenized batch (see `_tokenized_batches`) → serialized examples [n]."""
        return self._records(self._packer.pack(is_end, flat, splits))

    def finish(self):
        """The last example, at the end of the corpus (or of a Beam element)."""
        return self._records(self._packer.finish())

    def _records(self, packed):
        if not packed[1]:
            return []
        return self._serialize(*(tf.constant(v, tf.int32) for v in packed)).numpy()

    def counts(self) -> dict:
        packer, builder = self._packer, self._packer.builder
        return {"num_documents": packer.num_documents, "num_sentences": packer.num_sentences,
                "num_tokens": packer.num_tokens,
                # Text the original's packing cuts (a segment longer than its share of
                # max_seq_length): left out of every example, counted here.
                "truncated_tokens": builder.truncated_tokens,
                "truncated_examples": builder.truncated_examples}


class ShardFile:
    """One TFRecord shard under a temporary name, with what the manifest lists of it."""

    def __init__(self, tmp_path: str):
        self.tmp_path = tmp_path
        self._writer = tf.io.TFRecordWriter(tmp_path)
        self.num_examples = 0
        self.bytes = 0  # written so far
        self.chunk_offsets = []  # the training order's index (data/order.py)

    def write(self, record: bytes) -> None:
        if self.num_examples % order.CHUNK == 0:
            self.chunk_offsets.append(self.bytes)
        self._writer.write(record)
        self.num_examples += 1
        self.bytes += len(record) + 16  # length, its CRC, the data, its CRC

    def close(self) -> dict:
        self._writer.close()
        size = tf.io.gfile.stat(self.tmp_path).length
        if size != self.bytes:  # the chunk offsets would point inside records
            raise RuntimeError(f"{self.tmp_path}: {size} bytes differ from the records' "
                               f"framing ({self.bytes})")
        return {"tmp": self.tmp_path, "num_examples": self.num_examples, "bytes": size,
                "chunk_offsets": self.chunk_offsets}

    def discard(self) -> None:
        self._writer.close()
        if tf.io.gfile.exists(self.tmp_path):
            tf.io.gfile.remove(self.tmp_path)


def check_output_dir(output_dir: str, overwrite: bool, flag: str = "--output_dir") -> None:
    """Refuses to replace a complete dataset unless `overwrite`."""
    if tf.io.gfile.exists(os.path.join(output_dir, MANIFEST)) and not overwrite:
        raise OutputExistsError(f"{output_dir} already holds a dataset ({MANIFEST}); "
                                f"choose another {flag} or pass --overwrite")


def check_lower_case(vocab: tokenizer_lib.Vocab, lower_case: bool,
                     log: Callable[[str], None]) -> None:
    """Refuses a cased vocab for lower-cased text before anything is written; logs a
    warning for a vocab without capitals and cased text (`tokenizer.check_lower_case`)."""
    warning = tokenizer_lib.check_lower_case(vocab, lower_case)
    if warning:
        log(f"warning: {warning}")


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
    """Writes the pre-training TFRecords for the lines of a corpus, in this process.

    What the corpus is, and what reading it skipped (`source.stats`), go into the
    manifest; progress lines go to `log`, and a doubt about `lower_case`
    (`check_lower_case`).
    """
    if num_shards < 1:
        raise ValueError(f"`num_shards` must be at least 1. Received: `num_shards={num_shards}`")
    check_lower_case(vocab, lower_case, log)
    encoder = Encoder(vocab, max_seq_length, lower_case, seed)
    check_output_dir(output_dir, overwrite)
    tf.io.gfile.makedirs(output_dir)

    shards = []  # opened inside the `try`: a failure removes those opened so far
    progress, read = corpus.progress_of(source, log)
    failures = []  # exceptions raised on tf.data threads, re-raised here
    tokenized = _tokenized_batches(source.lines, encoder.tokenizer, failures)
    num_examples = 0

    def write(records):
        nonlocal num_examples
        for record in records:
            shards[num_examples % num_shards].write(record)
            num_examples += 1

    try:
        for i in range(num_shards):
            shards.append(_open_shard(output_dir, i, num_shards))
        for batch in tokenized:
            write(encoder.encode(*batch))
            # TFDS progress counts documents already; files count MB, plus documents.
            documents = ({} if source.stats.total_documents
                         else {"documents": encoder.counts()["num_documents"]})
            progress.update(read(), **documents, examples=num_examples)
        write(encoder.finish())
        if failures:
            raise failures[0]
        if not num_examples:
            raise EmptyOutputError(f"{source.flag()}: the corpus produced no examples "
                                   f"({source.stats.why_empty()}); nothing was written to "
                                   f"{output_dir}")
        written = [shard.close() for shard in shards]
    except BaseException:
        for shard in shards:
            shard.discard()
        raise
    fields = manifest_fields(encoder.counts(), max_seq_length, seed, vocab, lower_case,
                             source.source, source.stats.as_dict())
    return result_of(commit(output_dir, written, fields), progress.elapsed(), output_dir)


def _open_shard(output_dir: str, i: int, num_shards: int) -> ShardFile:
    """Shard i's `ShardFile`; each is open until the end (examples go round-robin), so
    --num_shards beyond the limit on open files is the user's to change."""
    try:
        return ShardFile(workdir_lib.aside(
            os.path.join(output_dir, SHARD_PATTERN.format(i, num_shards))))
    except tf.errors.ResourceExhaustedError as e:  # "...; Too many open files"
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        raise errors.UserError(
            f"--num_shards={num_shards}: cannot keep that many shard files open "
            f"({e.message.rsplit('; ', 1)[-1]} after {i}); pass fewer, or raise the "
            f"limit on open files (`ulimit -n`, now {limit})") from None


def manifest_fields(counts: dict, max_seq_length: int, seed: int, vocab, lower_case: bool,
                    source: dict, input_stats: dict) -> dict:
    """The manifest but its shard list: what the data holds and how it was made."""
    return {
        "format": MANIFEST_FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **counts,
        "max_seq_length": max_seq_length,
        "seed": seed,
        "vocab": {"file": workdir_lib.absolute(vocab.path), "sha256": vocab.sha256,
                  "size": vocab.size},
        "tokenizer": tokenizer_settings(lower_case),
        "source": source,
        "input": input_stats,
    }


def commit(output_dir: str, shards: list[dict], fields: dict) -> dict:
    """Gives the temporary `shards` (`ShardFile.close()`'s) their final names and writes
    the manifest, last; returns it. A directory with a manifest is a complete one."""
    manifest_path = os.path.join(output_dir, MANIFEST)
    names = [SHARD_PATTERN.format(i, len(shards)) for i in range(len(shards))]
    # Drop the old manifest first, so no reader ever sees it beside new shards.
    old_shards = _listed_shards(manifest_path)
    if old_shards:
        tf.io.gfile.remove(manifest_path)
    for shard, name in zip(shards, names):
        tf.io.gfile.rename(shard["tmp"], os.path.join(output_dir, name), overwrite=True)
    for stale in set(old_shards) - set(names):
        path = os.path.join(output_dir, stale)
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    manifest = {
        **fields,
        "num_examples": sum(shard["num_examples"] for shard in shards),
        # Each shard's size: a reader tells a truncated or overwritten shard by it. Its
        # chunk offsets: where records 0, chunk_records, 2·chunk_records, ... start
        # (data/order.py: a run resumes anywhere without reading what it skips).
        "chunk_records": order.CHUNK,
        "shards": [{"file": name, "num_examples": shard["num_examples"],
                    "bytes": shard["bytes"], "chunk_offsets": shard["chunk_offsets"]}
                   for name, shard in zip(names, shards)],
    }
    # Last, whole or not at all.
    workdir_lib.write_json(output_dir, MANIFEST, manifest)
    return manifest


def result_of(manifest: dict, seconds: float, output_dir: str) -> WriteResult:
    """The summary a tool prints, from a manifest."""
    m = manifest
    return WriteResult(m["num_examples"], m["num_documents"], m["num_sentences"],
                       m["num_tokens"], m["input"]["bytes"], seconds,
                       os.path.join(output_dir, MANIFEST), m["truncated_tokens"],
                       m["truncated_examples"], len(m["shards"]))


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
