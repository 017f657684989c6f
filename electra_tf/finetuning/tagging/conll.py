"""CoNLL-format tagged sentences, and the tag schemes: IOB1, IOB2 (BIO) and BIOES.

A file holds one word per line with its columns ("EU NNP B-NP B-ORG"; separated by
ASCII spaces or tabs, as conlleval separates them), the tag in the last column, a blank line between sentences; `-DOCSTART-` lines are skipped. UTF-8, plain
or gzipped (`.gz`). Every tag is `O` or PREFIX-TYPE, PREFIX one of the scheme's (B, I;
BIOES adds E, S).

Tags ⇄ spans: `spans` reads any scheme leniently, by conlleval's chunk rules (a chunk
starts at B or S, at I or E after O or another type; it ends before B, S or O, after E or
S, at a change of type), so IOB1 and IOB2 files read alike. `tags` writes spans in a
scheme. A sentence is valid in a scheme (`first_invalid`, strict mode) when its tags are
the scheme's own writing of their spans: IOB2's I-X after O, or IOB1's B-X not between
two X chunks, is not.

>>> tags_ = ["B-PER", "I-PER", "O", "I-LOC", "B-LOC"]
>>> [(s.type, s.start, s.end) for s in spans(tags_)]
[('PER', 0, 2), ('LOC', 3, 4), ('LOC', 4, 5)]
>>> tags(spans(tags_), 5, "iob1")
['I-PER', 'I-PER', 'O', 'I-LOC', 'B-LOC']
>>> tags(spans(tags_), 5, "bioes")
['B-PER', 'E-PER', 'O', 'S-LOC', 'S-LOC']
>>> first_invalid(tags_, "iob2")  # I-LOC after O
3
"""

import dataclasses
import gzip
import io
import os
import re

import tensorflow as tf

from electra_tf import errors
from electra_tf.finetuning import tfds as tfds_lib

SCHEMES = ("iob1", "iob2", "bioes")
PREFIXES = {"iob1": ("B", "I"), "iob2": ("B", "I"), "bioes": ("B", "I", "E", "S")}
# Each split's file names in config.data.dir, first found wins (each also as NAME.gz):
# the original ELECTRA's, then CoNLL-2003's distributions (valid.txt; eng.testa/b).
FILES = {"train": ("train.txt", "eng.train"),
         "validation": ("dev.txt", "valid.txt", "eng.testa"),
         "test": ("test.txt", "eng.testb")}


class TaggingDataError(errors.UserError):
    """Tagged data that cannot be used: the message names the file and the line."""


@dataclasses.dataclass(frozen=True)
class Span:
    type: str
    start: int     # words [start, end)
    end: int


def split_tag(tag: str) -> tuple[str, str]:
    """("B", "PER") of "B-PER"; ("O", "") of "O"."""
    if tag == "O":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def spans(tag_list) -> list[Span]:
    """The chunks of a tag sequence of any scheme, by conlleval's rules (module docstring)."""
    found, start = [], None
    prev_prefix, prev_kind = "O", ""
    for i, tag in enumerate(list(tag_list) + ["O"]):
        prefix, kind = split_tag(tag)
        ends = prev_prefix in ("E", "S") or (
            prev_prefix in ("B", "I") and prefix in ("B", "S", "O")) or (
            prev_prefix != "O" and prev_kind != kind)
        starts = prefix in ("B", "S") or (
            prefix in ("I", "E") and prev_prefix in ("E", "S", "O")) or (
            prefix != "O" and prev_kind != kind)
        if ends and start is not None:
            found.append(Span(prev_kind, start, i))
            start = None
        if starts:
            start = i
        prev_prefix, prev_kind = prefix, kind
    return found


def tags(span_list, length: int, scheme: str) -> list[str]:
    """`length` tags writing `span_list` (non-overlapping) in `scheme`."""
    if scheme not in SCHEMES:  # "auto" is resolved from the training file first
        raise ValueError(f"scheme={scheme!r}: not one of {', '.join(SCHEMES)}")
    out = ["O"] * length
    previous_end, previous_type = -1, None
    for span in sorted(span_list, key=lambda s: s.start):
        n = span.end - span.start
        if scheme == "bioes":
            names = ["S"] if n == 1 else ["B"] + ["I"] * (n - 2) + ["E"]
        elif scheme == "iob2":
            names = ["B"] + ["I"] * (n - 1)
        else:  # iob1: B only where the previous word ends a chunk of the same type
            touching = previous_end == span.start and previous_type == span.type
            names = ["B" if touching else "I"] + ["I"] * (n - 1)
        out[span.start:span.end] = [f"{p}-{span.type}" for p in names]
        previous_end, previous_type = span.end, span.type
    return out


def first_invalid(tag_list, scheme: str) -> int | None:
    """The first word whose tag is not `scheme`'s writing of the sentence's spans, or None."""
    written = tags(spans(tag_list), len(tag_list), scheme)
    return next((i for i, (a, b) in enumerate(zip(tag_list, written)) if a != b), None)


def detect_scheme(tag_lists) -> str:
    """The scheme a file's tags are written in: "bioes" where an E- or S- tag occurs;
    else "iob1" where more chunks begin with an I-X than with a B-X (a chunk begins at a
    sentence's start, after O, after another type: IOB1 begins one with B-X only after a
    chunk of its type, IOB2 always), else "iob2". By the majority, a stray tag of the
    other scheme in a long file does not decide it."""
    begins = {"B": 0, "I": 0}
    for tag_list in tag_lists:
        prev_prefix, prev_kind = "O", ""
        for tag in tag_list:
            prefix, kind = split_tag(tag)
            if prefix in ("E", "S"):
                return "bioes"
            if prefix in begins and (prev_prefix == "O" or prev_kind != kind):
                begins[prefix] += 1
            prev_prefix, prev_kind = prefix, kind
    return "iob1" if begins["I"] > begins["B"] else "iob2"


def labels(types, scheme: str) -> list[str]:
    """The model's classes: "O", then each type's tags in `scheme` (types sorted)."""
    return ["O"] + [f"{p}-{t}" for t in sorted(types) for p in PREFIXES[scheme]]


# ---------------------------------------------------------------------------- reading


@dataclasses.dataclass
class Sentences:
    words: list[list[str]]
    tags: list[list[str]]          # the file's tags, in its scheme
    lines: list[int]               # each sentence's first line (1-based; TFDS: its index)
    source: str
    skipped: int = 0               # sentences dropped by on_bad="skip"
    first_skipped: str = ""

    def __len__(self) -> int:
        return len(self.words)

    def types(self) -> set[str]:
        return {s.type for t in self.tags for s in spans(t)}


def find(data_dir: str, split: str) -> str | None:
    """The split's file in `data_dir` (`FILES`, plain or .gz), or None."""
    for name in FILES[split]:
        for candidate in (name, name + ".gz"):
            path = os.path.join(data_dir, candidate)
            if tf.io.gfile.exists(path):
                return path
    return None


def _lines(path: str):
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            raw = f.read()
    except (tf.errors.OpError, OSError) as e:
        raise TaggingDataError(f"{path}: cannot read it "
                               f"({getattr(e, 'message', None) or e})") from None
    if path.endswith(".gz"):
        try:
            raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read()
        except (OSError, EOFError) as e:
            raise TaggingDataError(f"{path}: not a gzip file ({e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise TaggingDataError(f"{path}:{line}: invalid UTF-8 at byte {e.start}") from None
    if text.startswith("\ufeff"):  # a byte order mark (Windows editors), not a character
        text = text[1:]
    return text.split("\n")


class _Collector(errors.BadRows):
    """Sentences of rows (word, tag, where), each checked (`read`'s rules): kept, or an
    error naming `where`, or (on_bad="skip") dropped and counted."""

    def __init__(self, source: str, scheme: str, types, strict: bool, on_bad: str):
        errors.check_choice("scheme", scheme, SCHEMES, TaggingDataError)
        super().__init__(on_bad, TaggingDataError)
        self.out = Sentences([], [], [], source)
        self.scheme, self.types, self.strict = scheme, types, strict

    def _problem(self, rows) -> tuple[str, str] | None:
        """(where, what) of the sentence's first bad tag or transition, or None."""
        scheme = self.scheme
        for _, tag, where in rows:
            prefix, kind = split_tag(tag)
            if prefix != "O" and (prefix not in PREFIXES[scheme] or not kind):
                return where, (f"tag {tag!r} is not O or "
                               f"{'/'.join(PREFIXES[scheme])}-TYPE ({scheme.upper()})")
            if self.types is not None and prefix != "O" and kind not in self.types:
                return where, (f"tag {tag!r}: the training data has no type {kind!r} (its "
                               f"types: {', '.join(sorted(self.types)) or 'none'})")
        tag_list = [t for _, t, _ in rows]
        bad = first_invalid(tag_list, scheme) if self.strict else None
        if bad is not None:
            return rows[bad][2], (f"{tag_list[bad]!r} after "
                                  f"{tag_list[bad - 1] if bad else 'the sentence start'!r} "
                                  f"is not valid {scheme.upper()} (strict mode)")
        return None

    def add(self, rows, line: int, problem: tuple[str, str] | None = None) -> None:
        """A sentence's rows; `line`: where it starts; `problem`: the reader's own."""
        problem = problem or self._problem(rows)
        if problem is not None:
            self.bad(*problem)
        else:
            self.out.words.append([w for w, _, _ in rows])
            self.out.tags.append([t for _, t, _ in rows])
            self.out.lines.append(line)

    def done(self) -> Sentences:
        if not self.out.words:
            raise TaggingDataError(f"{self.out.source}: no sentences" + (
                f" ({self.skipped} skipped)" if self.skipped else ""))
        self.out.skipped, self.out.first_skipped = self.skipped, self.first_skipped
        return self.out


# conlleval's column separators: ASCII space and tab (a no-break space is in a word).
_COLUMNS = re.compile("[ \t]+")


def read(path: str, scheme: str, types=None, strict: bool = False,
         on_bad: str = "error") -> Sentences:
    """The sentences of a CoNLL file in `scheme`. `types`: the entity types allowed (the
    training file's; None: any). A bad row (a tag not O or PREFIX-TYPE of the scheme, a type
    not in `types`, a row whose column count differs from the file's first, in strict mode
    an invalid transition) is a `TaggingDataError` naming file:line, or with
    on_bad="skip" drops its sentence, counted in `skipped`."""
    collector = _Collector(path, scheme, types, strict, on_bad)
    columns, rows, first_line, problem = None, [], 0, None
    for number, line in enumerate(_lines(path) + [""], start=1):
        fields = _COLUMNS.split(line.rstrip("\r").strip(" \t"))
        fields = fields if fields != [""] else []
        if not fields:
            if rows:
                collector.add(rows, first_line, problem)
            rows, problem = [], None
            continue
        if fields[0] == "-DOCSTART-":
            continue
        if not rows:
            first_line = number
        columns = columns or len(fields)
        if problem is None and (len(fields) != columns or len(fields) < 2):
            problem = (f"{path}:{number}", f"{len(fields)} columns; the file's rows have "
                       f"{columns} (a word, its columns, the tag last)")
        rows.append((fields[0], fields[-1], f"{path}:{number}"))
    return collector.done()


# TFDS builders of the sets (TFDS 4.9 has none for CoNLL-2000) and their split names.
TFDS_NAMES = {"conll2003": "conll2003"}
TFDS_SPLITS = {"train": "train", "validation": "dev", "test": "test"}


def read_tfds(name: str, split: str, data_dir: str | None, scheme: str, types=None,
              strict: bool = False, on_bad: str = "error") -> Sentences:
    """`split` of the TFDS set `name` (`TFDS_NAMES`) prepared in `data_dir` (never
    downloaded), its `ner` tags checked as `read` checks a file's."""
    if name not in TFDS_NAMES:
        raise TaggingDataError(f"TFDS has no {name} builder; give its CoNLL files with "
                               "--config.data.dir")
    builder = tfds_lib.prepared_builder(TFDS_NAMES[name], data_dir, TaggingDataError,
                                        "its CoNLL files")
    source = f"{TFDS_NAMES[name]}:{TFDS_SPLITS[split]}"
    names = builder.info.features["ner"].feature.names
    collector = _Collector(source, scheme, types, strict, on_bad)
    rows = builder.as_dataset(split=TFDS_SPLITS[split], shuffle_files=False)
    for i, row in enumerate(rows.as_numpy_iterator()):
        if len(row["tokens"]) and row["tokens"][0] != b"-DOCSTART-":
            collector.add([(w.decode("utf-8"), names[t], f"{source}: sentence {i}, word {j}")
                           for j, (w, t) in enumerate(zip(row["tokens"], row["ner"]))], i)
    return collector.done()


def write(words, gold, predicted) -> str:
    """conlleval's input: "word gold predicted" per line, a blank line after each sentence."""
    return "".join("".join(f"{w} {g} {p}\n" for w, g, p in zip(*sentence)) + "\n"
                   for sentence in zip(words, gold, predicted))
