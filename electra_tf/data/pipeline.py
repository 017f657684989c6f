"""TFRecord shards → masked batches with static shapes, for one input pipeline.

    training:   files ─► the training order from batch `skip_batches` on (data/order.py:
                chunks, seeded epoch permutations, shuffled blocks; endless) ─►
                batch(drop_remainder) ─► parse ─► dynamic masking ─► prefetch
    evaluation: files ─► interleave TFRecords ─► batch(drop_remainder) ─► parse ─►
                dynamic masking ─► prefetch

With a seed, everything random is a function of it: the example order (record n of the
stream is a function of (seed, n), `order.records`) and each step's masks (stateless
draws seeded by the seed, the input pipeline and the step's index;
`masking.mask_batch`). Batch i of a run is therefore the same bytes in every run with
that seed, and a run that resumes at batch i reads at most one chunk and one shuffle
block before it, whatever i is.

Under a `tf.distribute` strategy, pass the `tf.distribute.InputContext` that
`distribute_datasets_from_function` gives: each pipeline reads its own chunks (or, with
fewer chunks than pipelines, its own records; evaluation: its own files or records) and
batches `global_batch_size / num_replicas_in_sync` examples for each replica. A
pipeline masks the rows of one step (all its replicas' batches) together and then
splits them, so its rows and masks do not depend on how many replicas it feeds: a run
resumed on another number of replicas (on as many hosts) continues exactly.

Before reading, the data is checked against what the run expects: every file must be
listed in the `manifest.json` beside it, with the same `max_seq_length` and a vocab with
the same hash. Shards from other tools (the original ELECTRA's) have no manifest: the
first record of each is checked instead (its features' lengths, its largest token id).
"""

import json
import os

from absl import logging
from google.protobuf import message
import tensorflow as tf

from electra_tf import errors
from electra_tf.data import examples
from electra_tf.data import masking
from electra_tf.data import order
from electra_tf.data import writer
from electra_tf.text import tokenizer as tokenizer_lib


class DataError(errors.UserError):
    """Pre-training data that does not match the run: the message names file and field."""


class DamagedShardError(DataError):
    """A shard whose bytes are not what was written: truncated, or a record's CRC fails."""

    def __init__(self, message: str, file: str):
        super().__init__(message)
        self.file = file


def resolve_files(pattern: str, max_seq_length: int | None = None,
                  vocab: tokenizer_lib.Vocab | None = None,
                  skip_damaged: bool = False, log=None) -> list[str]:
    """The shard files of `pattern`, checked against their manifests.

    `pattern` is a comma-separated list of globs, directories (all shards their
    manifest lists) or `manifest.json` paths. A shard whose size differs from its
    manifest's is an error naming it; with `skip_damaged`, every shard is instead read
    through once (`find_damaged`: sizes, record CRCs, example counts) and the damaged
    ones are left out, each reported through `log` (default: absl's warning).
    """
    files = []
    for part in (p.strip() for p in pattern.split(",") if p.strip()):
        if tf.io.gfile.isdir(part) or part.endswith(writer.MANIFEST):
            directory = part if tf.io.gfile.isdir(part) else os.path.dirname(part)
            manifest = load_manifest(directory)
            if manifest is None:
                raise DataError(f"{part}: no {writer.MANIFEST} there; name the shard files "
                                "with a glob instead")
            files.extend(os.path.join(directory, s["file"]) for s in manifest["shards"])
        else:
            matches = sorted(tf.io.gfile.glob(part))
            matches = [m for m in matches if not m.endswith((".tmp", ".json"))]
            if not matches:
                raise DataError(f"no file matches {part!r}")
            files.extend(matches)
    if not files:
        raise DataError(f"no data files in {pattern!r}")
    if skip_damaged:
        damaged = dict(find_damaged(files))
        log = log or logging.warning
        for f, reason in damaged.items():
            log(f"skipping damaged shard {f}: {reason}")
        files = [f for f in files if f not in damaged]
        if damaged:
            log(f"skipped {len(damaged)} damaged shard(s) of {len(files) + len(damaged)}")
        if not files:
            raise DataError(f"every shard of {pattern!r} is damaged")
    for directory in sorted({os.path.dirname(f) for f in files}):
        _check_manifest(directory, [f for f in files if os.path.dirname(f) == directory],
                        max_seq_length, vocab)
    return files


def find_damaged(files: list[str]) -> list[tuple[str, str]]:
    """(file, reason) for each of `files` that is missing, has another size or example
    count than its manifest lists, or holds a record that fails its CRC. Reads every
    byte of every file: what the pipeline does when reading fails, to name the file."""
    damaged = []
    listings = {}  # directory → {shard file: its manifest entry}, each manifest read once
    for f in files:
        directory = os.path.dirname(f)
        if directory not in listings:
            manifest = load_manifest(directory) or {"shards": []}
            listings[directory] = {s["file"]: s for s in manifest["shards"]}
        listed = listings[directory].get(os.path.basename(f), {})
        if not tf.io.gfile.exists(f):
            damaged.append((f, "missing"))
            continue
        size = tf.io.gfile.stat(f).length
        if listed.get("bytes") not in (None, size):
            damaged.append((f, f"{size} bytes, the manifest lists {listed['bytes']}"))
            continue
        count = 0
        try:
            for _ in tf.data.TFRecordDataset(f, buffer_size=1 << 20):
                count += 1
        except tf.errors.DataLossError as e:
            damaged.append((f, f"unreadable after {count} records: "
                               f"{e.message.split('}')[-1].strip()}"))
            continue
        if listed.get("num_examples") not in (None, count):
            damaged.append((f, f"{count} records, the manifest lists "
                               f"{listed['num_examples']}"))
    return damaged


def damaged_data_error(files: list[str], error: tf.errors.DataLossError) -> DataError:
    """The error to raise when reading `files` failed with `error`: names the damaged
    file(s) (found by reading them all through) and what to do."""
    damaged = find_damaged(files)
    if not damaged:
        return DataError(f"reading the data failed ({error.message.split('}')[-1].strip()})"
                         f" but every one of its {len(files)} shards reads back whole now")
    names = "; ".join(f"{f}: {reason}" for f, reason in damaged)
    return DamagedShardError(f"{names}. Re-create the data, or leave the damaged shard(s) "
                             "out", damaged[0][0])


def load_manifest(directory: str) -> dict | None:
    """The checked `manifest.json` of a data directory, or None where there is none."""
    path = os.path.join(directory, writer.MANIFEST)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            manifest = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON (line {e.lineno}): {e.msg}") from e
    for key in ("max_seq_length", "shards", "vocab"):
        if key not in manifest:
            raise DataError(f"{path}: field {key!r} is missing")
    return manifest


def lower_case_of_data(train_files: str) -> bool | None:
    """Whether the text of `train_files` (comma-separated directories, manifests or
    globs) was lower-cased and stripped of accents, by the first manifest that says;
    None where none does (data from other tools, or data no longer there)."""
    for part in str(train_files).split(","):
        part = part.strip()
        if not part:
            continue
        if tf.io.gfile.isdir(part):
            directory = part
        elif part.endswith(writer.MANIFEST):
            directory = os.path.dirname(part)
        else:
            matches = tf.io.gfile.glob(part)
            if not matches:
                continue
            directory = os.path.dirname(matches[0])
        manifest = load_manifest(directory)
        if manifest and "tokenizer" in manifest:
            return bool(manifest["tokenizer"]["lower_case_nfd_strip_accents"])
    return None


def _check_manifest(directory, files, max_seq_length, vocab):
    manifest = load_manifest(directory)
    if manifest is None:  # shards made elsewhere, e.g. by the original ELECTRA
        _check_first_records(files, max_seq_length, vocab)
        return
    path = os.path.join(directory, writer.MANIFEST)
    listed = {s["file"] for s in manifest["shards"]}
    for f in files:
        if os.path.basename(f) not in listed:
            raise DataError(f"{f}: not listed in {path}; it is left over from another run "
                            "or still being written")
    sizes = {s["file"]: s.get("bytes") for s in manifest["shards"]}
    for f in files:
        expected = sizes[os.path.basename(f)]
        if expected is None:
            continue  # manifests from before sizes were recorded
        if not tf.io.gfile.exists(f):
            raise DataError(f"{f}: listed in {path} but missing")
        actual = tf.io.gfile.stat(f).length
        if actual != expected:
            raise DamagedShardError(
                f"{f}: {actual} bytes, but {path} lists {expected}: the shard was "
                "truncated or changed after it was written", f)
    if max_seq_length is not None and manifest["max_seq_length"] != max_seq_length:
        raise _length_error(path, manifest["max_seq_length"], max_seq_length)
    if vocab is not None and manifest["vocab"].get("sha256") != vocab.sha256:
        raise DataError(f"{path}: vocab.sha256 {manifest['vocab'].get('sha256', '')[:12]}… "
                        f"(of {manifest['vocab'].get('file')}) differs from {vocab.path} "
                        f"({vocab.sha256[:12]}…): the data was tokenized with another vocab")


def _length_error(where: str, length: int, max_seq_length: int) -> DataError:
    return DataError(f"{where}: max_seq_length is {length} but the run uses "
                     f"max_seq_length={max_seq_length}")


def _check_first_records(files, max_seq_length, vocab):
    """What a manifest would say, read off each shard's first record: its features'
    lengths and its largest token id (else the parse fails mid-run, naming no file)."""
    # One dataset for all (one apiece costs tens of ms a shard, 14 s for 500 on 2 cores),
    # opening several shards at once (on an object store each open is a round trip).
    firsts = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string)).interleave(
        lambda f: tf.data.Dataset.zip(tf.data.Dataset.from_tensors(f),
                                      tf.data.TFRecordDataset(f).take(1)),
        cycle_length=16, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    try:
        firsts = list(firsts.as_numpy_iterator())  # (file, first record); none if empty
    except tf.errors.DataLossError as e:
        raise damaged_data_error(files, e) from None
    for f, record in firsts:
        _check_example(f.decode(), record, max_seq_length, vocab)


def _check_example(f, record, max_seq_length, vocab):
    try:
        feature = tf.train.Example.FromString(record).features.feature
    except message.DecodeError:
        raise DataError(f"{f}: its first record is not a tf.train.Example") from None
    for name in examples.FEATURE_NAMES:
        if name not in feature or feature[name].WhichOneof("kind") != "int64_list":
            raise DataError(f"{f}: its first record has no int64 feature {name!r} (it has "
                            f"{sorted(feature)}): not pre-training data")
        length = len(feature[name].int64_list.value)
        if max_seq_length is not None and length != max_seq_length:
            raise _length_error(f"{f}: {name}", length, max_seq_length)
    largest = max(feature["input_ids"].int64_list.value, default=0)
    if vocab is not None and largest >= vocab.size:
        raise DataError(f"{f}: input_ids: id {largest} in its first record, but {vocab.path} "
                        f"has {vocab.size} ids: the data was tokenized with another vocab")


# A run's config.json records it ("data_masks"): a run begun by a version that masked
# each replica's batch on its own, resumed with this one, is told.
MASKS = "per-host-step"


def pretraining_dataset(
    files: list[str],
    global_batch_size: int,
    max_seq_length: int,
    masking_config: masking.MaskingConfig,
    is_training: bool = True,
    input_context: tf.distribute.InputContext | None = None,
    seed: int | None = None,
    shuffle_buffer: int = 10_000,
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """Batches of masked examples for one input pipeline (see the module docstring).

    Training repeats and shuffles forever; evaluation reads each example at most once.
    Both drop a last partial step (this pipeline's batches of one step), so shapes stay
    static.

    seed: makes the example order and the masks deterministic (see the module
    docstring); None draws both afresh.
    skip_batches: training: the batch to start at (resuming a run: with a `seed`, the
    order and the masks are the same in every run, so this continues where it stopped,
    batch for batch). Nothing before it is read but the rest of its chunk and block.
    """
    batch_size = global_batch_size
    num_pipelines, pipeline_id, replicas = 1, 0, 1
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        num_pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
        replicas, uneven = divmod(input_context.num_replicas_in_sync, num_pipelines)
        if uneven:  # no strategy makes one; each element is then masked alone
            replicas = 1
    if skip_batches % replicas:
        raise ValueError(f"`skip_batches` must be a whole number of steps of {replicas} "
                         f"batches. Received: `skip_batches={skip_batches}`")

    if is_training:
        # Record n of this pipeline's stream is a function of (seed, n): starting at the
        # first record not yet trained on costs the same at any step (data/order.py).
        try:
            chunks = order.chunks_of(files)
        except order.UnreadableShard as e:
            raise DamagedShardError(f"{e}. Re-create the data, or leave the damaged shard(s) "
                                    "out", e.file) from None
        dataset = order.records(chunks, seed, shuffle_buffer, num_pipelines, pipeline_id,
                                start=skip_batches * batch_size)
    else:
        dataset = _read_once(files, num_pipelines, pipeline_id)
    # One step's rows of this pipeline (its replicas' batches) are masked together.
    dataset = dataset.batch(batch_size * replicas, drop_remainder=True)

    if seed is None:
        @tf.autograph.experimental.do_not_convert
        def parse_and_mask(serialized):
            return masking.mask_batch(examples.parse(serialized, max_seq_length),
                                      masking_config)
    else:
        # The masks of step i are a pure function of (seed, pipeline, i): a resumed run,
        # which starts after the steps it has trained on, masks the rest as before.
        stream = tf.constant([seed, 2 * pipeline_id + int(is_training)], tf.int64)
        dataset = dataset.enumerate(start=skip_batches // replicas)

        @tf.autograph.experimental.do_not_convert
        def parse_and_mask(index, serialized):
            return masking.mask_batch(
                examples.parse(serialized, max_seq_length), masking_config,
                seed=tf.random.experimental.stateless_fold_in(stream, index, alg="philox"))

    dataset = dataset.map(parse_and_mask, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=seed is not None)
    if replicas > 1:
        dataset = dataset.rebatch(batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _read_once(files: list[str], num_pipelines: int, pipeline_id: int) -> tf.data.Dataset:
    """Evaluation's records: each read once, in file order; each pipeline its own files
    (or, with fewer files than pipelines, its own records)."""
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string))
    by_file = len(files) >= num_pipelines
    if num_pipelines > 1 and by_file:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    dataset = dataset.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 16),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if num_pipelines > 1 and not by_file:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    return dataset


def masking_config_for(vocab: tokenizer_lib.Vocab, max_seq_length: int,
                       mask_prob: float = 0.15, mask_token_rate: float = 0.85,
                       random_token_rate: float = 0.0,
                       whole_word_masking: bool = False) -> masking.MaskingConfig:
    """The masking of a vocab: its special ids and `##` pieces, and the original's
    prediction bound."""
    return masking.MaskingConfig(
        vocab_size=vocab.size, mask_id=vocab.mask_id, special_ids=vocab.special_ids,
        max_predictions=masking.max_predictions_per_seq(mask_prob, max_seq_length),
        mask_prob=mask_prob, mask_token_rate=mask_token_rate,
        random_token_rate=random_token_rate, whole_word_masking=whole_word_masking,
        continuation_ids=vocab.continuation_ids if whole_word_masking else ())


# ---------------------------------------------------------------- a run's input wiring
# What the training loop and the tools read of `config.data` (a run's ConfigDict).

DAMAGED_HINT = (" (config.data.skip_damaged_shards=true reads every shard at start and "
                "leaves the damaged ones out)")


def config_files(config, key: str, vocab: tokenizer_lib.Vocab) -> list[str]:
    """The checked shard files of `config.data.<key>` (train_files, eval_files); errors
    name the key."""
    pattern = config.data[key]
    if not pattern:
        raise errors.UserError(f"config.data.{key} is empty: give a data directory, "
                               "manifest or glob")
    try:
        return resolve_files(pattern, config.data.max_seq_length, vocab,
                             skip_damaged=config.data.skip_damaged_shards)
    except DamagedShardError as e:
        raise errors.UserError(f"config.data.{key}: {e}{DAMAGED_HINT}") from None
    except errors.UserError as e:
        raise errors.UserError(f"config.data.{key}={pattern!r}: {e}") from None


def masking_config(config, vocab: tokenizer_lib.Vocab) -> masking.MaskingConfig:
    """The masking of `config.data` for `vocab`."""
    return masking_config_for(
        vocab, config.data.max_seq_length, config.data.mask_prob,
        config.data.mask_token_rate, config.data.random_token_rate,
        config.data.whole_word_masking)


def distributed_dataset(strategy, files, config, masking_config, training, step=0):
    """Masked batches of `files` for `strategy`, from the first batch after the `step`
    steps before (found by arithmetic, not by reading them: data/order.py)."""
    return strategy.distribute_datasets_from_function(
        lambda context: host_dataset(context, files, config, masking_config, training, step))


def host_dataset(context: tf.distribute.InputContext, files, config, masking_config,
                 training: bool, step: int = 0) -> tf.data.Dataset:
    """The input pipeline of one host (`context`: H = num_input_pipelines hosts, this
    one's id, N = num_replicas_in_sync replicas in all), from step `step` on.

    The per-host arithmetic, for the global batch B (config.train.batch_size), which N
    must divide: each element is one replica's batch of B / N rows; each step takes one
    element for each of the host's N / H replicas, B / H rows in all, and the H hosts'
    rows together are the step's B. A TPU v3-32 (4 hosts of 8 cores) at B = 1024: 32
    rows per element, 8 elements (256 rows) per host per step. A run resumed at step s
    starts each host at its element s · N / H, found by arithmetic (data/order.py).
    A host masks its B / H rows of a step together and then splits them into its
    replicas' elements, so the rows and masks of a step do not depend on N.
    Each host reads its own chunks of the shards (its own records where there are
    fewer chunks than hosts), so no two hosts train on the same example in an epoch.
    """
    per_step = context.num_replicas_in_sync // context.num_input_pipelines
    return pretraining_dataset(
        files, config.train.batch_size, config.data.max_seq_length, masking_config,
        is_training=training, input_context=context, seed=config.train.seed,
        shuffle_buffer=config.data.shuffle_buffer, skip_batches=step * per_step)
