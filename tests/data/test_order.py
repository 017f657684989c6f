"""The training order (data/order.py): record n of a stream is the same bytes whatever
position the stream started at, at any position, for every pipeline layout."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import order
from electra_tf.data import pipeline
from tests import helpers

SEQ = 16
# Shard sizes that cut chunks short (a shard's last chunk) and blocks across chunks.
SIZES = (700, 300, 1030)
BLOCK = 100


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Three TFRecord files without a manifest; record r of file i reads b"i:r:" + padding."""
    directory = str(tmp_path_factory.mktemp("order"))
    rng = np.random.default_rng(0)
    files = []
    for i, n in enumerate(SIZES):
        path = os.path.join(directory, f"shard-{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for r in range(n):
                writer.write(f"{i}:{r}:".encode() + b"x" * int(rng.integers(0, 40)))
        files.append(path)
    return files


def _take(dataset, n):
    return [x.split(b":x")[0].rstrip(b":").decode() for x in dataset.take(n).as_numpy_iterator()]


def test_chunk_offsets_read_off_the_headers_point_at_records(shards):
    offsets, count = order.chunk_offsets(shards[2])
    assert count == SIZES[2] and len(offsets) == -(-SIZES[2] // order.CHUNK)
    for k, offset in enumerate(offsets):
        reader = tf.data.Dataset.from_tensors(
            (shards[2], tf.constant(offset, tf.int64), tf.constant(1, tf.int64)))
        first = next(iter(reader.flat_map(order._read_chunk)))
        assert first.numpy().startswith(f"2:{k * order.CHUNK}:".encode())


def test_the_writer_records_the_offsets_the_headers_give(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    directory = helpers.make_data(str(tmp_path), vocab, max_seq_length=SEQ, num_shards=2,
                                  num_documents=400)
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["chunk_records"] == order.CHUNK
    for shard in manifest["shards"]:
        assert len(shard["chunk_offsets"]) > 1  # more than one chunk per shard
        path = os.path.join(directory, shard["file"])
        assert order.chunk_offsets(path) == (shard["chunk_offsets"], shard["num_examples"])
    files = pipeline.resolve_files(directory, SEQ, vocab)
    logged = []
    chunks = order.chunks_of(files, log=logged.append)
    assert not logged  # read from the manifest, no file indexed
    assert chunks.num_records == manifest["num_examples"]


def test_a_cut_record_is_an_error_naming_the_file(shards, tmp_path):
    path = str(tmp_path / "cut.tfrecord")
    with open(shards[1], "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:-7])
    with pytest.raises(order.UnreadableShard, match="cut.tfrecord: the last record runs past"):
        order.chunk_offsets(path)


def test_the_stream_is_endless_to_tf_data(shards):
    """Multi-worker iterators keep static batch shapes only for endless datasets."""
    chunks = order.chunks_of(shards, log=lambda _: None)
    for num_pipelines in (1, 12):  # by chunk, by record
        dataset = order.records(chunks, 7, BLOCK, num_pipelines, 0, start=3000)
        assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY


def test_every_epoch_reads_every_record_once(shards):
    chunks = order.chunks_of(shards, log=lambda _: None)
    total = sum(SIZES)
    stream = _take(order.records(chunks, seed=7, block_size=BLOCK), 3 * total)
    everything = sorted(f"{i}:{r}" for i, n in enumerate(SIZES) for r in range(n))
    epochs = [stream[e * total:(e + 1) * total] for e in range(3)]
    for epoch in epochs:
        assert sorted(epoch) == everything
    assert epochs[0] != epochs[1] != epochs[2]  # each epoch has its own order
    assert epochs[0] != _take(order.records(chunks, seed=8, block_size=BLOCK), total)
    # Mixed: a block of several chunks holds records of several shards.
    mixed = _take(order.records(chunks, seed=7, block_size=4 * order.CHUNK), 4 * order.CHUNK)
    assert len({x.split(":")[0] for x in mixed}) == len(SIZES)


# Positions inside a chunk, at a block's start, across a shard's short last chunk, at the
# end and the start of an epoch; blocks smaller than a chunk, and larger but no multiple.
@pytest.mark.parametrize("block", [BLOCK, 300])
def test_a_stream_started_anywhere_continues_the_whole_stream(shards, block):
    chunks = order.chunks_of(shards, log=lambda _: None)
    whole = _take(order.records(chunks, seed=7, block_size=block), 4444 + 100)
    for start in (1, 99, 100, 555, 1999, 2029, 2030, 2031, 4444):
        assert _take(order.records(chunks, 7, block, start=start), 100) == \
            whole[start:start + 100], start


@pytest.mark.parametrize("num_pipelines", [2, 3, 12])  # 10 chunks: by chunk, then by record
def test_each_pipeline_started_anywhere_continues_its_stream(shards, num_pipelines):
    chunks = order.chunks_of(shards, log=lambda _: None)
    by_chunk = num_pipelines <= len(chunks.counts)
    pipelines = range(num_pipelines) if by_chunk else (0, num_pipelines - 1)
    # Each pipeline's epoch: its chunks' records (by chunk), or every P-th record.
    epoch = {p: (int(chunks.counts[p::num_pipelines].sum()) if by_chunk
                 else -(-(chunks.num_records - p) // num_pipelines)) for p in pipelines}
    streams = {p: _take(order.records(chunks, 7, BLOCK, num_pipelines, p), epoch[p] + 80)
               for p in pipelines}
    for p, stream in streams.items():
        for start in (13, epoch[p] - 20, epoch[p] + 10):  # across the epoch's end, after
            assert _take(order.records(chunks, 7, BLOCK, num_pipelines, p, start=start),
                         60) == stream[start:start + 60]
    if by_chunk:  # within an epoch, each pipeline reads its own records, once
        first = [stream[:epoch[p]] for p, stream in streams.items()]
        assert sum(len(set(f)) for f in first) == sum(len(f) for f in first) == sum(SIZES)
        assert len(set().union(*first)) == sum(SIZES)


def test_pipelines_splitting_one_stream_agree_on_it_without_a_seed(shards):
    """Fewer chunks than pipelines: each takes every P-th record of one stream, which
    they must all draw alike, also without a seed: together they read each record once."""
    chunks = order.chunks_of(shards, log=lambda _: None)
    num_pipelines = 12  # > 10 chunks
    per_pipeline = sum(SIZES) // num_pipelines
    taken = [_take(order.records(chunks, None, BLOCK, num_pipelines, p), per_pipeline)
             for p in range(num_pipelines)]
    together = [x for t in taken for x in t]
    assert len(set(together)) == len(together) == per_pipeline * num_pipelines


def test_a_stream_starts_a_trillion_records_in(shards):
    """No record before the start is read (re-reading 10^12 records would not end): a
    stream at 10^12 is made, and is the stream made a few records earlier."""
    chunks = order.chunks_of(shards, log=lambda _: None)
    far = 10**12
    earlier = _take(order.records(chunks, 7, BLOCK, start=far - 5), 105)
    assert _take(order.records(chunks, 7, BLOCK, start=far), 100) == earlier[5:]


def test_masked_batches_at_a_forged_step_continue_the_stream(tmp_path):
    """The pipeline at batch 10^9 (masks included) is the pipeline at 10^9 - 2, two
    batches on."""
    vocab = helpers.write_vocab(str(tmp_path))
    files = pipeline.resolve_files(helpers.make_data(str(tmp_path), vocab, SEQ), SEQ, vocab)
    config = pipeline.masking_config_for(vocab, SEQ)

    def batches(skip, n):
        dataset = pipeline.pretraining_dataset(files, 8, SEQ, config, seed=5,
                                               shuffle_buffer=50, skip_batches=skip)
        return [{k: v.numpy() for k, v in b.items()} for b in dataset.take(n)]

    step = 10**9
    earlier = batches(step - 2, 4)
    for a, b in zip(batches(step, 2), earlier[2:]):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
