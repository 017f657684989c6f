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

import dataclasses
from concurrent import futures
import json
import logging as std_logging
import os
import threading
import uuid
import zlib
from typing import Callable

import tensorflow as tf

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
    """`PipelineOptions` from TFDS's spelling, `key=value,key=value` (or bare flags).

    >>> options = pipeline_options("runner=DirectRunner,direct_num_workers=2")
    >>> options.get_all_options()["direct_num_workers"]
    2
    """
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise errors.UserError("--beam_pipeline_options: empty; e.g. runner=DirectRunner,"
                               "direct_num_workers=0,direct_running_mode=multi_processing")
    flags = [f"--{item.lstrip('-')}" for item in items]
    if not any(item.startswith("default_sdk_harness_log_level") for item in items):
        flags.append("--default_sdk_harness_log_level=WARNING")  # workers: no INFO lines
    options = beam.options.pipeline_options.PipelineOptions(flags=flags)
    known = options.get_all_options(retain_unknown_options=False)
    unknown = [item for item in items
               if item.lstrip("-").split("=")[0] not in known]
    if unknown:
        raise errors.UserError(f"--beam_pipeline_options: unknown option {unknown[0]!r} "
                               "(Apache Beam's pipeline options, e.g. runner=DirectRunner,"
                               "direct_num_workers=2)")
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


def _staging_name(key: str) -> str:
    return f"{zlib.crc32(key.encode()):08x}-{uuid.uuid4().hex[:8]}"


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
        marker = job.path("progress", _staging_name(f"{part.path}@{part.start}"))
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
            _write_text(job.path("errors", _staging_name(part.path)), str(e))
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
        tokenize = tf.function(writer.tokenize_fn(self.encoder.tokenizer),
                               input_signature=[tf.TensorSpec([None], tf.string)],
                               autograph=False)
        self.tokenize = lambda lines: tokenize(tf.constant(lines))
        # As in process, the TF ops run on threads beside Python's packing: tokenizing
        # the next batches, serializing the last one.
        self.tokenizing = futures.ThreadPoolExecutor(1, "tokenize")
        self.serializing = futures.ThreadPoolExecutor(1, "serialize")

    def process(self, lines):
        before = self.encoder.counts()
        size = writer.LINES_PER_BATCH
        tokenized = self.tokenizing.map(
            self.tokenize, [lines[i:i + size] for i in range(0, len(lines), size)])
        serialized = None
        for batch in tokenized:
            packed = self.encoder.pack(*batch)
            if serialized:
                yield serialized.result()
            serialized = self.serializing.submit(self.encoder.serialize, packed)
        if serialized:
            yield serialized.result()
        yield self.encoder.finish()  # empty: `lines` ends at a document's end
        after = self.encoder.counts()
        yield beam.pvalue.TaggedOutput("counts",
                                       {key: after[key] - before[key] for key in after})

    def teardown(self):
        for pool in (getattr(self, "tokenizing", None), getattr(self, "serializing", None)):
            if pool:
                pool.shutdown(cancel_futures=True)


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
    """CorpusStats dicts of ranges → one, as one pass over the files in order finds."""
    parts = sorted(parts, key=lambda p: p.get("order", []))
    total = corpus.CorpusStats().as_dict()
    for part in parts:
        for key, value in part.items():
            if key == "order":
                continue
            if isinstance(value, list):
                total[key] = total[key] + value
            elif isinstance(value, str):
                total[key] = total[key] or value
            else:
                total[key] += value
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
    (`pipeline_options`): the same examples, in shards of at most ~`SHARD_BYTES`."""
    examples.ExampleBuilder(max_seq_length, vocab.cls_id, vocab.sep_id)  # checks the length
    writer.check_output_dir(output_dir, overwrite)
    job = _Job(os.path.join(output_dir, STAGING), os.path.abspath(vocab.path),
               vocab.sha256, max_seq_length, lower_case, seed)
    _remove(job.staging)  # what a killed run left
    for folder in ("shards", "progress", "errors"):
        tf.io.gfile.makedirs(job.path(folder))

    std_logging.getLogger("apache_beam").setLevel(std_logging.ERROR)  # the runner's
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

    # Documents of TFDS are counted on the workers: no progress until the end.
    progress = progress_lib.Progress(source.total_bytes, "bytes", log=log, scale=1e-6,
                                     scaled_unit="MB")
    try:
        _run(pipeline, job, None if "tfds" in source.source else
             lambda: progress.update(_bytes_read(job)))
        with tf.io.gfile.GFile(summary_path) as f:
            summary = json.load(f)
        if not summary["shards"]:
            raise writer.EmptyOutputError(
                f"{source.flag()}: the corpus produced no examples (is every line "
                f"empty?); nothing was written to {output_dir}")
        # What the driver knows of the source (TFDS: the split's size) and the workers'.
        parts = summary["stats"] if isinstance(summary["stats"], list) else [summary["stats"]]
        stats = _merge_stats([source.stats.as_dict()] + parts)
        progress.update(stats["bytes"], force=True)
        # The in-process writer's order of shards has no meaning here either: the
        # training order is computed (data/order.py); sorted, a rerun names them alike.
        shards = sorted(summary["shards"], key=lambda s: s["tmp"])
        fields = writer.manifest_fields(summary["counts"], max_seq_length, seed, vocab,
                                        lower_case, source.source, stats)
        manifest = writer.commit(output_dir, shards, fields)
    finally:
        _remove(job.staging)
    return writer.result_of(manifest, progress.elapsed(), output_dir)


def _tfds_documents(pipeline, source):
    """A TFDS split → (lists of lines, stats) as `_ReadDocuments` gives them."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    name, _, split = source.source["tfds"].partition(":")
    builder = tfds.builder(name, data_dir=source.source["tfds_data_dir"])
    text_key, label = source.source["text_key"], source.source["tfds"]

    def document(example):
        stats = corpus.CorpusStats()
        raw = example[text_key]
        raw = raw.numpy() if hasattr(raw, "numpy") else raw  # a tensor, or bytes
        lines = list(corpus.tfds_document_lines(raw, label, "?", stats))
        return lines, stats.as_dict()

    documents = (pipeline
                 | "ReadFromTFDS" >> tfds.beam.ReadFromTFDS(builder, split=split or "train")
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
    meanwhile; a worker's `CorpusError` is raised here as itself."""
    failure = []

    def run():
        try:
            pipeline.run().wait_until_finish()
        except BaseException as e:  # pylint: disable=broad-except
            failure.append(e)

    thread = threading.Thread(target=run, name="beam-pipeline", daemon=True)
    thread.start()
    while thread.join(1.0) or thread.is_alive():
        if report:
            report()
    if failure:
        messages = sorted(tf.io.gfile.listdir(job.path("errors")))
        if messages:
            with tf.io.gfile.GFile(job.path("errors", messages[0])) as f:
                raise corpus.CorpusError(f.read()) from failure[0]
        raise failure[0]


def _remove(path: str) -> None:
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
