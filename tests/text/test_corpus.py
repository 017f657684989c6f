"""Tests of `electra_tf.text.corpus`: sentence splitting, files, TFDS (the sample corpus:
test_sample_corpus.py)."""

import gzip
import os
import re

import pytest

from electra_tf import errors
from electra_tf.text import corpus
from tests import helpers


def _write_bytes(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def _read_all(paths, stats=None):
    stats = stats if stats is not None else corpus.CorpusStats()
    return list(corpus.read_lines([str(p) for p in paths], stats)), stats


# ---------------------------------------------------------------------------- split_sentences


def test_split_sentences_plain_periods():
    assert corpus.split_sentences("It is raining. The sun is out. Birds sing.") == [
        "It is raining.", "The sun is out.", "Birds sing."]


def test_split_sentences_keeps_a_number_after_a_period_in_the_sentence():
    # Unicode's rules (UAX #29) do not end a sentence at ". 3": "see No. 3", "in
    # Sec. 4.2", "p. 12" are far more common than a sentence that starts with a digit.
    assert corpus.split_sentences("The sun is out. 3 birds sing. The end.") == [
        "The sun is out. 3 birds sing.", "The end."]


@pytest.mark.parametrize("paragraph, expected", [
    ("今天天气很好。我们去公园吧！你来吗？好的。",
     ["今天天气很好。", "我们去公园吧！", "你来吗？", "好的。"]),
    ("東京は日本の首都です。人口は約1400万人です。",
     ["東京は日本の首都です。", "人口は約1400万人です。"]),
    # A closing bracket stays with its sentence.
    ("「本当ですか？」はい。（終わり。）次です。", ["「本当ですか？」", "はい。", "（終わり。）", "次です。"]),
    ("서울은 크다. 부산도 크다.", ["서울은 크다.", "부산도 크다."]),
    ("Mixed 中文。English follows. 日本語も。", ["Mixed 中文。", "English follows.", "日本語も。"]),
    ("Full-width marks！Then ASCII？Yes．", ["Full-width marks！", "Then ASCII？", "Yes．"]),
])
def test_split_sentences_cjk_punctuation(paragraph, expected):
    assert corpus.split_sentences(paragraph) == expected


@pytest.mark.parametrize("paragraph, expected", [
    ("He came at 3 p.m. on Monday. He left.", ["He came at 3 p.m. on Monday.", "He left."]),
    ("The U.S. economy grew. Prof. Lee agreed.",
     ["The U.S. economy grew.", "Prof. Lee agreed."]),
    ("Version 2.0 is out. See Fig. 3 for details.",
     ["Version 2.0 is out.", "See Fig. 3 for details."]),
    ("Ask the devs. Then they answer.", ["Ask the devs.", "Then they answer."]),
    ("Smith et al. Found it. No.", ["Smith et al. Found it.", "No."]),
    # An abbreviation right after a bracket or a quote.
    ("Tools (e.g. Python) help. Done.", ["Tools (e.g. Python) help.", "Done."]),
    ('He said "Dr. Who" twice. Then left.', ['He said "Dr. Who" twice.', "Then left."]),
    # A closing quote of category Pi (German „…“) stays with its sentence.
    ("Er sagte „Ja.“ Dann ging er.", ["Er sagte „Ja.“", "Dann ging er."]),
])
def test_split_sentences_more_abbreviations_and_numbers(paragraph, expected):
    assert corpus.split_sentences(paragraph) == expected


@pytest.mark.parametrize("paragraph, expected", [
    ("Use a tool, e.g. Python is fine. It works.",
     ["Use a tool, e.g. Python is fine.", "It works."]),
    ("One thing, i.e. The other thing. Next.", ["One thing, i.e. The other thing.", "Next."]),
    ("Apples, pears, etc. And more fruit. Done.",
     ["Apples, pears, etc. And more fruit.", "Done."]),
    ("Mr. Smith met Dr. Jones today. They talked.",
     ["Mr. Smith met Dr. Jones today.", "They talked."]),
    ("See No. 5 in the list. It is short.", ["See No. 5 in the list.", "It is short."]),
])
def test_split_sentences_does_not_split_after_abbreviations(paragraph, expected):
    assert corpus.split_sentences(paragraph) == expected


def test_split_sentences_lower_case_continuation_does_not_split():
    assert corpus.split_sentences("Call os.path. join is next. Then stop.") == [
        "Call os.path. join is next.", "Then stop."]


def test_split_sentences_splits_on_question_and_exclamation_marks():
    assert corpus.split_sentences("Why is it so? Because it is! Then it ends.") == [
        "Why is it so?", "Because it is!", "Then it ends."]


def test_split_sentences_keeps_closing_quotes_and_brackets_with_their_sentence():
    paragraph = 'He said "Go." Then (he went.) [Yes!] \'Fine.\' Done.'
    assert corpus.split_sentences(paragraph) == [
        'He said "Go."', "Then (he went.)", "[Yes!]", "'Fine.'", "Done."]


def test_split_sentences_splits_before_opening_quotes_and_brackets():
    assert corpus.split_sentences('It ends. "Quoted start." (Bracketed start.)') == [
        "It ends.", '"Quoted start."', "(Bracketed start.)"]


def test_split_sentences_normalizes_whitespace_and_joins_lines():
    assert corpus.split_sentences("  A   wrapped\n  sentence\there.\n\nNext  one. ") == [
        "A wrapped sentence here.", "Next one."]


@pytest.mark.parametrize("paragraph", ["", "   \n\t ", "1. 2. 3.", "--- ***", "(42)", "123 456."])
def test_split_sentences_without_letters_gives_nothing(paragraph):
    assert corpus.split_sentences(paragraph) == []


def test_split_sentences_drops_only_the_letterless_sentences():
    assert corpus.split_sentences("Fine. 42. 7! Done here.") == ["Fine.", "Done here."]


def test_split_sentences_counts_the_letterless_sentences():
    stats = corpus.CorpusStats()
    assert corpus.split_sentences("Fine. 2024. 3.5 + 4 = 7.5. Done here.", stats,
                                  ("wiki:train", None, None, 7)) == ["Fine.", "Done here."]
    assert corpus.split_sentences("1. 2.", stats, ("wiki:train", None, None, 9)) == []
    assert (stats.letterless_sentences, stats.first_letterless) == (4, "wiki:train:example 7")
    assert stats.problems() == ["4 sentence(s) without a letter (numbers, rules) skipped, "
                                "first at wiki:train:example 7"]


def test_split_sentences_accepts_non_ascii_letters():
    assert corpus.split_sentences("Ça va bien. Tout est ok.") == ["Ça va bien.", "Tout est ok."]
    assert corpus.split_sentences("ÉÀ.") == ["ÉÀ."]


def test_split_sentences_splits_before_non_ascii_capitals():
    assert corpus.split_sentences("Il pleut. Émile écrit.") == ["Il pleut.", "Émile écrit."]


def test_split_sentences_abbreviation_needs_a_word_boundary():
    assert corpus.split_sentences("Ask the devs. Then they answer.") == [
        "Ask the devs.", "Then they answer."]


# ---------------------------------------------------------------------------- writing


def test_documents_to_lines_puts_an_empty_line_after_each_document():
    docs = [["A first.", "A second."], ["B only."]]
    assert list(corpus.documents_to_lines(docs)) == ["A first.", "A second.", "", "B only.", ""]
    assert list(corpus.documents_to_lines([])) == []
    assert list(corpus.documents_to_lines(iter([["x"]]))) == ["x", ""]


def test_write_corpus_format_and_document_count(tmp_path):
    path = str(tmp_path / "corpus.txt")
    docs = [["A first.", "A second."], ["B only."], ["C one.", "C two.", "C three."]]
    assert corpus.write_corpus(corpus.documents_to_lines(docs), path) == 3
    with open(path, encoding="utf-8") as f:
        assert f.read() == "A first.\nA second.\n\nB only.\n\nC one.\nC two.\nC three.\n\n"
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]  # no .tmp left


def test_write_corpus_is_atomic_and_replaces(tmp_path):
    path = str(tmp_path / "corpus.txt")
    _write_bytes(path, b"old content\n")

    def failing_lines():
        yield "New sentence."
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError):
        corpus.write_corpus(failing_lines(), path)
    with open(path, encoding="utf-8") as f:
        assert f.read() == "old content\n"  # never a partial corpus

    assert corpus.write_corpus(["Néw.", ""], path) == 1
    with open(path, encoding="utf-8") as f:
        assert f.read() == "Néw.\n\n"
    assert not os.path.exists(path + ".tmp")


def test_write_corpus_round_trips_through_read_lines(tmp_path):
    path = str(tmp_path / "corpus.txt")
    docs = [["Héllo wörld.", "Second."], ["Third."]]
    corpus.write_corpus(corpus.documents_to_lines(docs), path)
    lines, stats = _read_all([path])
    assert lines == ["Héllo wörld.", "Second.", "", "Third.", "", ""]
    assert stats.problems() == []


# ---------------------------------------------------------------------------- read_lines


def test_read_lines_txt_strips_and_separates_files(tmp_path):
    a = _write_bytes(tmp_path / "a.txt", b"  First line.  \r\nSecond line.\n\nThird.")
    b = _write_bytes(tmp_path / "b.txt", "Other file \u00e9.\n".encode("utf-8"))
    lines, stats = _read_all([a, b])
    assert lines == ["First line.", "Second line.", "", "Third.", "", "Other file \u00e9.", ""]
    assert stats.files == 2
    assert stats.lines == 5
    assert stats.bytes == os.path.getsize(a) + os.path.getsize(b)
    assert stats.problems() == []
    assert stats.as_dict()["files"] == 2


def test_read_lines_gz(tmp_path):
    path = str(tmp_path / "corpus.txt.gz")
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("Gzipped one.\nGzipped twö.\n\nNew doc.\n")
    plain = _write_bytes(tmp_path / "plain.txt", b"Plain.\n")
    lines, stats = _read_all([path, plain])
    assert lines == ["Gzipped one.", "Gzipped twö.", "", "New doc.", "", "Plain.", ""]
    assert stats.files == 2 and stats.lines == 5
    assert stats.problems() == []


def test_read_lines_is_lazy(tmp_path):
    path = _write_bytes(tmp_path / "a.txt", b"One.\nTwo.\n")
    stats = corpus.CorpusStats()
    it = corpus.read_lines([path, str(tmp_path / "missing.txt")], stats)
    assert next(it) == "One."
    assert stats.files == 1


def test_read_lines_skips_and_counts_invalid_utf8(tmp_path):
    path = _write_bytes(tmp_path / "bad.txt",
                        b"Good line.\n\xff\xfe broken\nAnother good.\n\xc3\x28 also broken\n")
    lines, stats = _read_all([path])
    assert lines == ["Good line.", "Another good.", ""]
    assert stats.invalid_utf8_lines == 2
    assert stats.first_invalid_utf8 == f"{path}:2"
    problems = stats.problems()
    assert len(problems) == 1
    assert "2 line(s) of invalid UTF-8" in problems[0] and f"{path}:2" in problems[0]


def test_read_lines_invalid_utf8_first_location_is_kept_across_files(tmp_path):
    a = _write_bytes(tmp_path / "a.txt", b"ok\nok\n\xff\n")
    b = _write_bytes(tmp_path / "b.txt", b"\xff\n")
    _, stats = _read_all([a, b])
    assert stats.invalid_utf8_lines == 2
    assert stats.first_invalid_utf8 == f"{a}:3"


def test_read_lines_records_empty_files(tmp_path):
    empty = _write_bytes(tmp_path / "empty.txt", b"")
    empty_gz = str(tmp_path / "empty.txt.gz")
    with gzip.open(empty_gz, "wb"):
        pass
    full = _write_bytes(tmp_path / "full.txt", b"Text.\n")
    lines, stats = _read_all([empty, full, empty_gz])
    assert lines == ["", "Text.", "", ""]
    assert stats.empty_files == [empty, empty_gz]
    problems = stats.problems()
    assert len(problems) == 1
    assert "2 empty file(s)" in problems[0] and empty in problems[0]


def test_read_lines_truncates_long_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_LINE_CHARS", 50)
    long_line = "word " * 30  # 150 characters, 149 after strip
    path = _write_bytes(tmp_path / "long.txt",
                        f"Short.\n{long_line}\n{'x' * 50}\n{'y' * 51}\n".encode())
    lines, stats = _read_all([path])
    assert lines == ["Short.", long_line[:50], "x" * 50, "y" * 50, ""]
    assert stats.truncated_lines == 2
    assert stats.first_truncated == f"{path}:2"
    problems = stats.problems()
    assert len(problems) == 1
    assert "2 line(s) longer than 50 characters" in problems[0]
    assert f"{path}:2" in problems[0]


def test_problems_mentions_every_kind(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_LINE_CHARS", 10)
    empty = _write_bytes(tmp_path / "empty.txt", b"")
    mixed = _write_bytes(tmp_path / "mixed.txt", b"ok\n\xff\n" + b"z" * 20 + b"\n")
    _, stats = _read_all([empty, mixed])
    problems = stats.problems()
    assert len(problems) == 3
    text = " ".join(problems)
    assert empty in text and f"{mixed}:2" in text and f"{mixed}:3" in text


def test_why_empty_names_what_was_skipped(tmp_path):
    assert corpus.CorpusStats().why_empty() == "every line is empty"
    path = _write_bytes(tmp_path / "latin1.txt", "Café.\nNaïve.\n".encode("latin-1"))
    lines, stats = _read_all([path])
    assert lines == [""]
    assert stats.why_empty() == f"2 line(s) of invalid UTF-8 skipped, first at {path}:1"


def test_read_lines_missing_file_raises_corpus_error(tmp_path):
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(corpus.CorpusError, match="missing.txt"):
        _read_all([missing])


def test_read_lines_not_gzip_raises_corpus_error_naming_the_file(tmp_path):
    path = _write_bytes(tmp_path / "fake.txt.gz", b"this is not gzip data\n")
    with pytest.raises(corpus.CorpusError) as info:
        _read_all([path])
    assert path in str(info.value)
    assert isinstance(info.value, errors.UserError)


def test_read_lines_truncated_gzip_raises_corpus_error(tmp_path):
    data = gzip.compress(b"Hello world.\n" * 200)
    path = _write_bytes(tmp_path / "cut.txt.gz", data[: len(data) // 2])
    with pytest.raises(corpus.CorpusError, match="cut.txt.gz"):
        _read_all([path])


def test_read_lines_bad_gzip_checksum_raises_corpus_error(tmp_path):
    data = bytearray(gzip.compress(b"Hello world.\n" * 200))
    data[-8] ^= 0xFF  # the CRC32 of the trailer
    path = _write_bytes(tmp_path / "crc.txt.gz", bytes(data))
    with pytest.raises(corpus.CorpusError, match="crc.txt.gz"):
        _read_all([path])


def test_read_lines_corrupt_deflate_stream_raises_corpus_error(tmp_path):
    # A valid gzip header, then garbage: zlib.error, which is not an OSError.
    data = gzip.compress(b"Hello world.\n" * 200)
    path = _write_bytes(tmp_path / "corrupt.txt.gz", data[:10] + b"\xff" * 20 + data[30:])
    with pytest.raises(corpus.CorpusError, match="corrupt.txt.gz"):
        _read_all([path])


# ---------------------------------------------------------------------------- expand_globs


def test_expand_globs_no_match_names_the_pattern(tmp_path):
    pattern = str(tmp_path / "*.nothing")
    with pytest.raises(corpus.CorpusError) as info:
        corpus.expand_globs(pattern)
    assert pattern in str(info.value)
    assert isinstance(info.value, errors.UserError)


def test_expand_globs_comma_separated(tmp_path):
    for name in ("b1.txt", "a2.txt", "a1.txt", "c.txt.gz"):
        _write_bytes(tmp_path / name, b"x\n")
    (tmp_path / "a_dir.txt").mkdir()  # directories never match
    pattern = f"{tmp_path}/a*.txt , {tmp_path}/c.txt.gz,{tmp_path}/b*.txt,"
    assert corpus.expand_globs(pattern) == [
        str(tmp_path / "a1.txt"), str(tmp_path / "a2.txt"), str(tmp_path / "c.txt.gz"),
        str(tmp_path / "b1.txt")]


def test_expand_globs_overlapping_globs_give_each_file_once(tmp_path, caplog):
    (tmp_path / "sub").mkdir()
    a = _write_bytes(tmp_path / "a.txt", b"x\n")
    deep = _write_bytes(tmp_path / "sub" / "b.txt", b"x\n")
    pattern = f"{tmp_path}/*.txt,{tmp_path}/**/*.txt,{tmp_path}/sub/../a.txt"
    with caplog.at_level("WARNING"):
        assert corpus.expand_globs(pattern) == [str(a), str(deep)]
    assert "2 of the 4 files matched are matched more than once" in caplog.text


def test_expand_globs_one_part_without_match_fails(tmp_path):
    _write_bytes(tmp_path / "a.txt", b"x\n")
    bad = str(tmp_path / "zz*.txt")
    with pytest.raises(corpus.CorpusError, match="zz"):
        corpus.expand_globs(f"{tmp_path}/a.txt,{bad}")


def test_expand_globs_directory_only_match_fails(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(corpus.CorpusError):
        corpus.expand_globs(str(tmp_path / "fold*"))


def test_expand_globs_empty_pattern_fails():
    with pytest.raises(corpus.CorpusError, match="no file pattern"):
        corpus.expand_globs(" , ,")


def test_expand_globs_recursive(tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    deep = _write_bytes(tmp_path / "x" / "y" / "deep.txt", b"x\n")
    top = _write_bytes(tmp_path / "top.txt", b"x\n")
    assert corpus.expand_globs(f"{tmp_path}/**/*.txt") == sorted([deep, top])


# ---------------------------------------------------------------------------- open_corpus


@pytest.mark.parametrize("kwargs", [
    {},
    {"input_pattern": "", "tfds_name": ""},
    {"input_pattern": "a.txt", "tfds_name": "some_dataset"},
])
def test_open_corpus_needs_exactly_one_source(kwargs):
    with pytest.raises(corpus.CorpusError, match="exactly one"):
        corpus.open_corpus(**kwargs)


def test_open_corpus_input_files(tmp_path):
    a = _write_bytes(tmp_path / "a.txt", b"Alpha one.\nAlpha two.\n")
    b = _write_bytes(tmp_path / "b.txt", b"Beta.\n")
    source = corpus.open_corpus(input_pattern=f"{tmp_path}/*.txt")
    assert source.total_bytes == os.path.getsize(a) + os.path.getsize(b)
    assert source.source == {"input": f"{tmp_path}/*.txt", "files": 2}
    assert list(source.lines) == ["Alpha one.", "Alpha two.", "", "Beta.", ""]
    assert source.stats.files == 2 and source.stats.lines == 3
    # For plain text, bytes read reach the announced total exactly (progress 100%).
    assert source.stats.bytes == source.total_bytes


def test_open_corpus_no_matching_input_fails_early(tmp_path):
    with pytest.raises(corpus.CorpusError, match="nothing"):
        corpus.open_corpus(input_pattern=str(tmp_path / "nothing*.txt"))


def test_open_corpus_corrupt_gz_fails_when_iterated(tmp_path):
    path = _write_bytes(tmp_path / "bad.txt.gz", b"not gzip at all\n")
    source = corpus.open_corpus(input_pattern=path)
    with pytest.raises(corpus.CorpusError) as info:
        list(source.lines)
    assert path in str(info.value)


def test_open_corpus_gz_progress_bytes_match_total(tmp_path):
    path = str(tmp_path / "corpus.txt.gz")
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("The same sentence again.\n" * 500)
    source = corpus.open_corpus(input_pattern=path)
    assert source.total_bytes is None  # no true total: no ETA rather than a wrong one
    assert source.size_estimate == 4 * os.path.getsize(path)
    list(source.lines)
    assert source.stats.bytes == 500 * len("The same sentence again.\n")


# ---------------------------------------------------------------------------- TFDS

_TFDS_NAME = "tiny_text_corpus"
_TFDS_TEXTS = [
    b"First sentence here. Second one follows!\nA new paragraph.",
    b"Only one.",
    b"Third example? Yes.\n\n",
    b"Bad \xff bytes here.",
]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return helpers.write_tfds_dataset(str(tmp_path_factory.mktemp("tfds")), _TFDS_NAME,
                                      _TFDS_TEXTS)


# One document per example; TFDS shuffles examples when preparing, so their order in
# the dataset is not the order above (the bad example yields no document).
_TFDS_DOCUMENTS = [["First sentence here.", "Second one follows!", "A new paragraph."],
                   ["Only one."],
                   ["Third example?", "Yes."]]


def _documents(lines):
    """Corpus lines back into documents; checks that the last line closes a document."""
    assert lines and lines[-1] == ""
    documents, current = [], []
    for line in lines:
        if line:
            current.append(line)
        else:
            documents.append(current)
            current = []
    return documents


def test_tfds_corpus_lines(tfds_dir):
    source = corpus.open_corpus(tfds_name=f"{_TFDS_NAME}:train", tfds_data_dir=tfds_dir)
    documents = _documents(list(source.lines))
    assert sorted(documents) == sorted(_TFDS_DOCUMENTS)
    assert source.total_bytes is None
    assert source.source == {"tfds": f"{_TFDS_NAME}:train", "tfds_data_dir": tfds_dir,
                             "text_key": "text"}
    stats = source.stats
    assert stats.files == 1
    assert stats.lines == 6  # sentences
    assert stats.bytes == sum(len(t) for t in _TFDS_TEXTS)
    assert stats.invalid_utf8_lines == 1
    assert re.fullmatch(rf"{_TFDS_NAME}:train:example [1-4]", stats.first_invalid_utf8)
    problems = stats.problems()
    assert len(problems) == 1 and stats.first_invalid_utf8 in problems[0]


def test_tfds_progress_counts_documents_of_the_known_total(tfds_dir):
    source = corpus.open_corpus(tfds_name=f"{_TFDS_NAME}:train", tfds_data_dir=tfds_dir)
    assert source.stats.total_documents == len(_TFDS_TEXTS)
    lines = []
    progress, read = corpus.progress_of(source, log=lines.append)
    for _ in source.lines:
        progress.update(read())
    progress.update(read(), force=True)
    # Every example read, the undecodable one too (it is counted as skipped).
    assert lines[-1].startswith(f"{len(_TFDS_TEXTS)}/{len(_TFDS_TEXTS)} documents (100.0%)")
    assert "ETA" in lines[-1]


def test_tfds_default_split_is_train(tfds_dir):
    source = corpus.open_corpus(tfds_name=_TFDS_NAME, tfds_data_dir=tfds_dir)
    assert sorted(_documents(list(source.lines))) == sorted(_TFDS_DOCUMENTS)


def test_tfds_truncates_long_sentences(tfds_dir, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_LINE_CHARS", 10)
    source = corpus.open_corpus(tfds_name=f"{_TFDS_NAME}:train", tfds_data_dir=tfds_dir)
    lines = list(source.lines)
    expected = sorted(s[:10] for doc in _TFDS_DOCUMENTS for s in doc)
    assert sorted(line for line in lines if line) == expected
    assert source.stats.truncated_lines == 4
    assert re.fullmatch(rf"{_TFDS_NAME}:train:example:[1-4]", source.stats.first_truncated)
    assert "longer than 10 characters" in " ".join(source.stats.problems())


def test_tfds_wrong_text_key(tfds_dir):
    with pytest.raises(corpus.CorpusError) as info:
        corpus.open_corpus(tfds_name=f"{_TFDS_NAME}:train", tfds_data_dir=tfds_dir,
                           tfds_text_key="body")
    message = str(info.value)
    assert "'body'" in message and "'text'" in message and _TFDS_NAME in message


def test_tfds_text_key_of_a_non_text_feature(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    features = {"text": tfds.features.Text(), "title": tfds.features.Text(),
                "label": tfds.features.Scalar(tf.int64)}
    tfds.dataset_builders.TfDataBuilder(
        name="labelled_text", version="1.0.0", data_dir=str(tmp_path),
        split_datasets={"train": tf.data.Dataset.from_tensor_slices(
            {"text": [b"A b."], "title": [b"T."], "label": [1]})},
        features=tfds.features.FeaturesDict(features)).download_and_prepare()
    with pytest.raises(corpus.CorpusError) as info:
        corpus.open_corpus(tfds_name="labelled_text", tfds_data_dir=str(tmp_path),
                           tfds_text_key="label")
    assert str(info.value) == ("--tfds=labelled_text: --tfds_text_key='label' is not a "
                               "text feature but int64; choose one of text, title")


def test_tfds_unknown_dataset(tfds_dir):
    with pytest.raises(corpus.CorpusError) as info:
        corpus.open_corpus(tfds_name="no_such_dataset_xyz:train", tfds_data_dir=tfds_dir)
    assert "no_such_dataset_xyz" in str(info.value)
    assert isinstance(info.value, errors.UserError)


def test_tfds_unknown_split(tfds_dir):
    with pytest.raises(corpus.CorpusError, match="validation"):
        corpus.open_corpus(tfds_name=f"{_TFDS_NAME}:validation", tfds_data_dir=tfds_dir)


def test_tfds_error_with_empty_message_is_a_corpus_error(monkeypatch, tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")

    def builder(*args, **kwargs):
        raise FileNotFoundError()

    monkeypatch.setattr(tfds, "builder", builder)
    with pytest.raises(corpus.CorpusError, match="some_dataset"):
        corpus.open_corpus(tfds_name="some_dataset:train", tfds_data_dir=str(tmp_path))


def test_ranges_that_tile_a_file_read_every_document_once_whole(tmp_path):
    """Whatever the cut points: blank runs, whitespace-only and \\r\\n lines, bad UTF-8,
    no final newline; the ranges' lines and counts are the whole file's."""
    path = tmp_path / "c.txt"
    path.write_bytes(b"a b\nc\n\n\n d e \r\n\r\n  \n\xff\xfe\nf\n\xe3\x80\x80\ng h\n\ni")
    whole_stats = corpus.CorpusStats()
    whole = _documents(list(corpus.read_lines([str(path)], whole_stats)))
    size = path.stat().st_size
    for range_bytes in range(1, size + 2):
        stats = corpus.CorpusStats()
        parts = corpus.split_files([str(path)], range_bytes)
        lines = [line for part in parts for line in corpus.read_range(part, stats)]
        assert [d for d in _documents(lines) if d] == [d for d in whole if d], range_bytes
        assert ((stats.bytes, stats.lines, stats.files, stats.invalid_utf8_lines) ==
                (whole_stats.bytes, whole_stats.lines, 1, 1)), range_bytes


def test_a_corpus_on_a_url_file_system_reads_as_a_local_one(tmp_path):
    """gs:// (a TPU user's corpus) as TF's `ram://` stands for it: the same globs,
    sizes, lines of .txt and .gz files, and ranges as from a local disk."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    url = f"ram://corpus_test_{os.getpid()}"
    text = b"a b\nc\n\n\n d e \r\n\r\n\xff\xfe\nf\n\ng h\n\ni"
    for name, data in (("one.txt", text), ("two.txt.gz", gzip.compress(text))):
        _write_bytes(tmp_path / name, data)
        with tf.io.gfile.GFile(f"{url}/{name}", "wb") as f:
            f.write(data)
    local, remote = corpus.open_corpus(f"{tmp_path}/*"), corpus.open_corpus(f"{url}/*")
    assert remote.paths == [f"{url}/one.txt", f"{url}/two.txt.gz"]
    assert list(remote.lines) == list(local.lines)
    assert remote.size_estimate == local.size_estimate
    assert remote.stats.as_dict() == {**local.stats.as_dict(), "first_invalid_utf8":
                                      f"{url}/one.txt:7"}  # the same bytes, \r\n too
    parts = corpus.split_files([f"{url}/one.txt"], 5)
    assert len(parts) > 1
    assert [line for p in parts for line in corpus.read_range(p, corpus.CorpusStats())
            if line] == [line for line in corpus.read_lines([str(tmp_path / "one.txt")],
                                                             corpus.CorpusStats()) if line]
    assert corpus.write_corpus(["x", "", "y", ""], f"{url}/out/c.txt") == 2
    assert tf.io.gfile.listdir(f"{url}/out") == ["c.txt"]
    tf.io.gfile.rmtree(url)


def test_tfds_examples_are_numbered_in_the_splits_read_from_their_ids():
    """Both readers (in process, Beam) number an example from TFDS's id of it: shards one
    after another, a later split of "a+b" after all of a's, a sliced split in the whole
    split; an id of another form as it is."""
    import types  # pylint: disable=g-import-not-at-top
    split = lambda n, shards: types.SimpleNamespace(num_examples=n, shard_lengths=shards)
    builder = types.SimpleNamespace(info=types.SimpleNamespace(splits={
        "train": split(10, [4, 6]), "test": split(5, [5])}))
    train_1 = b"wiki-train.tfrecord-00001-of-00002__2"
    test_0 = b"wiki-test.tfrecord-00000-of-00001__0"
    assert corpus.TfdsExampleNumbers(builder, "train")(train_1) == 4 + 2 + 1
    assert corpus.TfdsExampleNumbers(builder, "train[5:]")(train_1) == 7
    both = corpus.TfdsExampleNumbers(builder, "train+test[:2]")
    assert (both(test_0), both(train_1)) == (11, 7)
    assert corpus.TfdsExampleNumbers(builder, "test")(test_0) == 1
    assert corpus.TfdsExampleNumbers(builder, "train")(b"not-an-id") == "not-an-id"
