"""Pre-training corpora as a stream of lines.

Every corpus reaches the rest of the code in the format the original ELECTRA tooling
reads: one sentence per line, and an empty line between documents. Two sources read
here, and the built-in sample corpus made in `sample_corpus.py`:

* `read_lines(pattern)`: the user's own text files (`.txt` or `.txt.gz`, globs).
* `tfds_lines(name)`: any TFDS dataset with a text feature, from a local data dir.

Bad input never stops a long job silently or with a traceback: undecodable lines,
over-long lines and (TFDS) sentences without a letter are skipped or truncated and
counted in `CorpusStats`, and what cannot be read at all raises `CorpusError` naming
the file.
"""

import contextlib
import dataclasses
import glob
import gzip
import io
import os
import re
import unicodedata
import zlib
from typing import Callable, Iterable, Iterator

from absl import logging
from icu4py import breakers as icu_breakers
import tensorflow as tf

from electra_tf import errors
from electra_tf import progress as progress_lib
from electra_tf import workdir as workdir_lib

# A line this long is cut: no example keeps more than `max_seq_length` wordpieces of a
# sentence anyway, and a multi-megabyte "sentence" would only cost memory.
MAX_LINE_CHARS = 1_000_000

# Abbreviations after which a sentence does not end, although ICU's sentence rules end it
# there (they end a sentence at ". " before a capital unless CLDR's suppressions list the
# word; those are not used: see `split_sentences`). Matched as whole words.
_ABBREVIATIONS = frozenset((
    "e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "ca.", "al.", "Mr.", "Mrs.", "Ms.",
    "Dr.", "Prof.", "St.", "Jr.", "Sr.", "Mt.", "No.", "Nos.", "Fig.", "Figs.", "Vol.",
    "Ch.", "Sec.", "Eq.", "pp.", "Inc.", "Ltd.", "Co.", "Corp.", "Jan.", "Feb.", "Mar.",
    "Apr.", "Aug.", "Sep.", "Sept.", "Oct.", "Nov.", "Dec."))
_LETTER = re.compile(r"[^\W\d_]")


class CorpusError(errors.UserError):
    """A corpus that cannot be read: the message names the file or dataset."""


@dataclasses.dataclass
class CorpusStats:
    """What reading a corpus skipped or changed, for the end-of-job summary."""

    files: int = 0
    bytes: int = 0
    lines: int = 0
    empty_files: list = dataclasses.field(default_factory=list)
    invalid_utf8_lines: int = 0
    first_invalid_utf8: str = ""  # "path:line" of the first one
    truncated_lines: int = 0
    first_truncated: str = ""
    letterless_sentences: int = 0  # TFDS text: sentences `split_sentences` dropped
    first_letterless: str = ""
    documents: int = 0        # TFDS: examples read so far (skipped ones included)
    total_documents: int = 0  # TFDS: the split's example count (0: unknown)

    def problems(self) -> list[str]:
        """One sentence per kind of skipped or changed input; empty when clean."""
        notes = []
        if self.empty_files:
            notes.append(f"{len(self.empty_files)} empty file(s) skipped, e.g. "
                         f"{self.empty_files[0]}")
        if self.invalid_utf8_lines:
            notes.append(f"{self.invalid_utf8_lines} line(s) of invalid UTF-8 skipped, "
                         f"first at {self.first_invalid_utf8}")
        if self.truncated_lines:
            notes.append(f"{self.truncated_lines} line(s) longer than {MAX_LINE_CHARS:,} "
                         f"characters truncated, first at {self.first_truncated}")
        if self.letterless_sentences:
            notes.append(f"{self.letterless_sentences} sentence(s) without a letter "
                         f"(numbers, rules) skipped, first at {self.first_letterless}")
        return notes

    def why_empty(self) -> str:
        """Why a corpus gave no text, for the error that says so: what reading skipped
        (`problems`), or else that every line is empty."""
        return "; ".join(self.problems()) or "every line is empty"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------- cleaning


def split_sentences(paragraph: str, stats: CorpusStats | None = None,
                    place: tuple = ()) -> list[str]:
    """Splits one paragraph of running text into sentences, with ICU's sentence breaker
    (Unicode's UAX #29 rules: Latin, CJK 。！？ and full-width punctuation, closing
    quotes and brackets, decimals), keeping abbreviations (`_ABBREVIATIONS`) inside their
    sentence. Sentences without a letter (numbers, rules) are dropped, and counted in
    `stats` if given (the first one's `_place(*place)` kept).

    >>> split_sentences("It is. It is not, e.g. here. (Yes.) Dr. Who came.")
    ['It is.', 'It is not, e.g. here.', '(Yes.)', 'Dr. Who came.']
    >>> split_sentences("今天天气很好。你来吗？好的！")
    ['今天天气很好。', '你来吗？', '好的！']
    """
    text = " ".join(paragraph.split())
    if not text:
        return []
    sentences: list[str] = []
    pending = ""
    # Locale "en" without CLDR's suppressions ("en@ss=standard"): ICU 78 matches those as
    # suffixes, so "devs." ends like "vs." and never ends a sentence.
    for segment in icu_breakers.SentenceBreaker(text, "en"):
        pending += segment
        # UAX #29 counts opening brackets and quotes among the "Close" characters that
        # end a sentence ("はい。（終わり。）" breaks after "（"): one that ends a segment
        # with no space after it opens the next sentence. (With a space after it, as
        # German's closing „…“ has, it stays.)
        carried = ""
        while pending and _opens(pending[-1]) and pending[:-1].strip():
            carried = pending[-1] + carried
            pending = pending[:-1]
        # "(e.g. Foo)" and '"Dr. Who"' break before the capital: the abbreviation is
        # the last word without the brackets or quotes before it.
        last_word = pending.rstrip().rsplit(None, 1)[-1]
        while last_word[:1] and (last_word[0] in "\"'" or _opens(last_word[0])):
            last_word = last_word[1:]
        if last_word in _ABBREVIATIONS:
            pending += carried
            continue  # the sentence goes on
        sentences.append(pending.strip())
        pending = carried
    if pending.strip():
        sentences.append(pending.strip())
    kept = [s for s in sentences if _LETTER.search(s)]
    if stats is not None and len(kept) < len(sentences):
        stats.letterless_sentences += len(sentences) - len(kept)
        stats.first_letterless = stats.first_letterless or _place(*place)
    return kept


def _opens(char: str) -> bool:
    """An opening bracket or quote (Unicode categories Ps, Pi)."""
    return unicodedata.category(char) in ("Ps", "Pi")


def documents_to_lines(documents: Iterable[list[str]]) -> Iterator[str]:
    """Flattens documents into the corpus line format (an empty line after each)."""
    for document in documents:
        yield from document
        yield ""


def write_corpus(lines: Iterable[str], path: str) -> int:
    """Writes corpus lines to `path` (a file or a URL) atomically; returns the number of
    documents."""
    tmp = workdir_lib.aside(path)
    documents = 0
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            for line in lines:
                f.write(line + "\n")
                documents += not line
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp):  # no half-written corpus left beside the output
            tf.io.gfile.remove(tmp)
        raise
    return documents


def _is_url(path: str) -> bool:
    return "://" in path


def _size(path: str) -> int:
    return tf.io.gfile.stat(path).length if _is_url(path) else os.path.getsize(path)


class _GFileBytes(io.RawIOBase):
    """A tf.io.gfile file as Python's raw bytes: GFile's own readline drops the \r of
    \r\n, which would shift the byte positions `FileRange`s are cut at."""

    def __init__(self, path: str):
        super().__init__()
        self._file = tf.io.gfile.GFile(path, "rb")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._file.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._file.seek(offset, whence)
        return self._file.tell()

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
        super().close()


@contextlib.contextmanager
def _open_binary(path: str):
    """`path` for reading bytes (`.gz` decompressed): Python's own file on a local disk
    (its readline is the faster), tf.io.gfile's for a URL (gs://)."""
    with (io.BufferedReader(_GFileBytes(path)) if _is_url(path) else open(path, "rb")) as raw:
        if not path.endswith(".gz"):
            yield raw
            return
        with gzip.GzipFile(fileobj=raw) as f:
            yield f


# ---------------------------------------------------------------------------- user files


def expand_globs(pattern: str) -> list[str]:
    """Files matching a comma-separated list of globs (each glob's sorted, a file that
    several match kept where first matched); an error if a glob matches none."""
    paths = []
    for part in (p.strip() for p in pattern.split(",")):
        if not part:
            continue
        if _is_url(part):  # gs://: tf.io.gfile's glob (no `**`)
            found = tf.io.gfile.glob(part)
            folders = sorted(p for p in found if tf.io.gfile.isdir(p))
            matches = sorted(set(found) - set(folders))
        else:
            found = glob.glob(part, recursive=True)
            matches = sorted(p for p in found if os.path.isfile(p))
            folders = sorted(p for p in found if os.path.isdir(p))
        if not matches and folders:  # `--input=DIR`: the files in it were meant
            raise CorpusError(f"--input: {folders[0]} is a directory; give its files, "
                              f"e.g. --input='{os.path.join(folders[0], '*.txt')}'")
        if not matches:
            raise CorpusError(f"--input: no file matches {part!r}")
        paths.extend(matches)
    if not paths:
        raise CorpusError("--input: no file pattern given")
    # Overlapping globs ('d/*.txt,d/**/*.txt') would read a file twice.
    unique = {}
    for path in paths:
        unique.setdefault(path if _is_url(path) else os.path.realpath(path), path)
    if len(unique) < len(paths):
        logging.warning("--input: %d of the %d files matched are matched more than once "
                        "(or link to the same file): each is read once",
                        len(paths) - len(unique), len(paths))
    return list(unique.values())


def read_lines(paths: list[str], stats: CorpusStats) -> Iterator[str]:
    """Yields the lines of text files (`.gz` decompressed), stripped, as corpus lines.

    A document never spans two files: an empty line is yielded after each file.
    Undecodable lines are skipped and over-long lines truncated, both counted in
    `stats`; an unreadable file raises `CorpusError` naming it.
    """
    for path in paths:
        yield from read_range(FileRange(path), stats)


@dataclasses.dataclass(frozen=True)
class FileRange:
    """Part of a file: for `start` 0, from its first line; otherwise from just after the
    first blank line that begins at or after byte `start`; in both cases up to and with
    the first blank line that begins at or after byte `end` (None: the end of the file).
    Ranges that tile a file ([0, a), [a, b), ..., [z, None)) read each line once, and a
    document never spans two of them."""

    path: str
    start: int = 0
    end: int | None = None


def split_files(paths: list[str], range_bytes: int) -> list[FileRange]:
    """Each file as ranges of about `range_bytes` (a `.gz` file is one range: a stream
    cannot be entered in the middle), in file order."""
    ranges = []
    for path in paths:
        size = _size(path)
        if path.endswith(".gz") or size <= range_bytes:
            ranges.append(FileRange(path))
            continue
        starts = list(range(0, size, range_bytes))
        ranges.extend(FileRange(path, s, e) for s, e in zip(starts, starts[1:] + [None]))
    return ranges


def read_range(part: FileRange, stats: CorpusStats) -> Iterator[str]:
    """Yields the corpus lines of one `FileRange` (then an empty line), as `read_lines`
    does for a whole file. A bad line is named `path:N` in a range that starts the file,
    `path@byte B` (where the line begins) in the others."""
    path, start, end = part.path, part.start, part.end
    stats.files += not start
    n = 0
    line_start = position = start
    try:
        with _open_binary(path) as f:
            if start:  # to the first line that begins at `start` or later ...
                f.seek(start - 1)
                position += len(f.readline()) - 1
                while True:  # ... and past the first blank line from there
                    line_start = position
                    raw = f.readline()
                    position += len(raw)
                    if not raw or _is_blank(raw):
                        break
                if not raw or (end is not None and line_start >= end):
                    f.seek(0, os.SEEK_END)  # that blank line ends this range too: none
            while True:
                line_start = position
                raw = f.readline()
                if not raw:
                    break
                position += len(raw)
                n += 1
                place = (path, n) if not start else (path, None, line_start)
                line = _decode(raw, stats, place)
                if line is None:
                    continue
                line = _clip(line.strip(), stats, place)
                yield line
                if not line and end is not None and line_start >= end:
                    break  # the next range starts after this blank line
    except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:  # BadGzipFile: an OSError
        line = f"line {n + 1}" if not start else f"the line at byte {line_start}"
        raise CorpusError(f"{path}: cannot read {line}: {e}") from e
    if n == 0 and not start:
        stats.empty_files.append(path)
    stats.lines += n
    yield ""


def _place(name: str, line=None, byte: int | None = None, example=None) -> str:
    """Where a line is, for messages: `path:N`, `path@byte B` or `NAME:example N`."""
    if example is not None:
        return f"{name}:example {example}"
    return f"{name}:{line}" if byte is None else f"{name}@byte {byte}"


def _decode(raw: bytes, stats: CorpusStats, place: tuple) -> str | None:
    """UTF-8 text, or None (counted in `stats`, the first one's `_place` kept)."""
    stats.bytes += len(raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8_lines += 1
        stats.first_invalid_utf8 = stats.first_invalid_utf8 or _place(*place)
        return None


def _is_blank(raw: bytes) -> bool:
    try:
        return not raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False


def _clip(line: str, stats: CorpusStats, place: tuple) -> str:
    if len(line) > MAX_LINE_CHARS:
        stats.truncated_lines += 1
        stats.first_truncated = stats.first_truncated or _place(*place)
        return line[:MAX_LINE_CHARS]
    return line


def tfds_lines(name: str, data_dir: str | None, text_key: str,
               stats: CorpusStats) -> Iterator[str]:
    """Corpus lines from a TFDS dataset `NAME[:split]`: one example is one document.

    Loads the dataset now (so a wrong name fails here) and returns a line iterator.

    The dataset must already be prepared in `data_dir` (nothing is downloaded). Text is
    split into paragraphs at newlines and paragraphs into sentences.
    """
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    dataset_name, _, split = name.partition(":")
    split = split or "train"
    try:
        builder = tfds.builder(dataset_name, data_dir=data_dir)
        dataset = builder.as_dataset(split=split, read_config=tfds_read_config())
    except Exception as e:  # TFDS raises many types for "not there"
        raise CorpusError(f"--tfds={name}: cannot load it from "
                          f"--tfds_data_dir={data_dir}: "
                          f"{(str(e).splitlines() or [type(e).__name__])[0]}") from e
    spec = dataset.element_spec
    if text_key not in spec or text_key == TFDS_ID:
        raise CorpusError(f"--tfds={name}: no feature {text_key!r} (--tfds_text_key); "
                          f"it has {sorted(k for k in spec if k != TFDS_ID)}")
    texts = [k for k, s in sorted(spec.items()) if isinstance(s, tf.TensorSpec)
             and s.dtype == tf.string and s.shape.rank == 0 and k != TFDS_ID]
    if text_key not in texts:  # a label, an image, a sequence: no document's text
        feature = spec[text_key]
        kind = type(feature).__name__
        if isinstance(feature, tf.TensorSpec):
            kind = feature.dtype.name + (f" of shape {feature.shape.as_list()}"
                                         if feature.shape.rank else "")
        raise CorpusError(f"--tfds={name}: --tfds_text_key={text_key!r} is not a text "
                          f"feature but {kind}; choose one of {', '.join(texts) or '(none)'}")
    stats.files += 1
    try:  # the split's example count, for progress (a sliced split has none: unknown)
        stats.total_documents = int(builder.info.splits[split].num_examples)
    except (KeyError, TypeError, ValueError):
        pass
    return _tfds_example_lines(dataset, name, text_key, stats,
                               TfdsExampleNumbers(builder, split))


def _tfds_example_lines(dataset, name, text_key, stats, numbers):
    for example in dataset.as_numpy_iterator():
        yield from tfds_document_lines(example[text_key], name, numbers(example[TFDS_ID]),
                                       stats)


# TFDS's id of each example, which both readers (in process, Beam) ask for.
TFDS_ID = "tfds_id"


def tfds_read_config():
    """How both readers read a TFDS split: with each example's id (`TFDS_ID`), and its
    shards one after another, so that the examples come in the order
    `TfdsExampleNumbers` numbers them (messages name the same example, and the same
    first one, in process and on Beam)."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    return tfds.ReadConfig(add_tfds_id=True, interleave_cycle_length=1)


class TfdsExampleNumbers:
    """Example n of the split read (1-based, its shards one after another; a sliced
    split's examples numbered in the whole split; in `split` "a+b", b's after all of
    a's) from TFDS's id of it, "<name>-<split>.<format>-<shard>-of-<shards>__<index in
    the shard>"; an id of another form is named as it is."""

    def __init__(self, builder, split: str = "train"):
        self._builder = builder
        names = [part.split("[")[0].strip() for part in split.split("+")]
        self._order = list(dict.fromkeys(names))  # the splits read, in order
        self._starts = {}  # shard file name → the number of examples before it

    def _start(self, filename: str) -> int:
        import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
        if filename not in self._starts:
            info = tfds.core.naming.FilenameInfo.from_str(filename)
            splits = self._builder.info.splits
            before = sum(splits[name].num_examples
                         for name in self._order[:self._order.index(info.split)])
            self._starts[filename] = before + sum(
                splits[info.split].shard_lengths[:info.shard_index])
        return self._starts[filename]

    def __call__(self, tfds_id: bytes) -> int | str:
        text = tfds_id.decode("utf-8", "replace")
        filename, _, index = text.rpartition("__")
        try:
            return self._start(filename) + int(index) + 1
        except (ValueError, KeyError, IndexError, TypeError):
            return text


def tfds_document_lines(raw: bytes, name: str, n, stats: CorpusStats) -> Iterator[str]:
    """Example `n` of TFDS's `name`: its text → its corpus lines (none if not UTF-8)."""
    stats.documents += 1  # read (and counted as skipped when not UTF-8)
    text = _decode(raw, stats, (name, None, None, n))
    if text is None:
        return
    for paragraph in text.split("\n"):
        for sentence in split_sentences(paragraph, stats, (name, None, None, n)):
            stats.lines += 1
            yield _clip(sentence, stats, (name, f"example:{n}"))
    yield ""


# ---------------------------------------------------------------------------- one entry


@dataclasses.dataclass
class Corpus:
    """Corpus lines from `--input` files or a `--tfds` dataset, with what reading found."""

    lines: Iterator[str]
    stats: CorpusStats
    total_bytes: int | None  # text bytes, for the ETA; None when unknown (TFDS, .gz)
    source: dict
    size_estimate: int = 0  # text bytes, estimated where unknown (.gz: 4x), for sharding
    paths: list[str] = dataclasses.field(default_factory=list)  # the --input files

    def flag(self) -> str:
        """The flag the corpus came from, for messages: `--input=GLOB` or `--tfds=NAME`."""
        if "tfds" in self.source:
            return f"--tfds={self.source['tfds']}"
        return f"--input={self.source['input']}"


def progress_of(source: Corpus, log) -> tuple[progress_lib.Progress, Callable[[], int]]:
    """(a progress bar, how much of `source` has been read) for logging its reading with
    an ETA: MB of text for files, documents of their known count for TFDS (known once
    the corpus is open). `bar.update(read())` logs at most every few seconds."""
    stats = source.stats
    if source.total_bytes or not stats.total_documents:
        return (progress_lib.Progress(source.total_bytes, "bytes", log=log, scale=1e-6,
                                      scaled_unit="MB"), lambda: stats.bytes)
    return (progress_lib.Progress(stats.total_documents, "documents", log=log),
            lambda: stats.documents)


def open_corpus(input_pattern: str | None = None, tfds_name: str | None = None,
                tfds_data_dir: str | None = None, tfds_text_key: str = "text") -> Corpus:
    """Opens exactly one of `input_pattern` (globs of text files) and `tfds_name`."""
    if bool(input_pattern) == bool(tfds_name):
        raise CorpusError("give exactly one of --input=GLOB and --tfds=NAME[:split]")
    stats = CorpusStats()
    if tfds_name:
        lines = tfds_lines(tfds_name, tfds_data_dir, tfds_text_key, stats)
        source = {"tfds": tfds_name, "tfds_data_dir": tfds_data_dir, "text_key": tfds_text_key}
        return Corpus(lines, stats, None, source)
    paths = expand_globs(input_pattern)
    sizes = [_size(p) for p in paths]
    # Progress counts decompressed bytes, so the on-disk size of a .gz is no total.
    compressed = any(p.endswith(".gz") for p in paths)
    estimate = sum(size * (4 if p.endswith(".gz") else 1) for p, size in zip(paths, sizes))
    return Corpus(read_lines(paths, stats), stats, None if compressed else sum(sizes),
                  {"input": input_pattern, "files": len(paths)}, estimate, paths)
