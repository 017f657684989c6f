"""Tests of `electra_tf.text.vocab`: reservoir sampling and learning a WordPiece vocab."""

import collections
import os
import random

import pytest

from electra_tf.text import tokenizer as tk
from electra_tf.text import vocab as vl

_WORDS = ("the quick brown fox jumps over lazy dog while playing running jumped quickly "
          "slowly").split()


def _training_lines(n=200, seed=0):
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 10))) + "."
             for _ in range(n)]
    return lines + ["Héllo Wörld, naïve CAFÉ!", "The DOG (again) jumps?"]


# ---------------------------------------------------------------------------- sample_lines


def test_sample_lines_is_deterministic_for_a_seed():
    lines = [f"line {i}" for i in range(1000)]
    first = vl.sample_lines(lines, 10, seed=3)
    assert vl.sample_lines(iter(lines), 10, seed=3) == first
    assert vl.sample_lines(lines, 10, seed=4) != first
    assert first[1] == 1000


def test_sample_lines_skips_empty_lines():
    lines = ["a", "", "b", "", "", "c", ""]
    assert vl.sample_lines(lines, 10) == (["a", "b", "c"], 3)
    sample, seen = vl.sample_lines(["", "x", "", "y", "z", ""], 2)
    assert seen == 3 and len(sample) == 2 and "" not in sample


def test_sample_lines_under_or_at_k_returns_all_lines_in_order():
    lines = [f"l{i}" for i in range(7)]
    assert vl.sample_lines(lines, 10) == (lines, 7)
    assert vl.sample_lines(lines, 7) == (lines, 7)
    assert vl.sample_lines([], 5) == ([], 0)


def test_sample_lines_over_k_returns_exactly_k_distinct_lines():
    lines = [f"l{i}" for i in range(500)]
    sample, seen = vl.sample_lines((line for line in lines), 25, seed=1)
    assert seen == 500
    assert len(sample) == 25
    assert len(set(sample)) == 25
    assert set(sample) <= set(lines)


def test_sample_lines_is_uniform():
    lines = [f"l{i}" for i in range(10)]
    counts = collections.Counter()
    seeds = 2000
    for seed in range(seeds):
        sample, _ = vl.sample_lines(lines, 5, seed=seed)
        counts.update(sample)
    # Each line is in a k=5 of 10 sample with probability 1/2: expect 1000 (sd ~22).
    assert set(counts) == set(lines)
    for line in lines:
        assert 850 < counts[line] < 1150, (line, counts[line])


# ---------------------------------------------------------------------------- learn_vocab


@pytest.fixture(scope="module")
def learned():
    lines = _training_lines()
    return lines, vl.learn_vocab(lines, vocab_size=90)


def test_learn_vocab_puts_special_tokens_first(learned):
    _, tokens = learned
    assert tokens[:5] == tk.SPECIAL_TOKENS
    assert len(set(tokens)) == len(tokens)
    assert all(t and t == t.strip() for t in tokens)
    # Frequent whole words are learned, not only characters.
    assert {"the", "quick", "playing"} <= set(tokens)


def test_learn_vocab_learns_the_same_vocab_again(learned):
    """Re-running the quickstart rebuilds its vocabulary: the run it resumes was made with
    the same one (`check_same_run` compares them)."""
    lines, tokens = learned
    assert vl.learn_vocab(list(lines), vocab_size=90) == tokens


def test_learn_vocab_size_is_an_upper_bound(learned):
    lines, tokens = learned
    assert 5 < len(tokens) <= 90
    smaller = vl.learn_vocab(lines, vocab_size=75)
    assert len(smaller) <= 75
    assert len(smaller) <= len(tokens)


def test_learn_vocab_extra_reserved_tokens_follow_the_specials():
    tokens = vl.learn_vocab(_training_lines(50), vocab_size=100,
                            extra_reserved=("[unused0]", "[unused1]"))
    assert tokens[:7] == tk.SPECIAL_TOKENS + ["[unused0]", "[unused1]"]
    assert len(tokens) <= 100


@pytest.mark.parametrize("vocab_size", [5, 0, -1])
def test_learn_vocab_rejects_too_small_sizes(vocab_size):
    with pytest.raises(ValueError, match="vocab_size"):
        vl.learn_vocab(["some text"], vocab_size=vocab_size)


def test_learn_vocab_rejects_no_lines():
    with pytest.raises(ValueError, match="no text"):
        vl.learn_vocab([], vocab_size=100)


def test_learn_vocab_rejects_only_empty_lines():
    with pytest.raises(ValueError):
        vl.learn_vocab(["", ""], vocab_size=100)


def test_learned_vocab_round_trips_and_tokenizes_its_text_without_unk(learned, tmp_path):
    lines, tokens = learned
    path = str(tmp_path / "new_dir" / "vocab.txt")
    vl.write_vocab(tokens, path)
    vocab = tk.Vocab.load(path)
    assert vocab.tokens == tuple(tokens)
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (
        0, 1, 2, 3, 4)
    ids = tk.make_tokenizer(vocab).tokenize(lines).to_list()
    assert all(ids), "every line gives tokens"
    assert not any(vocab.unk_id in row for row in ids)
    assert all(0 <= i < vocab.size for row in ids for i in row)


def test_cased_vocab_tokenizes_its_text_without_unk(tmp_path):
    lines = _training_lines(60, seed=2)
    tokens = vl.learn_vocab(lines, vocab_size=200, lower_case=False)
    assert "CAFÉ" in tokens or "C" in tokens  # capitals survive
    path = str(tmp_path / "vocab.txt")
    vl.write_vocab(tokens, path)
    vocab = tk.Vocab.load(path)
    ids = tk.make_tokenizer(vocab, lower_case=False).tokenize(lines).to_list()
    assert not any(vocab.unk_id in row for row in ids)


def test_write_vocab_format_atomic_and_replaces(tmp_path):
    path = str(tmp_path / "vocab.txt")
    vl.write_vocab(["old"], path)
    tokens = tk.SPECIAL_TOKENS + ["wörd", "##s"]
    vl.write_vocab(tokens, path)
    with open(path, encoding="utf-8") as f:
        assert f.read() == "".join(t + "\n" for t in tokens)
    assert os.listdir(tmp_path) == ["vocab.txt"]


def test_write_vocab_relative_path_without_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    vl.write_vocab(tk.SPECIAL_TOKENS, "vocab.txt")
    assert tk.Vocab.load("vocab.txt").size == 5
    assert os.listdir(tmp_path) == ["vocab.txt"]


def test_learn_vocab_reports_characters_left_out_and_keeps_them_when_allowed():
    # 40 distinct ideographs (each its own word), a few much rarer than the rest.
    chars = [chr(0x4E00 + i) for i in range(40)]
    rng = random.Random(0)
    lines = ["".join(rng.choices(chars, [1 / (i + 1) for i in range(40)], k=20))
             for _ in range(300)]
    logs = []
    tokens = vl.learn_vocab(lines, vocab_size=200, max_unique_chars=10, log=logs.append)
    assert sum(c in tokens for c in chars) == 10
    assert logs[-1].startswith("30 of the sample's 40 distinct characters have no token (")
    assert "--max_unique_chars=" in logs[-1]
    logs = []
    tokens = vl.learn_vocab(lines, vocab_size=200, max_unique_chars=40, log=logs.append)
    assert all(c in tokens for c in chars)
    assert logs[-1].startswith("0 of the sample's 40 distinct characters have no token (0.00%")
    assert "--max_unique_chars" not in logs[-1]


@pytest.mark.parametrize("lower_case", [False, True])
def test_learn_vocab_splits_words_at_unicode_spaces_as_the_tokenizer_does(tmp_path,
                                                                          lower_case):
    """Spaces and controls split words; format characters (ZWNJ, a soft hyphen) too in
    cased text, while case folding removes them."""
    lines = ["il dit\u00a0: « oui\u202fnon »\u3000Paris\u2028Lyon x\x85y "
             "Pers\u200cian soft\u00adhyphen"] * 20
    tokens = vl.learn_vocab(lines, vocab_size=100, lower_case=lower_case)
    assert not [t for t in tokens if any(c in t for c in "\u00a0\u202f\u3000\u2028\x85"
                                                         "\u200c\u00ad")]
    words = ({"paris", "lyon", "persian", "softhyphen"} if lower_case
             else {"dit", "Paris", "Lyon", "Pers", "ian", "soft", "hyphen"})
    assert words <= set(tokens)
    path = str(tmp_path / "vocab.txt")
    vl.write_vocab(tokens, path)
    vocab = tk.Vocab.load(path)
    ids = tk.make_tokenizer(vocab, lower_case=lower_case).tokenize(lines[:1]).to_list()[0]
    assert vocab.unk_id not in ids
    assert [vocab.tokens[i] for i in ids][:2] == ["il", "dit"]
