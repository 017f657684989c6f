"""CoNLL files and the tag schemes: reading (plain, gzipped, the sets' file names), the
schemes written and read back, strict transitions, one-line errors naming file:line."""

import gzip
import random

import pytest

from electra_tf import errors
from electra_tf.finetuning.tagging import conll
from tests.finetuning.tagging import generated


def _random_spans(rng, length):
    """Non-overlapping spans over `length` words, touching ones of one type included."""
    spans, i = [], 0
    while i < length:
        if rng.random() < 0.5:
            n = rng.randint(1, min(3, length - i))
            spans.append(conll.Span(rng.choice("AB"), i, i + n))
            i += n
        else:
            i += 1
    return spans


@pytest.mark.parametrize("scheme", conll.SCHEMES)
def test_every_scheme_writes_spans_that_read_back(scheme):
    rng = random.Random(0)
    for _ in range(300):
        length = rng.randint(0, 12)
        spans = _random_spans(rng, length)
        tags = conll.tags(spans, length, scheme)
        assert conll.spans(tags) == spans, tags
        assert conll.first_invalid(tags, scheme) is None
        for other in conll.SCHEMES:  # conversion: the same spans in another scheme
            assert conll.spans(conll.tags(conll.spans(tags), length, other)) == spans


def test_schemes_differ_where_they_should():
    spans = [conll.Span("PER", 0, 2), conll.Span("PER", 2, 3), conll.Span("LOC", 4, 5)]
    assert conll.tags(spans, 5, "iob1") == ["I-PER", "I-PER", "B-PER", "O", "I-LOC"]
    assert conll.tags(spans, 5, "iob2") == ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    assert conll.tags(spans, 5, "bioes") == ["B-PER", "E-PER", "S-PER", "O", "S-LOC"]
    # Lenient reading (conlleval's): an I after O or after another type starts a chunk.
    assert conll.spans(["O", "I-X", "I-Y", "E-Y", "S-Y"]) == [
        conll.Span("X", 1, 2), conll.Span("Y", 2, 4), conll.Span("Y", 4, 5)]
    assert conll.first_invalid(["B-X", "I-X", "O", "B-X"], "iob1") == 0
    assert conll.first_invalid(["B-X", "I-X"], "bioes") == 1
    assert conll.labels({"PER", "LOC"}, "iob2") == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def test_reads_plain_and_gzipped_files_by_the_sets_names(tmp_path):
    items = generated.sentences(20, seed=3)
    plain = generated.write(str(tmp_path / "train.txt"), items, "iob1", columns=4)
    zipped = generated.write(str(tmp_path / "valid.txt.gz"), items, "iob1", columns=4)
    for path in (plain, zipped):
        read = conll.read(path, "iob1", strict=True)
        assert read.words == [w for w, _ in items] and len(read) == 20
        assert [conll.spans(t) for t in read.tags] == [s for _, s in items]
        assert read.types() == {"PER", "LOC", "ORG"} and read.lines[0] == 3  # -DOCSTART-
    assert conll.find(str(tmp_path), "train") == plain
    assert conll.find(str(tmp_path), "validation") == zipped
    assert conll.find(str(tmp_path), "test") is None
    generated.write(str(tmp_path / "eng.testb"), items)
    assert conll.find(str(tmp_path), "test") == str(tmp_path / "eng.testb")
    # An IOB2 file reads as IOB1 leniently (the same spans), and fails strict IOB1.
    iob2 = generated.write(str(tmp_path / "iob2.txt"), items, "iob2")
    assert conll.read(iob2, "iob1").tags == conll.read(iob2, "iob2").tags
    with pytest.raises(conll.TaggingDataError, match=r"iob2.txt:\d+: 'B-\w+' after "
                       r"'(O|the sentence start)' is not valid IOB1 \(strict mode\) "
                       r"\(config.data.on_bad"):
        conll.read(iob2, "iob1", strict=True)


def _file(tmp_path, text, name="bad.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("text,line,message", [
    ("EU B-ORG\nrejects O\n\nGerman B-MISC\n", 4,
     "tag 'B-MISC': the training data has no type 'MISC' (its types: ORG, PER)"),
    ("EU NNP B-ORG\nrejects O\n", 2, "2 columns; the file's rows have 3 (a word, its "
     "columns, the tag last)"),
    ("EU E-ORG\n", 1, "tag 'E-ORG' is not O or B/I-TYPE (IOB2)"),
    ("EU ORG\n", 1, "tag 'ORG' is not O or B/I-TYPE (IOB2)"),
    ("EU B-\n", 1, "tag 'B-' is not O or B/I-TYPE (IOB2)"),
])
def test_a_bad_row_is_one_line_naming_file_and_line(tmp_path, text, line, message):
    path = _file(tmp_path, "-DOCSTART- O\n\n" + text)
    with pytest.raises(conll.TaggingDataError) as e:
        conll.read(path, "iob2", types={"ORG", "PER"})
    assert str(e.value) == f"{path}:{line + 2}: {message}" + errors.SKIP_HINT


def test_on_bad_skip_drops_and_counts_the_sentences(tmp_path):
    path = _file(tmp_path, "EU B-ORG\n\nrejects I-ORG\nit O\n\nGerman B-MISC\n\n"
                 "call O\nto B-ORG\n\n")
    read = conll.read(path, "iob2", types={"ORG"}, strict=True, on_bad="skip")
    assert read.words == [["EU"], ["call", "to"]] and read.skipped == 2
    assert read.first_skipped == (f"{path}:3: 'I-ORG' after 'the sentence start' is not "
                                  "valid IOB2 (strict mode)")
    with pytest.raises(conll.TaggingDataError, match=r"bad.txt: no sentences \(1 skipped\)"):
        conll.read(_file(tmp_path, "x B-Y\n"), "iob2", types={"ORG"}, on_bad="skip")


def test_unreadable_files_are_one_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"EU B-ORG\n\nbad \xff O\n")
    with pytest.raises(conll.TaggingDataError, match=r"bad.txt:3: invalid UTF-8 at byte 14"):
        conll.read(str(bad), "iob2")
    fake = tmp_path / "x.txt.gz"
    fake.write_bytes(b"not gzip")
    with pytest.raises(conll.TaggingDataError, match=r"x.txt.gz: not a gzip file"):
        conll.read(str(fake), "iob2")
    with gzip.open(tmp_path / "empty.txt.gz", "wb") as f:
        f.write(b"-DOCSTART- O\n\n")
    with pytest.raises(conll.TaggingDataError, match=r"empty.txt.gz: no sentences$"):
        conll.read(str(tmp_path / "empty.txt.gz"), "iob2")
    with pytest.raises(conll.TaggingDataError, match="scheme='bio': choose one of"):
        conll.read(str(bad), "bio")


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
    """Editors on Windows save UTF-8 with a BOM: it must not hide -DOCSTART- (a spurious
    sentence) or stick to the first word."""
    for head, first in (("-DOCSTART- -X- -X- O\n\n", 3), ("", 1)):
        bom = tmp_path / "bom.txt"
        bom.write_bytes(("\ufeff" + head + "EU NNP B-NP B-ORG\nx NN O O\n\n").encode())
        read = conll.read(str(bom), "iob2")
        assert read.words == [["EU", "x"]] and read.lines == [first]


def test_predictions_file_is_conllevals_input():
    text = conll.write([["EU", "rejects"], ["Paris"]], [["B-ORG", "O"], ["B-LOC"]],
                       [["B-ORG", "O"], ["O"]])
    assert text == "EU B-ORG B-ORG\nrejects O O\n\nParis B-LOC O\n\n"


@pytest.mark.parametrize("tag_lists,scheme", [
    ([["B-PER", "I-PER", "O", "B-LOC"]], "iob2"),
    ([["O", "I-PER", "I-PER", "O", "I-LOC"]], "iob1"),                  # I-X after O
    ([["I-PER", "O"]], "iob1"),                                         # at the start
    ([["I-PER", "I-LOC"]], "iob1"),                                     # after another type
    ([["I-PER", "B-PER", "O", "I-LOC"]], "iob1"),   # B-X after its type: IOB1's one B
    ([["B-PER", "I-PER", "B-PER"]], "iob2"),
    # The majority decides: a stray I-X begins a chunk in IOB2, a stray B-X in IOB1.
    ([["B-PER", "I-PER", "O", "B-LOC"], ["O", "I-LOC"]], "iob2"),
    ([["I-PER", "O", "I-LOC"], ["O", "B-ORG"]], "iob1"),
    ([["I-PER", "E-PER", "O", "S-LOC"]], "bioes"),
    ([["O", "O"]], "iob2"),
])
def test_the_scheme_is_detected_from_the_tags(tag_lists, scheme):
    assert conll.detect_scheme(tag_lists) == scheme


def test_columns_split_at_ascii_space_and_tab_only(tmp_path):
    """conlleval splits a row at spaces and tabs: a no-break space or an ideographic
    space is part of the word."""
    path = tmp_path / "train.txt"
    path.write_bytes("New\u00a0York\tNN B-LOC\n北京\u3000市  NN\tB-LOC\r\n\n".encode("utf-8"))
    read = conll.read(str(path), "iob2")
    assert read.words == [["New\u00a0York", "北京\u3000市"]]
    assert read.tags == [["B-LOC", "B-LOC"]]


def test_auto_is_not_a_scheme_to_write():
    """"auto" is replaced by the training file's scheme before any tag is written."""
    with pytest.raises(ValueError, match="scheme='auto': not one of iob1, iob2, bioes"):
        conll.tags([conll.Span("PER", 0, 1)], 1, "auto")
