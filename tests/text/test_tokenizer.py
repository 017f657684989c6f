"""Tests of `electra_tf.text.tokenizer`: loading vocab files and the BERT tokenizer."""

import hashlib

import pytest

from electra_tf import errors
from electra_tf.text import tokenizer as tk

LEARNED = tk.SPECIAL_TOKENS + ["hello", "world", "Hello", ",", "!", "play", "##ing", "cafe"]
BERT = (["[PAD]"] + [f"[unused{i}]" for i in range(99)]
        + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        + ["hello", "world", "Hello", "play", "##ing", ",", "!", "[", "]", "cls", "sep"])


def _write(tmp_path, tokens_or_bytes, name="vocab.txt") -> str:
    path = str(tmp_path / name)
    data = tokens_or_bytes
    if not isinstance(data, bytes):
        data = "".join(t + "\n" for t in tokens_or_bytes).encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    return path


def _ids(tokenizer, texts):
    return tokenizer.tokenize(texts).to_list()


# ---------------------------------------------------------------------------- Vocab.load


def test_load_learned_style_vocab(tmp_path):
    path = _write(tmp_path, LEARNED)
    vocab = tk.Vocab.load(path)
    assert vocab.path == path
    assert vocab.tokens == tuple(LEARNED)
    assert vocab.size == len(LEARNED)
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (
        0, 1, 2, 3, 4)
    assert vocab.special_ids == (0, 2, 3)
    assert vocab.id("hello") == 5 and vocab.id("##ing") == 11


def test_load_bert_style_vocab(tmp_path):
    vocab = tk.Vocab.load(_write(tmp_path, BERT))
    assert vocab.size == len(BERT) == 115
    assert vocab.pad_id == 0
    assert vocab.id("[unused0]") == 1 and vocab.id("[unused98]") == 99
    assert (vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (100, 101, 102, 103)
    assert vocab.special_ids == (vocab.pad_id, vocab.cls_id, vocab.sep_id) == (0, 101, 102)
    assert vocab.id("hello") == 104 and vocab.id("##ing") == 108


def test_sha256_is_the_hash_of_the_file_bytes(tmp_path):
    path = _write(tmp_path, BERT)
    with open(path, "rb") as f:
        expected = hashlib.sha256(f.read()).hexdigest()
    vocab = tk.Vocab.load(path)
    assert vocab.sha256 == expected
    other = tk.Vocab.load(_write(tmp_path, LEARNED, name="other.txt"))
    assert other.sha256 != vocab.sha256
    # The same tokens without the final newline: same ids, different bytes, different hash.
    no_newline = _write(tmp_path, "\n".join(LEARNED).encode(), name="no_newline.txt")
    reloaded = tk.Vocab.load(no_newline)
    assert reloaded.tokens == other.tokens
    assert reloaded.sha256 != other.sha256


def test_load_accepts_crlf_and_surrounding_spaces(tmp_path):
    data = "\r\n".join(f" {t} " for t in LEARNED).encode() + b"\r\n"
    vocab = tk.Vocab.load(_write(tmp_path, data))
    assert vocab.tokens == tuple(LEARNED)


def test_vocab_error_is_a_user_error():
    assert issubclass(tk.VocabError, errors.UserError)
    assert issubclass(tk.VocabError, ValueError)


@pytest.mark.parametrize("data, fragments", [
    ("".join(t + "\n" for t in LEARNED if t != "[MASK]").encode(), ["[MASK]", "lacks"]),
    ("".join(t + "\n" for t in LEARNED if t != "[UNK]").encode(), ["[UNK]", "lacks"]),
    ("".join(t + "\n" for t in BERT if t not in ("[UNK]", "[CLS]")).encode(),
     ["[UNK]", "[CLS]"]),
    (("\n".join(LEARNED[:6]) + "\n\n" + "\n".join(LEARNED[6:]) + "\n").encode(),
     ["line 7 is empty"]),
    (("\n".join(LEARNED[:6]) + "\n   \n" + "\n".join(LEARNED[6:]) + "\n").encode(),
     ["line 7 is empty"]),
    ("".join(t + "\n" for t in LEARNED + ["hello"]).encode(),
     [f"line {len(LEARNED) + 1} repeats the token 'hello'", "line 6"]),
    (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nok\n\xff\xfebad\n", ["not UTF-8"]),
    (b"", ["lacks"]),
], ids=["no_mask", "no_unk", "no_unk_no_cls", "empty_line", "blank_line", "duplicate",
        "invalid_utf8", "empty_file"])
def test_load_rejects_bad_vocabs_naming_the_file(tmp_path, data, fragments):
    path = _write(tmp_path, data, name="bad_vocab.txt")
    with pytest.raises(tk.VocabError) as info:
        tk.Vocab.load(path)
    message = str(info.value)
    assert path in message
    for fragment in fragments:
        assert fragment in message
    assert isinstance(info.value, errors.UserError)


def test_load_missing_file_names_it(tmp_path):
    path = str(tmp_path / "nowhere" / "vocab.txt")
    with pytest.raises(tk.VocabError) as info:
        tk.Vocab.load(path)
    assert path in str(info.value)
    assert isinstance(info.value, errors.UserError)


def test_load_splits_only_at_newlines(tmp_path):
    tokens = LEARNED + ["a\u2028b", "c\x1cd", "last"]
    vocab = tk.Vocab.load(_write(tmp_path, tokens))
    assert vocab.size == len(tokens)
    assert vocab.id("last") == len(tokens) - 1


# ---------------------------------------------------------------------------- make_tokenizer


@pytest.fixture(scope="module")
def learned_vocab(tmp_path_factory):
    return tk.Vocab.load(_write(tmp_path_factory.mktemp("learned"), LEARNED))


@pytest.fixture(scope="module")
def bert_vocab(tmp_path_factory):
    return tk.Vocab.load(_write(tmp_path_factory.mktemp("bert"), BERT))


def test_tokenizer_lower_cases_and_strips_accents_by_default(learned_vocab):
    tokenizer = tk.make_tokenizer(learned_vocab)
    v = learned_vocab
    assert _ids(tokenizer, ["Héllo WORLD", "CAFÉ hello"]) == [
        [v.id("hello"), v.id("world")], [v.id("cafe"), v.id("hello")]]
    assert tokenizer.tokenize(["hello"]).dtype.name == "int32"


def test_tokenizer_keeps_case_when_asked(learned_vocab):
    tokenizer = tk.make_tokenizer(learned_vocab, lower_case=False)
    v = learned_vocab
    assert _ids(tokenizer, ["Hello WORLD hello", "Héllo café"]) == [
        [v.id("Hello"), v.unk_id, v.id("hello")], [v.unk_id, v.unk_id]]


def test_tokenizer_splits_punctuation_and_wordpieces(bert_vocab):
    tokenizer = tk.make_tokenizer(bert_vocab)
    v = bert_vocab
    expected = [v.id("hello"), v.id(","), v.id("world"), v.id("!")]
    assert _ids(tokenizer, ["hello, world!", "hello,world!"]) == [expected, expected]
    assert _ids(tokenizer, ["Playing play"]) == [[v.id("play"), v.id("##ing"), v.id("play")]]
    assert _ids(tokenizer, ["zzz", ""]) == [[v.unk_id], []]


def test_special_token_text_is_not_a_special_id(bert_vocab, learned_vocab):
    v = bert_vocab
    ids = _ids(tk.make_tokenizer(v), ["[CLS] hello [SEP] [MASK] [PAD]"])[0]
    assert not set(ids) & {v.cls_id, v.sep_id, v.mask_id, v.pad_id}
    assert ids[:3] == [v.id("["), v.id("cls"), v.id("]")]
    assert ids[3] == v.id("hello")
    # A vocab without "[" and "]" turns the text into [UNK]s, never into [CLS].
    w = learned_vocab
    ids = _ids(tk.make_tokenizer(w), ["[CLS] [SEP]"])[0]
    assert ids and set(ids) == {w.unk_id}


def test_tokenizer_ids_in_range_for_many_texts(bert_vocab):
    tokenizer = tk.make_tokenizer(bert_vocab)
    texts = ["Hello, world!", "PLAYING with words", "  spaces \t and\nnewlines ", "ünïcödé"]
    for ids in _ids(tokenizer, texts):
        assert all(0 <= i < bert_vocab.size for i in ids)


@pytest.mark.parametrize("lower_case", [True, False])
def test_tokenizer_splits_at_every_unicode_space(learned_vocab, lower_case):
    """Files' lines keep their inner spaces, TFDS text has them collapsed
    (`corpus.split_sentences`): the tokens are the same either way."""
    tokenizer = tk.make_tokenizer(learned_vocab, lower_case=lower_case)
    text = "hello\u00a0world\u202f!\u3000hello  \t,\u2028world\x1cplay\u1680cafe"
    assert _ids(tokenizer, [text]) == _ids(tokenizer, [" ".join(text.split())])
    assert learned_vocab.unk_id not in _ids(tokenizer, [text])[0]


# ---------------------------------------------------------------------------- check_lower_case

_WORDS = [f"{a}{b}{c}" for a in "bcdfg" for b in "aeiou" for c in "lmnrst"]  # 150 words


@pytest.mark.parametrize("tokens, lower_case, outcome", [
    (_WORDS, True, None),
    (_WORDS, False, "no token has a capital"),                  # a warning: may be right
    (_WORDS[:50], False, None),                                 # too few to tell
    (_WORDS + [w.title() for w in _WORDS[:30]], True, "30 of its tokens have capitals"),
    (_WORDS + [w.title() for w in _WORDS[:30]], False, None),
    (_WORDS + ["A", "Ω", "##B"], True, None),                   # a few strays
    (_WORDS + [chr(0x13A0 + i) for i in range(20)], True, None),  # Cherokee folds up
    ([chr(0x13A0 + i) + chr(0x13A0 + j) for i in range(10) for j in range(15)], False,
     None),                                                     # and is written so
    ([chr(0x10D0 + i) + chr(0x10D0 + j) for i in range(10) for j in range(15)], False,
     None),                                                     # Georgian: no capitals
    ([chr(0x4E00 + i) for i in range(500)] + ["##" + chr(0x4E00 + i) for i in range(500)],
     False, None),                                              # caseless: either way
    ([chr(0x4E00 + i) for i in range(500)], True, None),
])
def test_check_lower_case(tmp_path, tokens, lower_case, outcome):
    vocab = tk.Vocab.load(_write(tmp_path, tk.SPECIAL_TOKENS + ["[unused0]"] + tokens))
    if outcome and lower_case:
        with pytest.raises(tk.VocabError, match=f"{vocab.path}: a cased vocab .*{outcome}.*"
                                                "pass --nolower_case"):
            tk.check_lower_case(vocab, lower_case)
        return
    warning = tk.check_lower_case(vocab, lower_case)
    assert (warning is None) if outcome is None else (outcome in warning)


def test_load_a_directory_says_so(tmp_path):
    with pytest.raises(tk.VocabError, match=f"{tmp_path}: a directory, not a vocab file"):
        tk.Vocab.load(str(tmp_path))
