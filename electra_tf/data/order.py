"""The training order: which record is at each position of an input pipeline's stream,
computed from (seed, epoch, position), so that a run resumes at any step by reading at
most one chunk and one shuffle block, at step 1,000,000 as at step 10.

    shards ─► chunks of CHUNK consecutive records (byte offsets: the manifest's index)
           ─► this pipeline's chunks (chunk i goes to pipeline i mod P)
           ─► each epoch: its chunks in a permutation seeded by (seed, pipeline, epoch),
              read in that order
           ─► blocks of `block_size` records, each permuted (seeded by its epoch and index)
           ─► [records i mod P, when there are fewer chunks than pipelines]

A sliding shuffle buffer (`Dataset.shuffle`) would make the record at position n depend
on every draw before it: resuming would mean reading every record already trained on.
Here position n of epoch e is found by arithmetic on the chunk sizes: `records(...,
start=n)` starts reading at the chunk that holds the first record of n's block (one
seek, through the TFRecord kernel's byte offsets: `compat.tfrecords_from`), permutes
that block and drops the records before n.

Mixing: each block holds `block_size / CHUNK` chunks drawn from anywhere in the
pipeline's data, itself permuted, so neighbours in a batch come from distant parts of
the corpus (a sliding buffer after a 16-file interleave mixes 16 places at a time).
"""

import dataclasses
import json
import os
import struct

from absl import logging
import numpy as np
import tensorflow as tf

from electra_tf import compat
from electra_tf import errors
from electra_tf import progress as progress_lib

# Records per chunk: the unit of reading and of the epoch's permutation. The writer
# records every shard's byte offset of records 0, CHUNK, 2·CHUNK, ... in its manifest.
CHUNK = 256
# A run's config.json records it: resuming a run begun with another order is said.
VERSION = f"chunks-{CHUNK}"
# Chunks read at a time (in parallel, in order).
_CYCLE = 16


class UnreadableShard(errors.UserError):
    """A shard whose record framing breaks off: the message names it."""

    def __init__(self, message: str, file: str):
        super().__init__(message)
        self.file = file


@dataclasses.dataclass(frozen=True)
class Chunks:
    """Every chunk of a list of shards: its file, byte offset and record count."""
    files: tuple[str, ...]
    file_index: np.ndarray  # [K] int64: which of `files`
    offsets: np.ndarray     # [K] int64: byte offset of the chunk's first record
    counts: np.ndarray      # [K] int64: records in the chunk (CHUNK, fewer at a shard's end)

    def select(self, keep: np.ndarray) -> "Chunks":
        return Chunks(self.files, self.file_index[keep], self.offsets[keep],
                      self.counts[keep])

    @property
    def num_records(self) -> int:
        return int(self.counts.sum())


def chunk_offsets(path: str) -> tuple[list[int], int]:
    """(byte offset of records 0, CHUNK, 2·CHUNK, ..., number of records) of a TFRecord
    file, read off its record headers (a seek per record; no record is read)."""
    offsets, count, position = [], 0, 0
    size = tf.io.gfile.stat(path).length
    with tf.io.gfile.GFile(path, "rb") as f:
        while position < size:
            header = f.read(12)  # uint64 length, uint32 masked CRC of the length
            if len(header) < 12:
                raise UnreadableShard(f"{path}: a record header is cut off at byte "
                                      f"{position}", path)
            if count % CHUNK == 0:
                offsets.append(position)
            length = struct.unpack("<Q", header[:8])[0]
            position += 12 + length + 4  # header, data, uint32 masked CRC of the data
            if position > size:
                raise UnreadableShard(f"{path}: the last record runs past the end of the "
                                      f"file ({position} > {size} bytes)", path)
            f.seek(position)
            count += 1
    return offsets, count


def chunks_of(files: list[str], log=None) -> Chunks:
    """The chunks of `files`: offsets from each directory's manifest (the writer's
    `chunk_offsets` per shard), or read off the record headers of shards it lacks."""
    log = log or logging.info
    listings = {}
    for directory in {os.path.dirname(path) for path in files}:
        listings[directory] = _listed_offsets(directory)
    unlisted = [p for p in files
                if os.path.basename(p) not in listings[os.path.dirname(p)]]
    indexed = {}
    if unlisted:
        # Data from other tools (the original ELECTRA's) or from before the offsets were
        # written: read at every start, as long as reading the headers takes.
        log(f"indexing {len(unlisted)} shard(s) without chunk offsets in a manifest (a "
            "seek per record; data made by create_pretraining_data carries them)")
        progress = progress_lib.Progress(len(unlisted), "shards", log=log)
        for k, path in enumerate(unlisted):
            indexed[path] = chunk_offsets(path)
            progress.update(k + 1)
        progress.update(len(unlisted), force=True)
    file_index, offsets, counts = [], [], []
    for i, path in enumerate(files):
        listed = (listings[os.path.dirname(path)].get(os.path.basename(path))
                  or indexed[path])
        starts, n = listed
        for k, start in enumerate(starts):
            file_index.append(i)
            offsets.append(start)
            counts.append(min(CHUNK, n - k * CHUNK))
    return Chunks(tuple(files), np.array(file_index, np.int64),
                  np.array(offsets, np.int64), np.array(counts, np.int64))


def _listed_offsets(directory: str) -> dict:
    path = os.path.join(directory, "manifest.json")
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        manifest = json.load(f)
    if manifest.get("chunk_records") != CHUNK:
        return {}
    return {s["file"]: (s["chunk_offsets"], s["num_examples"])
            for s in manifest["shards"] if "chunk_offsets" in s}


def records(chunks: Chunks, seed: int | None, block_size: int, num_pipelines: int = 1,
            pipeline_id: int = 0, start: int = 0) -> tf.data.Dataset:
    """This pipeline's endless stream of serialized records, from its position `start`.

    Every pipeline of a run passes the same `chunks`, `seed` and `block_size`. Record n
    of the stream is the same bytes whatever `start` the stream began at. seed=None: an
    order drawn afresh (but one all pipelines agree on where they split one stream).
    """
    if len(chunks.counts) >= num_pipelines:  # each pipeline reads its own chunks
        mine = chunks.select(np.arange(len(chunks.counts)) % num_pipelines == pipeline_id)
        stream, split, position = pipeline_id, 1, start
    else:  # fewer chunks than pipelines: all read the same stream and take every P-th
        mine, stream, split, position = chunks, -1, num_pipelines, start * num_pipelines
        if seed is None:
            seed = 0  # the pipelines must agree on the stream they split
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    dataset = _Epochs(mine, seed, stream, block_size).from_position(position)
    if split > 1:
        dataset = dataset.shard(split, pipeline_id)
    return dataset


class _Epochs:
    """One stream's epochs: the chunk permutation and the block permutations."""

    def __init__(self, chunks: Chunks, seed: int, stream: int, block_size: int):
        if not chunks.num_records:
            raise errors.UserError(f"{', '.join(chunks.files)}: no records to train on")
        self.chunks = chunks
        self.block_size = block_size
        self.base = tf.constant([seed, stream], tf.int64)
        self.files = tf.constant(chunks.files, tf.string)

    def _seed(self, epoch, what, index=0):
        # int64 throughout: fold_in of a Python int and of an int64 tensor differ.
        seed = self.base
        for data in (epoch, what, index):
            seed = tf.random.experimental.stateless_fold_in(
                seed, tf.cast(data, tf.int64), alg="philox")
        return seed

    def _chunk_order(self, epoch):
        return tf.random.experimental.stateless_shuffle(
            tf.range(len(self.chunks.counts), dtype=tf.int64), self._seed(epoch, 0),
            alg="philox")

    def _epoch(self, epoch, first_chunk, skip_records, first_block, skip_in_block):
        order = self._chunk_order(epoch)[first_chunk:]
        chunks = tf.data.Dataset.from_tensor_slices((
            tf.gather(self.files, tf.gather(self.chunks.file_index, order)),
            tf.gather(self.chunks.offsets, order), tf.gather(self.chunks.counts, order)))
        # block_length=CHUNK takes each chunk whole before the next: chunks come out in
        # order, read _CYCLE at a time.
        dataset = chunks.interleave(_read_chunk, cycle_length=_CYCLE, block_length=CHUNK,
                                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        dataset = dataset.skip(skip_records)

        @tf.autograph.experimental.do_not_convert
        def permute(index, block):  # block: [≤ block_size] serialized records
            permutation = tf.random.experimental.stateless_shuffle(
                tf.range(tf.size(block, tf.int64)), self._seed(epoch, 1, index),
                alg="philox")
            return tf.gather(block, permutation)

        dataset = dataset.batch(self.block_size).enumerate(first_block).map(permute)
        return dataset.unbatch().skip(skip_in_block)

    def from_position(self, position: int) -> tf.data.Dataset:
        """The stream from record `position` on (epoch after epoch, without end)."""
        per_epoch = self.chunks.num_records
        epoch, offset = divmod(position, per_epoch)
        block, in_block = divmod(offset, self.block_size)
        # The chunk that holds the block's first record, in this epoch's order (computed
        # eagerly, also where the dataset function is traced).
        with tf.init_scope():
            sizes = self.chunks.counts[self._chunk_order(epoch).numpy()]
        ends = np.cumsum(sizes)
        first_chunk = int(np.searchsorted(ends, block * self.block_size, side="right"))
        skip = block * self.block_size - (int(ends[first_chunk - 1]) if first_chunk else 0)
        first = self._epoch(tf.constant(epoch, tf.int64), first_chunk, skip,
                            tf.constant(block, tf.int64), in_block)
        rest = tf.data.Dataset.range(epoch + 1, 2**62).flat_map(
            tf.autograph.experimental.do_not_convert(
                lambda e: self._epoch(e, 0, 0, tf.constant(0, tf.int64), 0)))
        # Said, since flat_map's cardinality is unknown: tf.distribute gives an endless
        # dataset's batches their static shape on every worker (a finite one may end on
        # one worker first, so multi-worker iterators would make the batch size dynamic).
        return first.concatenate(rest).apply(
            tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))


@tf.autograph.experimental.do_not_convert
def _read_chunk(file, offset, count):
    """The `count` records of `file` from byte `offset` on (one seek; no record before
    it is read). Made only inside `interleave`/`flat_map`, at run time (see
    `compat.tfrecords_from`)."""
    return compat.tfrecords_from(file, offset).take(count)
