"""create_pretraining_data's core: shards, manifest, determinism, atomic output."""

import json
import os

import pytest
import tensorflow as tf

from electra_tf import errors
from electra_tf.data import examples
from electra_tf.data import writer
from electra_tf.text import corpus
from tests import helpers


def write(tmp_path, vocab, corpus_path, out="data", **kwargs):
    kwargs.setdefault("max_seq_length", 32)
    return writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab,
                                         str(tmp_path / out), log=lambda _: None, **kwargs)


def read_all(directory, seq=32):
    manifest = json.load(open(os.path.join(directory, "manifest.json")))
    files = [os.path.join(directory, s["file"]) for s in manifest["shards"]]
    records = list(tf.data.TFRecordDataset(files).batch(10_000))
    parsed = examples.parse(records[0], seq) if records else None
    return manifest, parsed


def test_manifest_and_examples(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    corpus_path = helpers.write_corpus(str(tmp_path), num_documents=30)
    result = write(tmp_path, vocab, corpus_path, num_shards=3, seed=5)
    manifest, parsed = read_all(str(tmp_path / "data"))
    assert manifest["num_examples"] == result.num_examples > 0
    assert sum(s["num_examples"] for s in manifest["shards"]) == result.num_examples
    assert [s["file"] for s in manifest["shards"]] == [
        f"pretrain_data.tfrecord-{i:05d}-of-00003" for i in range(3)]
    assert manifest["max_seq_length"] == 32 and manifest["seed"] == 5
    assert manifest["vocab"]["sha256"] == vocab.sha256
    assert manifest["tokenizer"]["lower_case_nfd_strip_accents"] is True
    assert manifest["num_documents"] == 30
    assert manifest["input"]["files"] == 1 and manifest["input"]["bytes"] > 0
    ids, mask = parsed["input_ids"].numpy(), parsed["input_mask"].numpy()
    assert (ids[:, 0] == vocab.cls_id).all()
    lengths = mask.sum(1)
    assert all(ids[i, n - 1] == vocab.sep_id for i, n in enumerate(lengths))
    assert (ids[mask == 0] == vocab.pad_id).all()
    # Tokens counted = real tokens minus [CLS] and the [SEP]s.
    specials = ((ids == vocab.cls_id) | (ids == vocab.sep_id)).sum()
    assert manifest["num_tokens"] == int(lengths.sum() - specials)
    assert not [f for f in os.listdir(tmp_path / "data") if f.endswith(".tmp")]


def test_no_token_is_lost_without_a_count(tmp_path):
    """Every token of the text is in an example or counted as cut: a sentence longer than
    a segment (here 40 words at max_seq_length 16) and the cuts of ordinary packing."""
    vocab = helpers.write_vocab(str(tmp_path))
    path = tmp_path / "c.txt"
    long_sentence = " ".join(helpers.WORDS[i % 20] for i in range(40)) + " ."
    lines = helpers.sentences(60, seed=3) + ["", long_sentence, "", "the cat sat ."]
    path.write_text("\n".join(lines) + "\n")
    result = write(tmp_path, vocab, str(path), max_seq_length=16)
    manifest, _ = read_all(str(tmp_path / "data"), seq=16)
    tokenizer = helpers.tokenizer.make_tokenizer(vocab)
    text_tokens = sum(len(t) for t in tokenizer.tokenize([l for l in lines if l]).to_list())
    assert manifest["num_tokens"] + manifest["truncated_tokens"] == text_tokens
    assert manifest["truncated_tokens"] >= 41 - 14  # the long sentence alone loses 27
    assert manifest["truncated_examples"] >= 1
    assert (result.truncated_tokens, result.truncated_examples) == (
        manifest["truncated_tokens"], manifest["truncated_examples"])


def test_documents_never_share_an_example(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    path = tmp_path / "c.txt"
    path.write_text("the cat sat .\n\nthe dog ran .\n\n\n\nred tree .\n")
    write(tmp_path, vocab, str(path))
    manifest, parsed = read_all(str(tmp_path / "data"))
    assert manifest["num_examples"] == 3 and manifest["num_documents"] == 3


def test_same_seed_same_bytes_other_seed_other_packing(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    corpus_path = helpers.write_corpus(str(tmp_path), num_documents=20,
                                       sentences_per_document=30)

    def shard_bytes(out, seed):
        write(tmp_path, vocab, corpus_path, out=out, seed=seed)
        return open(tmp_path / out / "pretrain_data.tfrecord-00000-of-00001", "rb").read()

    assert shard_bytes("a", 1) == shard_bytes("b", 1)
    assert shard_bytes("a2", 1) != shard_bytes("c", 2)


def test_existing_dataset_is_kept_unless_overwrite(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    corpus_path = helpers.write_corpus(str(tmp_path))
    write(tmp_path, vocab, corpus_path, num_shards=3)
    with pytest.raises(writer.OutputExistsError, match="--overwrite"):
        write(tmp_path, vocab, corpus_path)
    write(tmp_path, vocab, corpus_path, num_shards=1, overwrite=True)
    assert sorted(os.listdir(tmp_path / "data")) == [
        "manifest.json", "pretrain_data.tfrecord-00000-of-00001"]  # old shards removed


def test_vocab_and_lower_case_must_agree(tmp_path):
    """A cased vocab for lower-cased text is refused before anything is written; a vocab
    without capitals for cased text is a warning (the text may be lower-case already)."""
    corpus_path = helpers.write_corpus(str(tmp_path))
    cased = helpers.write_vocab(str(tmp_path),
                                helpers.WORDS + [w.title() for w in helpers.WORDS])
    with pytest.raises(helpers.tokenizer.VocabError,
                       match=f"{cased.path}: a cased vocab .*; pass --nolower_case"):
        write(tmp_path, cased, corpus_path)
    assert not os.path.exists(tmp_path / "data")
    write(tmp_path, cased, corpus_path, lower_case=False)
    words = [f"{a}{b}{c}" for a in "bcdfg" for b in "aeiou" for c in "lmnrst"]
    uncased = helpers.write_vocab(str(tmp_path), sorted(set(helpers.WORDS + words)))
    logs = []
    writer.write_pretraining_data(corpus.open_corpus(corpus_path), uncased,
                                  str(tmp_path / "data"), max_seq_length=32,
                                  lower_case=False, overwrite=True, log=logs.append)
    assert [l for l in logs if l.startswith(f"warning: {uncased.path}: no token has a "
                                            "capital")]


def test_a_failure_midway_leaves_no_output(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    good = helpers.write_corpus(str(tmp_path))
    bad = tmp_path / "broken.txt.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage that is not deflate")
    with pytest.raises(corpus.CorpusError, match="broken.txt.gz"):
        write(tmp_path, vocab, f"{good},{bad}")
    assert os.listdir(tmp_path / "data") == []


def test_empty_corpus_is_an_error_and_writes_nothing(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    path = tmp_path / "empty.txt"
    path.write_text("\n\n   \n")
    with pytest.raises(writer.EmptyOutputError, match="no examples"):
        write(tmp_path, vocab, str(path))
    assert os.listdir(tmp_path / "data") == []


def test_more_shards_than_open_files_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    vocab = helpers.write_vocab(str(tmp_path))
    corpus_path = helpers.write_corpus(str(tmp_path))
    opened, real = [], tf.io.TFRecordWriter

    def writer_or_too_many(path):  # as the OS answers the open past `ulimit -n`
        if len(opened) == 3:
            raise tf.errors.ResourceExhaustedError(None, None, f"{path}; Too many open files")
        opened.append(path)
        return real(path)

    monkeypatch.setattr(tf.io, "TFRecordWriter", writer_or_too_many)
    monkeypatch.setattr(writer.resource, "getrlimit", lambda _: (1024, 4096))
    with pytest.raises(errors.UserError) as info:
        write(tmp_path, vocab, corpus_path, num_shards=1100)
    assert str(info.value) == ("--num_shards=1100: cannot keep that many shard files open "
                               "(Too many open files after 3); pass fewer, or raise the "
                               "limit on open files (`ulimit -n`, now 1024)")
    assert len(opened) == 3 and os.listdir(tmp_path / "data") == []


def test_default_shards_grow_with_the_corpus():
    assert writer.default_num_shards(0) == 1
    assert writer.default_num_shards(10 * 2**20) == 1
    assert writer.default_num_shards(64 * 2**20 + 1) == 2
    assert writer.default_num_shards(10**15) == writer.MAX_DEFAULT_SHARDS
