"""The corpus → TFRecords job as an Apache Beam pipeline, on any runner.

`tools/create_pretraining_data.py --beam_pipeline_options=...` runs this instead of the
in-process writer (`data/writer.py`). The two share everything that decides the data
(`corpus.read_range`, `writer.Encoder`: tokenization, the original's packing, the
records; `writer.commit`: shard names and the manifest), and the packing draws its
randomness per document (`ExampleBuilder.start_document`), so for a corpus, vocab and
seed both write the same set of examples, with any number of workers:

    the files, cut into ranges at document boundaries (`corpus.split_files`)
    ─► Reshuffle (the ranges spread over the workers)
    ─► ReadDocuments: the lines of whole documents, about `LINES_PER_ELEMENT` at a time,
       and per range what reading skipped (`CorpusStats`)
    ─► Encode: tokenize (tf.text), pack, serialize (`writer.Encoder`), and the counts
    ─► WriteShards: the records into temporary shard files of at most ~`SHARD_BYTES`
    ─► one summary: the shards, the counts, the reading stats (`STAGING/summary.json`)
then, on the driver, the shards take their final names and the manifest is written last
(`writer.commit`): a killed run leaves no manifest, and the next run starts by removing
what it left (`STAGING`). A TFDS source is read with `tfds.beam.ReadFromTFDS`.

Progress: each reader writes how far it has read into `STAGING/progress/`; the driver
adds it up into a line with an ETA. A corpus error (a file that cannot be read) is
written to `STAGING/errors/` by the worker that met it and raised on the driver as the
same one-line `CorpusError` the in-process writer gives.
"""

import contextlib
import dataclasses
import io
import json
import logging as std_logging
import os
import sys
import tempfile
import threading
import time
import traceback
import uuid
from typing import Callable

import tensorflow as tf

from electra_tf import compat
from electra_tf import errors
from electra_tf import progress as progress_lib
from electra_tf import workdir as workdir_lib
from electra_tf.data import examples
from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import tokenizer as tokenizer_lib

STAGING = ".beam-staging"  # inside the output directory: shared storage on a cluster
LINES_PER_ELEMENT = 8192   # lines a worker tokenizes and packs at a time
RANGE_BYTES = 16 * 2**20   # text files are read in ranges of this size
SHARD_BYTES = 128 * 2**20  # records per shard file, at most (about)
_PROGRESS_BYTES = 8 * 2**20


def _import_beam():
    """apache_beam, imported without its import-time log lines about optional cloud
    clients (not needed on the DirectRunner), and without the root log handler that
    `logging.warning` would install for them: importing this module changes nothing."""
    root = std_logging.getLogger()
    quiet, level = std_logging.NullHandler(), root.level
    root.addHandler(quiet)
    root.setLevel(std_logging.ERROR)
    try:
        import apache_beam  # pylint: disable=g-import-not-at-top
        from apache_beam.transforms import window  # pylint: disable=g-import-not-at-top
    finally:
        root.removeHandler(quiet)
        root.setLevel(level)
    return apache_beam, window


beam, _window = _import_beam()


def pipeline_options(spec: str):
    """`PipelineOptions` from TFDS's spelling, `key=value,key=value` (or bare flags); an
    unknown option, a bad value or an unknown runner is a one-line `UserError`.

    >>> options = pipeline_options("runner=DirectRunner,direct_num_workers=2")
    >>> options.get_all_options()["direct_num_workers"]
    2
    """
    items = [item.strip().lstrip("-") for item in spec.split(",") if item.strip()]
    if not items:
        raise errors.UserError("--beam_pipeline_options: empty; e.g. runner=DirectRunner,"
                               "direct_num_workers=0,direct_running_mode=multi_processing")
    flags = [f"--{item}" for item in items]
    if not any(item.startswith("default_sdk_harness_log_level") for item in items):
        # Workers log nothing of their own: a failure reaches the driver, which tells it
        # (a bad file as one line, anything else as Beam's error with the worker's trace).
        flags.append("--default_sdk_harness_log_level=CRITICAL")
    options = beam.options.pipeline_options.PipelineOptions(flags=flags)
    try:  # argparse prints its usage and exits on a bad value: one line instead
        with contextlib.redirect_stderr(io.StringIO()) as usage:
            known = options.get_all_options()
    except SystemExit:
        reason = (usage.getvalue().strip().splitlines() or ["invalid"])[-1]
        raise errors.UserError(f"--beam_pipeline_options: {reason.split('error: ')[-1]}")
    unknown = set(options.get_all_options(retain_unknown_options=True)) - set(known)
    if unknown:
        raise errors.UserError(f"--beam_pipeline_options: unknown option {sorted(unknown)[0]!r} "
                               "(Apache Beam's pipeline options, e.g. runner=DirectRunner,"
                               "direct_num_workers=2)")
    try:
        beam.runners.create_runner(known["runner"] or "DirectRunner")
    except ValueError as e:
        raise errors.UserError(f"--beam_pipeline_options: {str(e).split('. Valid')[0]}")
    return options


@dataclasses.dataclass(frozen=True)
class _Job:
    """What every worker needs to know (pickled into the DoFns)."""

    staging: str
    vocab_path: str
    vocab_sha256: str
    max_seq_length: int
    lower_case: bool
    seed: int

    def path(self, *parts) -> str:
        return os.path.join(self.staging, *parts)


class _ReadDocuments(beam.DoFn):
    """(file index, `FileRange`) → lists of corpus lines, each ending at a document's
    end; tagged `stats`: the range's `CorpusStats` as a dict, with its place in order."""

    def __init__(self, job: _Job):
        super().__init__()
        self.job = job

    def process(self, element):
        index, part = element
        job = self.job
        stats = corpus.CorpusStats()
        name = f"{index:08d}-{part.start:016d}"  # a rerun of the range overwrites it
        marker = job.path("progress", name)
        lines, reported = [], 0
        try:
            for line in corpus.read_range(part, stats):
                lines.append(line)
                if not line and len(lines) >= LINES_PER_ELEMENT:
                    yield lines
                    lines = []
                if stats.bytes - reported >= _PROGRESS_BYTES:
                    reported = stats.bytes
                    _write_text(marker, str(reported))
        except corpus.CorpusError as e:
            _write_text(job.path("errors", name), str(e))  # in file order
            raise
        if any(lines):
            yield lines
        _write_text(marker, str(stats.bytes))
        yield beam.pvalue.TaggedOutput("stats", {**stats.as_dict(),
                                                 "order": [index, part.start]})


class _Encode(beam.DoFn):
    """Lists of lines → arrays of serialized examples; tagged `counts`: what they hold."""

    def __init__(self, job: _Job):
        super().__init__()
        self.job = job

    def setup(self):
        job = self.job
        vocab = tokenizer_lib.Vocab.load(job.vocab_path)
        if vocab.sha256 != job.vocab_sha256:
            raise errors.UserError(f"{job.vocab_path} changed while the job ran")
        self.encoder = writer.Encoder(vocab, job.max_seq_length, job.lower_case, job.seed)
        self.tokenize = tf.function(writer.tokenize_fn(self.encoder.tokenizer),
                                    input_signature=[tf.TensorSpec([None], tf.string)],
                                    autograph=False)

    def process(self, lines):
        before = self.encoder.counts()
        for i in range(0, len(lines), writer.LINES_PER_BATCH):
            batch = self.tokenize(tf.constant(lines[i:i + writer.LINES_PER_BATCH]))
            yield self.encoder.encode(*batch)
        yield self.encoder.finish()  # empty: `lines` ends at a document's end
        after = self.encoder.counts()
        yield beam.pvalue.TaggedOutput("counts",
                                       {key: after[key] - before[key] for key in after})


class _WriteShards(beam.DoFn):
    """Arrays of records → temporary shard files; each closed file's `ShardFile.close()`."""

    def __init__(self, job: _Job):
        super().__init__()
        self.job = job

    def start_bundle(self):
        self.shard, self.closed = None, []

    def process(self, records):
        for record in records:
            if self.shard is None:
                self.shard = writer.ShardFile(
                    self.job.path("shards", uuid.uuid4().hex + ".tfrecord"))
            self.shard.write(record)
            if self.shard.bytes >= SHARD_BYTES:
                self.closed.append(self.shard.close())
                self.shard = None

    def finish_bundle(self):
        if self.shard is not None:
            self.closed.append(self.shard.close())
        for shard in self.closed:
            yield _window.GlobalWindows.windowed_value(shard)


def _sum_counts(counts) -> dict:
    total = dict.fromkeys(("num_documents", "num_sentences", "num_tokens",
                           "truncated_tokens", "truncated_examples"), 0)
    for part in counts:
        for key, value in part.items():
            total[key] += value
    return total


def _merge_stats(parts) -> dict:
    """CorpusStats dicts of ranges (or TFDS examples) → one, as one pass over the input
    in order finds. Each `first_*` place is the one of lowest `order`, and the result
    keeps those orders (`first_at`), so that merging merged parts, as a Beam combiner
    does in any grouping, finds the same."""
    parts = sorted(parts, key=lambda p: p.get("order", []))
    total = corpus.CorpusStats().as_dict()
    first_at = {}
    for part in parts:
        for key, value in part.items():
            if key in ("order", "first_at"):
                continue
            if isinstance(value, list):
                total[key] = total[key] + value
            elif isinstance(value, str):
                at = part.get("first_at", {}).get(key, part.get("order", []))
                if value and (key not in first_at or at < first_at[key]):
                    total[key], first_at[key] = value, at
            else:
                total[key] += value
    total["first_at"] = first_at
    total["order"] = parts[0].get("order", []) if parts else []  # the lowest, merged again
    return total


def _write_text(path: str, text: str) -> None:
    workdir_lib.write_text(os.path.dirname(path), os.path.basename(path), text)


def write_pretraining_data(
    source: corpus.Corpus,
    vocab: tokenizer_lib.Vocab,
    output_dir: str,
    options,
    max_seq_length: int = 128,
    lower_case: bool = True,
    seed: int = 0,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
) -> writer.WriteResult:
    """`writer.write_pretraining_data`'s job as a Beam pipeline run with `options`
    (`pipeline_options`): the same examples, in shards of at most ~`SHARD_BYTES`; what
    reading skipped goes into `source.stats`, as in process."""
    examples.ExampleBuilder(max_seq_length, vocab.cls_id, vocab.sep_id)  # checks the length
    writer.check_lower_case(vocab, lower_case, log)
    writer.check_output_dir(output_dir, overwrite)
    vocab_path = vocab.path if "://" in vocab.path else os.path.abspath(vocab.path)
    job = _Job(os.path.join(output_dir, STAGING), vocab_path, vocab.sha256,
               max_seq_length, lower_case, seed)
    _remove(job.staging)  # what a killed run left
    # Documents of TFDS are counted on the workers: no progress until the end.
    progress = progress_lib.Progress(source.total_bytes, "bytes", log=log, scale=1e-6,
                                     scaled_unit="MB")
    try:
        for folder in ("shards", "progress", "errors"):
            tf.io.gfile.makedirs(job.path(folder))
        _run(_pipeline(source, options, job), job, None if "tfds" in source.source else
             lambda: progress.update(_bytes_read(job)))
        with tf.io.gfile.GFile(job.path("summary.json")) as f:
            summary = json.load(f)
        # What the driver knows of the source (TFDS: the split's size) and the workers'.
        parts = summary["stats"] if isinstance(summary["stats"], list) else [summary["stats"]]
        merged = _merge_stats([source.stats.as_dict()] + parts)
        del merged["first_at"], merged["order"]
        for key, value in merged.items():
            setattr(source.stats, key, value)
        if not summary["shards"]:
            raise writer.EmptyOutputError(
                f"{source.flag()}: the corpus produced no examples "
                f"({source.stats.why_empty()}); nothing was written to {output_dir}")
        progress.update(source.stats.bytes, force=True)
        # By name, for a stable listing: training computes its own order (data/order.py).
        shards = sorted(summary["shards"], key=lambda s: s["tmp"])
        fields = writer.manifest_fields(summary["counts"], max_seq_length, seed, vocab,
                                        lower_case, source.source, source.stats.as_dict())
        manifest = writer.commit(output_dir, shards, fields)
    finally:
        _remove(job.staging)
    return writer.result_of(manifest, progress.elapsed(), output_dir)


def _pipeline(source, options, job):
    """The job's pipeline, its summary written to `STAGING/summary.json` last."""
    pipeline = beam.Pipeline(options=options)
    if "tfds" in source.source:
        lines, stats = _tfds_documents(pipeline, source)
    else:
        parts = corpus.split_files(source.paths, RANGE_BYTES)
        read = (pipeline
                | "Ranges" >> beam.Create(list(enumerate(parts)))
                | "Spread" >> beam.Reshuffle()
                | "ReadDocuments" >> beam.ParDo(_ReadDocuments(job)).with_outputs(
                    "stats", main="lines"))
        lines, stats = read.lines, read.stats
    encoded = lines | "Encode" >> beam.ParDo(_Encode(job)).with_outputs("counts",
                                                                        main="records")
    shards = (encoded.records | "WriteShards" >> beam.ParDo(_WriteShards(job))
              | "ShardList" >> beam.combiners.ToList())
    counts = encoded.counts | "Counts" >> beam.CombineGlobally(_sum_counts)
    # A range's stats come whole to the summary (one per RANGE_BYTES of text), so that
    # the first bad line named is the one a pass over the files in order meets first.
    stats = stats | "Stats" >> (beam.CombineGlobally(_merge_stats) if "tfds" in source.source
                                else beam.combiners.ToList())
    summary_path = job.path("summary.json")
    _ = (pipeline
         | "One" >> beam.Create([None])
         | "Summary" >> beam.Map(
             lambda _, shards, counts, stats: _write_text(summary_path, json.dumps(
                 {"shards": shards, "counts": counts, "stats": stats})),
             beam.pvalue.AsSingleton(shards), beam.pvalue.AsSingleton(counts),
             beam.pvalue.AsSingleton(stats)))
    return pipeline


def _tfds_documents(pipeline, source):
    """A TFDS split → (lists of lines, stats) as `_ReadDocuments` gives them."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    name, _, split = source.source["tfds"].partition(":")
    builder = tfds.builder(name, data_dir=source.source["tfds_data_dir"])
    text_key, label = source.source["text_key"], source.source["tfds"]
    split = split or "train"
    numbers = corpus.TfdsExampleNumbers(builder, split)

    def document(example):
        stats = corpus.CorpusStats()
        raw, tfds_id = (value.numpy() if hasattr(value, "numpy") else value  # a tensor, or
                        for value in (example[text_key], example[corpus.TFDS_ID]))  # bytes
        n = numbers(tfds_id)
        lines = list(corpus.tfds_document_lines(raw, label, n, stats))
        # The in-process reader's order (corpus.tfds_read_config): by number; an id of
        # another form after them, by the id.
        return lines, {**stats.as_dict(),
                       "order": [n] if isinstance(n, int) else [2**63, n]}

    documents = (pipeline
                 | "ReadFromTFDS" >> tfds.beam.ReadFromTFDS(
                     builder, split=split, read_config=corpus.tfds_read_config())
                 | "Documents" >> beam.Map(document))
    lines = (documents
             | "Lines" >> beam.Map(lambda d: d[0])
             | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=1024)
             | "Join" >> beam.Map(lambda batch: [line for d in batch for line in d]))
    return lines, documents | "DocumentStats" >> beam.Map(lambda d: d[1])


def _bytes_read(job) -> int:
    """What the readers have read so far, from their markers."""
    total = 0
    for name in tf.io.gfile.listdir(job.path("progress")):
        try:
            with tf.io.gfile.GFile(job.path("progress", name)) as f:
                total += int(f.read() or 0)
        except (tf.errors.NotFoundError, ValueError):
            pass  # being replaced this moment
    return total


def _run(pipeline, job, report) -> None:
    """Runs `pipeline` to its end on a thread, calling `report` (if any) every second
    meanwhile; a worker's `CorpusError` is raised here as itself.

    While it runs (and only then): Beam's logger, which relays the workers' logs and a
    failure's traceback, is quiet (the error is ours to tell, as one line), and what the
    DirectRunner's worker processes write to the stderr they inherit (their start-up
    lines, a failure's traceback) is held aside (`_workers_stderr_held`), shown only when
    the job fails for another reason than a bad corpus file. So is the exception of
    Beam's thread that owns a worker process (`_worker_thread_errors_held`), raised when
    the process exits non-zero, as one may while a failed job shuts down.
    """
    failure = []

    def run():
        try:
            pipeline.run().wait_until_finish()
        except BaseException as e:  # pylint: disable=broad-except
            failure.append(e)

    beam_logger = std_logging.getLogger("apache_beam")
    level = beam_logger.level
    beam_logger.setLevel(std_logging.CRITICAL)
    try:
        with tempfile.TemporaryFile() as held:
            with _workers_stderr_held(held), _worker_thread_errors_held() as thread_errors:
                thread = threading.Thread(target=run, name="beam-pipeline", daemon=True)
                thread.start()
                while thread.is_alive():
                    thread.join(1.0)
                    if report and thread.is_alive():
                        report()
            if not failure:
                for args in thread_errors:
                    threading.excepthook(args)  # printed, as without the hold
                return
            held.seek(0)
            workers = (held.read().decode("utf-8", "replace")
                       + "".join(map(_thread_error_text, thread_errors)))[-20_000:]
    finally:
        beam_logger.setLevel(level)
    _raise_failure(failure[0], job, workers)


_WORKER_WAIT_SECONDS = 30.0


@contextlib.contextmanager
def _worker_thread_errors_held():
    """Yields a list that gets the exception (`threading.ExceptHookArgs`) of each thread
    owning one of Beam's worker processes (`compat.BEAM_WORKER_THREAD`) that raises
    meanwhile, in place of `threading.excepthook`'s printing it; other threads' go to the
    hook as before. On the way out, waits (up to `_WORKER_WAIT_SECONDS` in all) for those
    threads, so that one raising as its process ends is held too; if the block raised,
    what was held goes to the hook."""
    held = []
    previous = threading.excepthook

    def hold(args):
        if args.thread is not None and args.thread.name == compat.BEAM_WORKER_THREAD:
            held.append(args)
        else:
            previous(args)

    threading.excepthook = hold
    done = False
    try:
        yield held
        deadline = time.monotonic() + _WORKER_WAIT_SECONDS
        for thread in threading.enumerate():
            if thread.name == compat.BEAM_WORKER_THREAD:
                thread.join(max(0.0, deadline - time.monotonic()))
        done = True
    finally:
        threading.excepthook = previous
        if not done:
            for args in held:
                previous(args)


def _thread_error_text(args) -> str:
    """An exception of a thread, as `threading.excepthook` prints it."""
    return f"Exception in thread {args.thread.name}:\n" + "".join(
        traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))


@contextlib.contextmanager
def _workers_stderr_held(held):
    """File descriptor 2 points at `held` (a file), so that the processes started
    meanwhile write their stderr there; this process's own Python output (`sys.stderr`
    and the logging handlers that write to it: absl's, a warning of the driver's) keeps
    going to the real stderr. Everything is as it was after."""
    sys.stderr.flush()
    saved = os.dup(2)
    driver = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8",
                       errors="backslashreplace")
    previous = sys.stderr
    handlers = [h for h in _logging_handlers() if _writes_to_fd_2(h)]
    os.dup2(held.fileno(), 2)
    sys.stderr = driver
    streams = [handler.setStream(driver) for handler in handlers]
    try:
        yield
    finally:
        for handler, stream in zip(handlers, streams):
            handler.setStream(stream)
        sys.stderr = previous
        driver.close()
        os.dup2(saved, 2)
        os.close(saved)


def _logging_handlers() -> list:
    """The root logger's handlers, and what absl's handler writes through."""
    handlers = list(std_logging.getLogger().handlers)
    return handlers + [h.python_handler for h in handlers if hasattr(h, "python_handler")]


def _writes_to_fd_2(handler) -> bool:
    try:
        return handler.stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # not a stream handler, or no file
        return False


def _raise_failure(failure, job, workers: str) -> None:
    """The pipeline's `failure`: a worker's `CorpusError` as itself, else what the
    workers wrote to stderr (`workers`), then Beam's error."""
    messages = sorted(tf.io.gfile.listdir(job.path("errors")))
    if messages:
        with tf.io.gfile.GFile(job.path("errors", messages[0])) as f:
            raise corpus.CorpusError(f.read()) from failure
    sys.stderr.write(workers)
    raise failure


def _remove(path: str) -> None:
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
