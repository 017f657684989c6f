"""Fuzzing the data path: random bytes and random Unicode → corpus files → vocab →
tokenizer → packed TFRecords, read back and checked example by example.

The corpus (200 documents, seeded) mixes sentences of real words with random bytes,
invalid UTF-8 (stray and cut sequences, encoded surrogates, overlong forms), NULs and
control characters, `\\r`, form feeds, U+2028, whitespace-only lines, lines of up to
20,000 characters without a space, every script's letters, combining marks, emoji and
the special tokens' names as text. It goes through `corpus.open_corpus` and
`writer.write_pretraining_data`, the functions `tools/create_pretraining_data.py` calls.
"""

import gzip
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import examples
from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import tokenizer as tokenizer_lib
from electra_tf.text import vocab as vocab_lib
from tests import helpers

SEQ = 32
NUM_DOCUMENTS = 200
FILES = ("a.txt", "b.txt", "c.txt.gz")

_SCRIPTS = [  # (first, last) code points
    (0x0041, 0x007A), (0x00C0, 0x017F), (0x0400, 0x04FF), (0x0590, 0x05FF),
    (0x0600, 0x06FF), (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x3040, 0x30FF),
    (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F6FF), (0x1D400, 0x1D4FF)]
_COMBINING = [chr(c) for c in range(0x0300, 0x036F)]
_CONTROLS = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x7f", "\x85",
             "\u200b", "\u200d", "\u2028", "\u2029", "\ufeff", "\U000E0001"]
_BLANKS = [" ", "\t", "\x0c", "\r", "\x0b", "\u00a0", "\u2028", "\u3000"]
_INVALID = [b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x90", b"\xc0\xaf",
            b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",
            "\ud800".encode("utf-8", "surrogatepass")]
_SPECIALS = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "##s", "[", "]", "##"]


def _random_unicode(rng: random.Random, n: int) -> str:
    """`n` characters from a few scripts, with combining marks, emoji and spaces."""
    chars = []
    scripts = rng.sample(_SCRIPTS, rng.randint(1, 3))
    for _ in range(n):
        roll = rng.random()
        if roll < 0.15:
            chars.append(" ")
        elif roll < 0.22:
            chars.append(rng.choice(_COMBINING))
        else:
            first, last = rng.choice(scripts)
            chars.append(chr(rng.randint(first, last)))
    return "".join(chars)


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(helpers.WORDS).capitalize() if rng.random() < 0.2
            else rng.choice(helpers.WORDS) for _ in range(n)]


def _random_line(rng: random.Random) -> bytes:
    """One corpus line (no b"\\n"), of a randomly chosen kind."""
    kind = rng.choices(["words", "unicode", "bytes", "spliced", "controls", "long", "blank",
                        "specials"], weights=[30, 15, 8, 10, 10, 4, 5, 5])[0]
    if kind == "words":
        return (" ".join(_words(rng, rng.randint(1, 20))) + rng.choice([" .", "!", ""])).encode()
    if kind == "unicode":
        return _random_unicode(rng, rng.randint(1, 80)).encode()
    if kind == "bytes":
        return bytes(rng.choice([b for b in range(256) if b != 10])
                     for _ in range(rng.randint(1, 60)))
    if kind == "spliced":
        parts = [w.encode() for w in _words(rng, rng.randint(2, 10))]
        for _ in range(rng.randint(1, 3)):
            parts.insert(rng.randint(0, len(parts)), rng.choice(_INVALID))
        return rng.choice([b" ", b""]).join(parts)
    if kind == "controls":
        return "".join(w + rng.choice(_CONTROLS + [" "])
                       for w in _words(rng, rng.randint(1, 10))).encode()
    if kind == "long":
        return "".join(rng.choice(["x", "猫", "ab", "\u0301"])
                       for _ in range(rng.randint(5000, 20000))).encode()
    if kind == "blank":
        return "".join(rng.choice(_BLANKS) for _ in range(rng.randint(1, 8))).encode()
    return " ".join(rng.choice(_SPECIALS + _words(rng, 3)) for _ in range(8)).encode()


def _write_fuzz_corpus(directory, seed=0) -> list[str]:
    """NUM_DOCUMENTS random documents in FILES (one gzipped; some lines end in \\r\\n)."""
    rng = random.Random(seed)
    contents = {name: [] for name in FILES}
    for _ in range(NUM_DOCUMENTS):
        lines = [_random_line(rng) + rng.choice([b"\n"] * 5 + [b"\r\n"])
                 for _ in range(rng.randint(1, 12))]
        contents[rng.choice(FILES)].append(b"".join(lines) + b"\n")
    paths = []
    for name, documents in contents.items():
        path = os.path.join(directory, name)
        with (gzip.open if name.endswith(".gz") else open)(path, "wb") as f:
            f.write(b"".join(documents))
        paths.append(path)
    return paths


def _expected_corpus(paths):
    """What the documented format makes of the files: each line UTF-8-decoded (a line
    that is not valid UTF-8 is skipped and counted) and stripped; "" ends a document,
    and so does the end of a file. Returns (lines, stats dict, number of documents)."""
    lines, stats = [], {"lines": 0, "bytes": 0, "invalid_utf8_lines": 0,
                        "first_invalid_utf8": ""}
    for path in paths:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            data = f.read()
        stats["bytes"] += len(data)
        raw_lines = data.split(b"\n")[:-1]  # every file ends in "\n"
        stats["lines"] += len(raw_lines)
        for n, raw in enumerate(raw_lines, start=1):
            try:
                lines.append(raw.decode("utf-8").strip())
            except UnicodeDecodeError:
                stats["invalid_utf8_lines"] += 1
                stats["first_invalid_utf8"] = stats["first_invalid_utf8"] or f"{path}:{n}"
        lines.append("")
    documents = sum(bool(line) and not following
                    for line, following in zip(lines, lines[1:] + [""]))
    return lines, stats, documents


def _read_records(directory, manifest):
    """Every record of the shards, in the order written (round-robin over the shards)."""
    per_shard = []
    for shard in manifest["shards"]:
        path = os.path.join(directory, shard["file"])
        per_shard.append([r.numpy() for r in tf.data.TFRecordDataset(path)])
    assert [len(r) for r in per_shard] == [s["num_examples"] for s in manifest["shards"]]
    ordered = []
    for i in range(max(len(r) for r in per_shard)):
        ordered += [records[i] for records in per_shard if i < len(records)]
    parsed = examples.parse(tf.constant(ordered), SEQ)
    return {name: value.numpy() for name, value in parsed.items()}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """The fuzz corpus, a vocab learned from it, and the TFRecords written from it."""
    directory = str(tmp_path_factory.mktemp("fuzz"))
    paths = _write_fuzz_corpus(directory)
    lines, stats, documents = _expected_corpus(paths)
    # The vocab tool's own path: learn, write, load (the learned tokens must survive it).
    # From the first 200 characters of each line: the long lines' thousands of distinct
    # CJK-separated words would take the learner a minute.
    tokens = vocab_lib.learn_vocab([line[:200] for line in lines if line], vocab_size=400)
    vocab_lib.write_vocab(tokens, os.path.join(directory, "vocab.txt"))
    vocab = tokenizer_lib.Vocab.load(os.path.join(directory, "vocab.txt"))
    assert list(vocab.tokens) == tokens

    source = corpus.open_corpus(",".join(os.path.join(directory, n) for n in FILES))
    output = os.path.join(directory, "data")
    with pytest.MonkeyPatch.context() as patch:
        # Small batches: documents and examples cross many batch boundaries.
        patch.setattr(writer, "LINES_PER_BATCH", 97)
        result = writer.write_pretraining_data(source, vocab, output, max_seq_length=SEQ,
                                               num_shards=3, seed=3, log=lambda _: None)
    with open(os.path.join(output, writer.MANIFEST)) as f:
        manifest = json.load(f)
    return {"lines": lines, "stats": stats, "documents": documents, "vocab": vocab,
            "source": source, "result": result, "manifest": manifest,
            "records": _read_records(output, manifest)}


def test_the_fuzz_corpus_is_as_hostile_as_intended(fuzzed):
    lines, stats = fuzzed["lines"], fuzzed["stats"]
    assert stats["invalid_utf8_lines"] > 50
    assert len(lines) - lines.count("") > 500
    assert max(len(line) for line in lines) >= 10_000
    text = "".join(lines)
    for char in ("\x00", "\x0c", "\r", "\u2028", "\u0301", "猫", "[SEP]", "[MASK]"):
        assert char in text, repr(char)


def test_every_example_is_well_formed(fuzzed):
    vocab, records = fuzzed["vocab"], fuzzed["records"]
    ids, mask, segments = (records[n] for n in examples.FEATURE_NAMES)
    assert ids.shape == mask.shape == segments.shape == (fuzzed["manifest"]["num_examples"],
                                                         SEQ)
    assert ((ids >= 0) & (ids < vocab.size)).all()
    for i in range(len(ids)):
        length = int(mask[i].sum())
        np.testing.assert_array_equal(mask[i], np.arange(SEQ) < length)  # prefix of ones
        real = ids[i, :length]
        assert real[0] == vocab.cls_id
        assert (ids[i, length:] == vocab.pad_id).all() and (segments[i, length:] == 0).all()
        seps = np.flatnonzero(real == vocab.sep_id)
        # [CLS] A [SEP] (3 ids at least), or [CLS] A [SEP] B [SEP] with B not empty.
        assert seps[-1] == length - 1 and len(seps) in (1, 2), real
        num_first = seps[0] + 1
        assert num_first >= 3 and (len(seps) == 1 or seps[1] > num_first)
        np.testing.assert_array_equal(segments[i, :length], np.arange(length) >= num_first)
        # Text never turns into [CLS], [SEP], [MASK] or [PAD], whatever it spells.
        words = np.delete(real, [0, *seps])
        assert not np.isin(words, [vocab.cls_id, vocab.sep_id, vocab.mask_id,
                                   vocab.pad_id]).any(), real


def test_examples_are_the_packing_of_the_tokenized_lines(fuzzed):
    """The writer (tf.data batches of 97 lines, three shards, batched serialization)
    gives exactly what packing the lines one at a time gives."""
    vocab, lines = fuzzed["vocab"], fuzzed["lines"]
    tokenized = tokenizer_lib.make_tokenizer(vocab).tokenize(tf.constant(lines)).to_list()
    builder = examples.ExampleBuilder(SEQ, vocab.cls_id, vocab.sep_id, seed=3)
    expected, previous = [], ""
    for line, ids in zip(lines, tokenized):
        if line and not previous:  # a document's first sentence seeds its draws
            builder.start_document(examples.document_key(ids))
        expected.append(builder.add_sentence(ids) if line else builder.end_document())
        previous = line
    expected.append(builder.end_document())
    expected = [example for example in expected if example]
    records = fuzzed["records"]
    assert len(records["input_ids"]) == len(expected)
    for i, (ids, num_first) in enumerate(expected):
        np.testing.assert_array_equal(records["input_ids"][i],
                                      ids + [vocab.pad_id] * (SEQ - len(ids)))
        assert records["segment_ids"][i, :len(ids)].tolist() == (
            [0] * num_first + [1] * (len(ids) - num_first))


def test_manifest_counts_match_the_records_and_the_input(fuzzed):
    manifest, records, stats = fuzzed["manifest"], fuzzed["records"], fuzzed["stats"]
    ids, mask = records["input_ids"], records["input_mask"]
    vocab = fuzzed["vocab"]
    assert manifest["num_examples"] == fuzzed["result"].num_examples == len(ids)
    assert sum(s["num_examples"] for s in manifest["shards"]) == len(ids)
    specials = ((ids == vocab.cls_id) | (ids == vocab.sep_id)).sum()
    assert manifest["num_tokens"] == int(mask.sum() - specials)
    lines = fuzzed["lines"]
    assert manifest["num_sentences"] == len(lines) - lines.count("")
    assert manifest["num_documents"] == fuzzed["documents"]
    assert manifest["vocab"]["size"] == vocab.size
    # Undecodable lines are skipped and counted, and the first one is named by file:line.
    for key, value in stats.items():
        assert manifest["input"][key] == value, key
    assert manifest["input"]["files"] == len(FILES)
    problems = " ".join(fuzzed["source"].stats.problems())
    assert (f"{stats['invalid_utf8_lines']} line(s) of invalid UTF-8 skipped, first at "
            f"{stats['first_invalid_utf8']}") in problems


@pytest.mark.parametrize("lower_case", [True, False])
def test_tokenizer_on_random_strings(fuzzed, tmp_path, lower_case):
    """No crash, ids in range, no special id but [UNK] from text, rows independent of
    the batch they are in, and an over-long word is one [UNK]."""
    rng = random.Random(7)
    strings = [_random_line(rng) for _ in range(1500)]
    strings += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
                for _ in range(500)]  # any bytes, "\n" and NUL included
    strings += [b"", b"x" * 101, b"ab" * 60, b"[SEP][MASK]"]
    for vocab in (fuzzed["vocab"], helpers.write_vocab(str(tmp_path))):
        tokenizer = tokenizer_lib.make_tokenizer(vocab, lower_case=lower_case)
        rows = tokenizer.tokenize(tf.constant(strings)).to_list()
        assert len(rows) == len(strings)
        flat = np.array([i for row in rows for i in row])
        assert ((flat >= 0) & (flat < vocab.size)).all()
        assert not np.isin(flat, [vocab.pad_id, vocab.cls_id, vocab.sep_id,
                                  vocab.mask_id]).any()
        shuffled = list(range(len(strings)))
        rng.shuffle(shuffled)
        again = tokenizer.tokenize(tf.constant([strings[i] for i in shuffled[:300]]))
        assert again.to_list() == [rows[i] for i in shuffled[:300]]
        assert rows[-4:-1] == [[], [vocab.unk_id], [vocab.unk_id]]  # > 100 bytes per word
