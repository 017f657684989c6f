"""Damaged shards: a truncated or corrupted TFRecord is an error naming the file, or,
when asked, is left out and counted; never silently wrong data."""

import os
import shutil

import pytest
import tensorflow as tf

from electra_tf.data import pipeline
from tests import helpers

SEQ = 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("damaged"))
    vocab = helpers.write_vocab(directory)
    return vocab, helpers.make_data(directory, vocab, max_seq_length=SEQ, num_shards=3)


def _copy(directory, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(directory, copy)
    shards = sorted(os.path.join(copy, f) for f in os.listdir(copy) if "tfrecord" in f)
    return copy, shards


def _flip_a_byte(path, offset_fraction=0.5):
    data = bytearray(open(path, "rb").read())
    data[int(len(data) * offset_fraction)] ^= 0xFF
    open(path, "wb").write(bytes(data))


def test_a_truncated_shard_is_refused_by_its_size_naming_the_file(data, tmp_path):
    vocab, directory = data
    copy, shards = _copy(directory, tmp_path)
    with open(shards[1], "r+b") as f:
        f.truncate(os.path.getsize(shards[1]) - 100)
    with pytest.raises(pipeline.DamagedShardError,
                       match=rf"{os.path.basename(shards[1])}: \d+ bytes, but .*manifest.json "
                             r"lists \d+: the shard was truncated") as raised:
        pipeline.resolve_files(copy, SEQ, vocab)
    assert raised.value.file == shards[1]


def test_a_corrupted_record_is_found_and_named(data, tmp_path):
    vocab, directory = data
    copy, shards = _copy(directory, tmp_path)
    _flip_a_byte(shards[2])  # same size: only the record's CRC tells
    files = pipeline.resolve_files(copy, SEQ, vocab)
    config = pipeline.masking_config_for(vocab, SEQ)
    with pytest.raises(tf.errors.DataLossError) as raised:
        for _ in pipeline.pretraining_dataset(files, 4, SEQ, config, is_training=False):
            pass
    error = pipeline.damaged_data_error(files, raised.value)
    assert isinstance(error, pipeline.DamagedShardError) and error.file == shards[2]
    assert str(error).startswith(f"{shards[2]}: unreadable after ")
    assert "corrupted record" in str(error)
    assert [f for f, _ in pipeline.find_damaged(files)] == [shards[2]]


def test_skip_damaged_leaves_them_out_and_counts_them(data, tmp_path):
    vocab, directory = data
    copy, shards = _copy(directory, tmp_path)
    _flip_a_byte(shards[0])
    with open(shards[1], "r+b") as f:
        f.truncate(10)
    messages = []
    files = pipeline.resolve_files(copy, SEQ, vocab, skip_damaged=True, log=messages.append)
    assert files == [shards[2]]
    assert messages[-1] == "skipped 2 damaged shard(s) of 3"
    assert any(shards[0] in m for m in messages) and any(shards[1] in m for m in messages)
    # What is left reads whole.
    config = pipeline.masking_config_for(vocab, SEQ)
    assert sum(1 for _ in pipeline.pretraining_dataset(files, 1, SEQ, config,
                                                       is_training=False)) > 0
    for shard in shards[2:]:
        os.remove(shard)
    with pytest.raises(pipeline.DataError, match="every shard .* is damaged"):
        pipeline.resolve_files(copy, SEQ, vocab, skip_damaged=True, log=messages.append)


def test_the_manifest_records_each_shards_size(data):
    _, directory = data
    manifest = pipeline.load_manifest(directory)
    for shard in manifest["shards"]:
        assert shard["bytes"] == os.path.getsize(os.path.join(directory, shard["file"]))
