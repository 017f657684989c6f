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


def test_shards_without_manifest_are_checked_by_their_first_record(data, tmp_path):
    vocab, directory = data
    shard = sorted(f for f in os.listdir(directory) if f.startswith("pretrain"))[0]
    copy = tmp_path / shard
    copy.write_bytes(open(os.path.join(directory, shard), "rb").read())
    with pytest.raises(pipeline.DataError) as info:
        pipeline.resolve_files(str(tmp_path / "pretrain*"), 64, vocab)
    assert str(info.value) == (f"{copy}: input_ids: max_seq_length is 32 but the run uses "
                               "max_seq_length=64")
    small = helpers.write_vocab(str(tmp_path), words=["other"])
    with pytest.raises(pipeline.DataError, match=rf"^{copy}: input_ids: id \d+ in its first "
                       rf"record, but {small.path} has {small.size} ids: the data was "
                       "tokenized with another vocab$"):
        pipeline.resolve_files(str(tmp_path / "pretrain*"), SEQ, small)
    other = tmp_path / "other.tfrecord"
    with tf.io.TFRecordWriter(str(other)) as w:
        w.write(tf.train.Example(features=tf.train.Features(feature={
            "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * SEQ)),
        })).SerializeToString())
    with pytest.raises(pipeline.DataError) as info:
        pipeline.resolve_files(str(other), SEQ, vocab)
    assert str(info.value) == (f"{other}: its first record has no int64 feature "
                               "'input_mask' (it has ['input_ids']): not pre-training data")


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


def test_each_host_reads_its_own_share_and_resumes_where_it_stopped(data):
    """A TPU pod's input on a CPU: H hosts of R replicas each build their own pipeline
    (`host_dataset` under their InputContext). Each element is one replica's B / (H·R)
    rows, a step takes R elements per host (B rows across the hosts), the hosts never
    read the same example, and a host resumed at step s gives its elements from s·R on,
    as the run that did not stop. A host masks its rows of a step together: on one
    replica per host, its elements are its two replicas' together, masks and all."""
    from configs import electra as electra_configs  # pylint: disable=g-import-not-at-top
    vocab, directory = data
    files = pipeline.resolve_files(directory, SEQ, vocab)
    masking = pipeline.masking_config_for(vocab, SEQ)
    config = electra_configs.get_config("tiny")
    config.data.max_seq_length, config.train.batch_size, config.train.seed = SEQ, 8, 3
    hosts, replicas, steps = 2, 2, 3

    def elements(host, step, count, replicas=replicas):
        context = tf.distribute.InputContext(num_input_pipelines=hosts,
                                             input_pipeline_id=host,
                                             num_replicas_in_sync=hosts * replicas)
        dataset = pipeline.host_dataset(context, files, config, masking, True, step)
        return [(b["input_ids"].numpy(), b["masked_input_ids"].numpy())
                for b in dataset.take(count)]

    streams = [elements(host, 0, steps * replicas) for host in range(hosts)]
    assert {ids.shape for stream in streams for ids, _ in stream} == {
        (8 // (hosts * replicas), SEQ)}
    rows = [{tuple(row) for ids, _ in stream for row in ids} for stream in streams]
    assert sum(len(r) for r in rows) == steps * 8  # B rows a step, every one distinct
    assert not rows[0] & rows[1]
    for host in range(hosts):  # resumed at step 2: its elements 4 and 5
        resumed = elements(host, 2, replicas)
        for got, want in zip(resumed, streams[host][2 * replicas:]):  # masks too
            np.testing.assert_array_equal(np.stack(got), np.stack(want))
        alone = elements(host, 1, steps - 1, replicas=1)  # steps 1 and 2, on one replica
        for got, step in zip(alone, range(1, steps)):
            want = streams[host][step * replicas:(step + 1) * replicas]
            np.testing.assert_array_equal(np.stack(got), np.concatenate(want, axis=1))


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
