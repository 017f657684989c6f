"""TFRecords → masked batches: manifest checks, sharding, static shapes."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import pipeline
from tests import helpers

SEQ = 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("pipeline"))
    vocab = helpers.write_vocab(directory)
    return vocab, helpers.make_data(directory, vocab, max_seq_length=SEQ, num_shards=3)


def test_directory_manifest_and_glob_resolve_to_the_listed_shards(data):
    vocab, directory = data
    by_dir = pipeline.resolve_files(directory, SEQ, vocab)
    assert len(by_dir) == 3
    assert pipeline.resolve_files(os.path.join(directory, "manifest.json"), SEQ, vocab) == by_dir
    assert pipeline.resolve_files(os.path.join(directory, "pretrain_data*"), SEQ, vocab) == by_dir


def test_manifest_mismatches_name_file_and_field(data, tmp_path):
    vocab, directory = data
    with pytest.raises(pipeline.DataError, match=r"manifest.json: max_seq_length is 32 .*=64"):
        pipeline.resolve_files(directory, 64, vocab)
    other = helpers.write_vocab(str(tmp_path), words=["other", "words"])
    with pytest.raises(pipeline.DataError, match=r"manifest.json: vocab.sha256 .*another vocab"):
        pipeline.resolve_files(directory, SEQ, other)
    with pytest.raises(pipeline.DataError, match="no file matches"):
        pipeline.resolve_files(os.path.join(directory, "nothing*"), SEQ, vocab)
    with pytest.raises(pipeline.DataError, match="no manifest.json"):
        pipeline.resolve_files(str(tmp_path), SEQ, vocab)


def test_a_file_not_in_the_manifest_is_refused(data, tmp_path):
    vocab, directory = data
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(directory):
        (copy / name).write_bytes(open(os.path.join(directory, name), "rb").read())
    (copy / "pretrain_data.tfrecord-00009-of-00010").write_bytes(b"")
    with pytest.raises(pipeline.DataError, match="00009-of-00010: not listed in"):
        pipeline.resolve_files(str(copy / "pretrain_data*"), SEQ, vocab)


def test_shards_without_manifest_are_read_as_they_are(data, tmp_path):
    vocab, directory = data
    shard = sorted(f for f in os.listdir(directory) if f.startswith("pretrain"))[0]
    (tmp_path / shard).write_bytes(open(os.path.join(directory, shard), "rb").read())
    assert pipeline.resolve_files(str(tmp_path / "pretrain*"), SEQ, vocab) == [
        str(tmp_path / shard)]


def test_training_batches_are_static_masked_and_repeat(data):
    vocab, directory = data
    files = pipeline.resolve_files(directory, SEQ, vocab)
    config = pipeline.masking_config_for(vocab, SEQ)
    dataset = pipeline.pretraining_dataset(files, 8, SEQ, config, seed=1)
    expected = {"input_ids", "input_mask", "segment_ids", "masked_input_ids",
                "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"}
    assert set(dataset.element_spec) == expected
    for name, spec in dataset.element_spec.items():
        assert spec.shape.as_list()[0] == 8 and spec.shape.is_fully_defined(), name
    manifest = json.load(open(os.path.join(directory, "manifest.json")))
    batches = list(dataset.take(manifest["num_examples"] // 8 + 5))  # more than one epoch
    ids = np.concatenate([b["input_ids"].numpy() for b in batches])
    assert np.all(ids[:, 0] == vocab.cls_id)
    assert all(b["masked_lm_weights"].numpy().sum() > 0 for b in batches)


def test_evaluation_reads_each_example_once(data):
    vocab, directory = data
    files = pipeline.resolve_files(directory, SEQ, vocab)
    config = pipeline.masking_config_for(vocab, SEQ)
    total = json.load(open(os.path.join(directory, "manifest.json")))["num_examples"]
    batches = list(pipeline.pretraining_dataset(files, 4, SEQ, config, is_training=False))
    assert len(batches) == total // 4  # the last partial batch is dropped


@pytest.mark.parametrize("num_pipelines", [2, 5])  # 3 files: by file, then by record
def test_input_pipelines_split_the_data_without_overlap(data, num_pipelines):
    vocab, directory = data
    files = pipeline.resolve_files(directory, SEQ, vocab)
    config = pipeline.masking_config_for(vocab, SEQ)
    seen = []
    for pipeline_id in range(num_pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=num_pipelines,
                                             input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=num_pipelines)
        dataset = pipeline.pretraining_dataset(files, 2 * num_pipelines, SEQ, config,
                                               is_training=False, input_context=context)
        assert dataset.element_spec["input_ids"].shape.as_list() == [2, SEQ]  # per replica
        seen.append({tuple(row) for b in dataset for row in b["input_ids"].numpy().tolist()})
    for i in range(num_pipelines):
        for j in range(i + 1, num_pipelines):
            assert not seen[i] & seen[j]
