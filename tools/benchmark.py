r"""Measures training and data-path speed; prints one JSON line last.

  python tools/benchmark.py --config=configs/electra.py:small   # training steps/s and MFU
      [--batch_size=32 --seq_len=128 --steps=10 --warmup_steps=2 --config.KEY=VALUE ...]
      [--real_data=DIR --vocab_file=vocab.txt]                   # real TFRecords instead
      [--compare_data]          # input alone, synthetic and real steps, in one process
      [--profile [--profile_dir=DIR]]                            # + a TensorBoard trace
  python tools/benchmark.py --mode=input        # masked batches/s from real TFRecords
  python tools/benchmark.py --mode=create_data  # create_pretraining_data vs tokenizer alone
  python tools/benchmark.py --mode=resume [--resume_steps=0,1000000]  # data position cost

--mode=train (the default) builds the real `loop.Trainer` (model, optimizer, compiled
steps, under `config.runtime`'s strategy) and feeds it SYNTHETIC batches of the
pipeline's exact structure and static shapes (random ids in a --vocab_size vocabulary, so
the vocabulary projection costs what it costs in real training), or with --real_data the
real pipeline. After --warmup_steps (tracing, XLA compilation) it times --steps steps in
loops of --steps_per_loop and reports seq/s, the model FLOPs (electra_tf/model/flops.py),
the achieved FLOP/s and the MFU against a float32 matmul peak measured in this process.

--compare_data answers "is the input pipeline ever the bottleneck?" in one process: on
real TFRecords (--real_data, or made from the sample corpus and cached in --workdir) it
measures the input pipeline alone (`loop.distributed_dataset`, masking included, iterated
without training), then ONE Trainer (one compilation) alternates timed loops on synthetic
and on real batches of the same shapes and vocabulary. It reports
`input_batches_per_sec`, `input_to_step_ratio` (input rate / synthetic step rate: ≫ 1
means the pipeline keeps up) and `real_vs_synthetic` (real / synthetic step rate: ≈ 1
means feeding real data costs nothing).

--profile (or --profile_dir) traces a few more steps after the timed ones (so that the
tracing overhead stays out of the timings) with the TensorBoard profiler:
`tensorboard --logdir=<profile_dir>`, Profile tab (tensorboard-plugin-profile is in
requirements.txt).

--mode=resume measures what resuming costs in the data: for each of --resume_steps
(forged step numbers; nothing is trained), the seconds from making the training input
(`loop.distributed_dataset` at that step, under `config.runtime`'s strategy) to its
first batch, as `resume_seconds_at_step` (the median of --resume_repeats). It checks
that the stream started at step s+1 is the stream started at s, one batch on
(`continues_exactly`), and, for scale, reports what re-reading every record before the
last step would take at this machine's measured TFRecord read rate
(`replay_seconds_estimate`: what resuming cost before data/order.py).

For --mode=input|create_data|resume (and --compare_data without --real_data) the corpus is the
built-in sample corpus, repeated `--corpus_copies` times so that start-up costs do not
dominate; corpus, vocab and TFRecords are cached in --workdir.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

from electra_tf import cli  # first: quiets TF's start-up logging  # noqa: E402

import json
import platform
import resource
import statistics
import sys
import time

from absl import flags
from ml_collections import config_flags
import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as text

from electra_tf import errors
from electra_tf import flags as common_flags
from electra_tf.data import masking
from electra_tf.data import pipeline
from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import tokenizer as tokenizer_lib
from electra_tf.text import vocab as vocab_lib
from electra_tf.training import memory as memory_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE_STEPS = 3  # a trace of a few steps is enough, and stays small

_MODE = flags.DEFINE_enum("mode", "train", ["train", "input", "create_data", "resume"],
                          "What to measure.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(ROOT, "configs", "electra.py") + ":small",
    "Pre-training config and size (train mode), e.g. configs/electra.py:small.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/electra_tf_benchmark", "Cache directory.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "max_seq_length (overrides the config's).",
                                lower_bound=writer.MIN_SEQ_LENGTH)
_BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", None, "Global batch size (overrides the config's); default 32 in train "
    "mode, 128 in input mode.")
_STEPS = flags.DEFINE_integer("steps", None, "Timed steps/batches; default 10 in train "
                              "mode, 300 in input mode.")
_WARMUP_STEPS = flags.DEFINE_integer("warmup_steps", 2, "Untimed steps first (train mode): "
                                     "tracing, XLA compilation, allocator warm-up.")
_STEPS_PER_LOOP = flags.DEFINE_integer(
    "steps_per_loop", 1, "Steps per `train_loop` call (train mode); one timing per loop.")
_VOCAB_SIZE = flags.DEFINE_integer(
    "vocab_size", None, "Train mode: vocabulary of the synthetic batches (default 30522, "
    "BERT's). Input modes and --compare_data: vocab size to learn (default 8192).",
    lower_bound=len(tokenizer_lib.SPECIAL_TOKENS) + 1)
_REAL_DATA = flags.DEFINE_string(
    "real_data", None, "Train mode: feed real TFRecords (a data dir, manifest or glob) "
    "through electra_tf.data.pipeline instead of synthetic batches; needs --vocab_file.")
_VOCAB_FILE = flags.DEFINE_string("vocab_file", None, "The vocab.txt of --real_data.")
_COMPARE_DATA = flags.DEFINE_bool(
    "compare_data", False, "Train mode: also measure the input pipeline alone and "
    "alternate synthetic and real-data steps on one Trainer (see the module docstring).")
_INPUT_BATCHES = flags.DEFINE_integer(
    "input_batches", 300, "--compare_data: batches timed through the input pipeline alone.")
_MATMUL_SIZE = flags.DEFINE_integer("matmul_size", 2048, "n of the n×n matmul (in the "
                                    "step's compute dtype) that measures the peak FLOP/s.")
_PEAK_TFLOPS = flags.DEFINE_float(
    "peak_tflops", None, "Train mode: the device's datasheet peak in TFLOP/s for the step's "
    "compute dtype (e.g. 989.4 for an H100 SXM's dense bfloat16); the MFU is then taken "
    "against it instead of the matmul measured in this process (both are printed).")
_PROFILE = flags.DEFINE_bool(
    "profile", False, "Train mode: write a TensorBoard profiler trace of "
    f"{PROFILE_STEPS} steps after the timed ones, to --profile_dir or <workdir>/profile.")
_PROFILE_DIR = flags.DEFINE_string(
    "profile_dir", None, "Train mode: where --profile writes (giving it implies --profile).")
_RESUME_STEPS = flags.DEFINE_list(
    "resume_steps", ["0", "1000000"], "Resume mode: the (forged) steps to resume at.")
_RESUME_REPEATS = flags.DEFINE_integer("resume_repeats", 3, "Resume mode: timings per step.")
_CORPUS_COPIES = flags.DEFINE_integer("corpus_copies", 8, "Sample corpus repetitions.",
                                      lower_bound=1)


def _flag(flag, default):
    return default if flag.value is None else flag.value


def _prepare():
    """Corpus (the sample, repeated), vocab and TFRecords in the workdir, made once."""
    workdir = _WORKDIR.value
    common_flags.check_output_path("workdir", workdir, directory=True)
    os.makedirs(workdir, exist_ok=True)
    corpus_path = os.path.join(workdir, "corpus.txt")
    if not os.path.exists(corpus_path):
        lines = list(corpus.documents_to_lines(corpus.stdlib_documents()))
        corpus.write_corpus(lines * _CORPUS_COPIES.value, corpus_path)
    vocab_path = os.path.join(workdir, "vocab.txt")
    if not os.path.exists(vocab_path):
        sample, _ = vocab_lib.sample_lines(corpus.read_lines([corpus_path],
                                                             corpus.CorpusStats()), 100_000)
        vocab_lib.write_vocab(vocab_lib.learn_vocab(sample, _flag(_VOCAB_SIZE, 8192)), vocab_path)
    return corpus_path, tokenizer_lib.Vocab.load(vocab_path)


def _batches_per_sec(dataset, batches: int, warmup: int = 20) -> float:
    """Batches/s of iterating `dataset` (a tf.data or distributed dataset) alone."""
    iterator = iter(dataset)
    for _ in range(warmup):  # tracing, autotuning, shuffle and prefetch buffers
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches / (time.perf_counter() - start)


def _sample_data(corpus_path: str, vocab, seq_len: int) -> list[str]:
    """TFRecords of `corpus_path` at `seq_len` (made once per workdir and length)."""
    data_dir = os.path.join(_WORKDIR.value, f"data_{seq_len}")
    if not os.path.exists(os.path.join(data_dir, writer.MANIFEST)):
        writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, data_dir,
                                      max_seq_length=seq_len, overwrite=True,
                                      log=lambda _: None)
    return pipeline.resolve_files(data_dir, seq_len, vocab)


def bench_input(corpus_path, vocab):
    files = _sample_data(corpus_path, vocab, _SEQ_LEN.value)
    config = pipeline.masking_config_for(vocab, _SEQ_LEN.value)
    batch_size, steps = _flag(_BATCH_SIZE, 128), _flag(_STEPS, 300)
    pipeline_rate = batch_size * _batches_per_sec(pipeline.pretraining_dataset(
        files, batch_size, _SEQ_LEN.value, config), steps)

    # Masking alone on one cached batch, with our selector and with tf.text's own.
    batch = next(iter(pipeline.pretraining_dataset(files, batch_size, _SEQ_LEN.value, config)))
    unmasked = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    rates = {}
    for name, selector in (("batch_random_selector", masking.BatchRandomSelector),
                           ("tf_text_random_item_selector", text.RandomItemSelector)):
        fn = tf.autograph.experimental.do_not_convert(
            lambda b, s=selector: masking.mask_batch(b, config, selector_class=s))
        dataset = tf.data.Dataset.from_tensors(unmasked).repeat().map(
            fn, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
        rates[name] = batch_size * _batches_per_sec(dataset, steps)
    return {
        "examples_per_sec": round(pipeline_rate),
        "masking_only_examples_per_sec": {k: round(v) for k, v in rates.items()},
        "batch_size": batch_size, "seq_len": _SEQ_LEN.value,
    }


def bench_create_data(corpus_path, vocab):
    with open(corpus_path, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    size_mb = os.path.getsize(corpus_path) / 1e6

    tokenizer = tokenizer_lib.make_tokenizer(vocab)
    tokenize = tf.function(tokenizer.tokenize)
    tokenize(tf.constant(lines[:8]))  # trace outside the timing
    start = time.perf_counter()
    for i in range(0, len(lines), 2048):
        tokenize(tf.constant(lines[i:i + 2048]))
    tokenizer_mb_s = size_mb / (time.perf_counter() - start)

    out = os.path.join(_WORKDIR.value, "create_data_out")
    start = time.perf_counter()
    result = writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, out,
                                           max_seq_length=_SEQ_LEN.value, overwrite=True,
                                           log=lambda _: None)
    create_mb_s = size_mb / (time.perf_counter() - start)
    return {
        "corpus_mb": round(size_mb, 1), "examples": result.num_examples,
        "tokenizer_alone_mb_per_sec": round(tokenizer_mb_s, 2),
        "create_pretraining_data_mb_per_sec": round(create_mb_s, 2),
        "ratio": round(create_mb_s / tokenizer_mb_s, 2), "seq_len": _SEQ_LEN.value,
    }


def bench_resume(corpus_path, vocab):
    from electra_tf.training import distribute  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top

    config = _CONFIG.value
    try:
        steps = [int(s) for s in _RESUME_STEPS.value]
    except ValueError:
        raise errors.UserError(f"--resume_steps={','.join(_RESUME_STEPS.value)}: give "
                               "whole numbers") from None
    if not steps or min(steps) < 0 or _RESUME_REPEATS.value < 1:
        raise errors.UserError("--resume_steps must be >= 0, --resume_repeats >= 1")
    with config.unlocked():
        config.train.batch_size = _flag(_BATCH_SIZE, config.train.batch_size)
        config.data.max_seq_length = _SEQ_LEN.value
    strategy = distribute.get_strategy(config.runtime)
    files = _sample_data(corpus_path, vocab, _SEQ_LEN.value)
    masking_config = loop.masking_config(config, vocab)

    def first_batches(step, n=1):
        iterator = iter(loop.distributed_dataset(strategy, files, config, masking_config,
                                                 training=True, step=step))
        return [strategy.experimental_local_results(next(iterator)) for _ in range(n)]

    first_batches(1)  # tracing and the first reads, out of the timings
    timings = {s: [] for s in steps}
    for _ in range(_RESUME_REPEATS.value):
        for step in steps:
            start = time.perf_counter()
            first_batches(step)
            timings[step].append(time.perf_counter() - start)

    last = max(steps)
    ahead, started = first_batches(last, 2)[1], first_batches(last + 1)[0]
    exact = all(np.array_equal(a[k].numpy(), b[k].numpy())
                for a, b in zip(ahead, started) for k in a)

    # The records/s of reading the shards through, as resuming by skipping did.
    reader = tf.data.TFRecordDataset(files).repeat()
    count, start = 0, time.perf_counter()
    for _ in reader.batch(4096).take(50):
        count += 4096
    read_rate = count / (time.perf_counter() - start)
    records = last * config.train.batch_size
    return {
        "resume_seconds_at_step": {str(s): round(statistics.median(t), 3)
                                   for s, t in timings.items()},
        "continues_exactly": bool(exact),
        "records_before_last_step": records,
        "tfrecord_read_records_per_sec": round(read_rate),
        "replay_seconds_estimate": round(records / read_rate, 1),
        "batch_size": config.train.batch_size, "seq_len": _SEQ_LEN.value,
        "shuffle_buffer": config.data.shuffle_buffer,
        "strategy": type(strategy).__name__,
    }


# ---------------------------------------------------------------------------- train mode
def synthetic_examples(num_examples: int, seq_len: int, num_predictions: int,
                       vocab_size: int, mask_id: int = 4, seed: int = 0) -> dict:
    """`num_examples` examples of the pipeline's structure: full-length two-segment
    sequences of random ids, `num_predictions` distinct masked positions (most of them
    real, the tail padding as in the pipeline), [MASK] at 85% of them."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, (num_examples, seq_len), dtype=np.int32)
    ids[:, 0] = 2  # [CLS]
    ids[:, -1] = 3  # [SEP]
    segments = np.zeros_like(ids)
    segments[:, seq_len // 2:] = 1
    num_real = max(1, min(num_predictions, round(0.15 * seq_len)))
    positions = np.zeros((num_examples, num_predictions), np.int32)
    weights = np.zeros((num_examples, num_predictions), np.float32)
    masked = ids.copy()
    for row in range(num_examples):
        chosen = np.sort(rng.choice(np.arange(1, seq_len - 1), num_real, replace=False))
        positions[row, :num_real] = chosen
        weights[row, :num_real] = 1.0
        replace = chosen[rng.random(num_real) < 0.85]
        masked[row, replace] = mask_id
    lm_ids = np.take_along_axis(ids, positions, axis=1) * (weights > 0)
    return {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": segments,
            "masked_input_ids": masked, "masked_lm_positions": positions,
            "masked_lm_ids": lm_ids.astype(np.int32), "masked_lm_weights": weights}


def _synthetic_dataset(strategy, config, num_predictions, vocab_size):
    global_batch, seq_len = config.train.batch_size, config.data.max_seq_length
    examples = synthetic_examples(4 * global_batch, seq_len, num_predictions, vocab_size)

    def make(context):
        local = context.get_per_replica_batch_size(global_batch)
        dataset = tf.data.Dataset.from_tensor_slices(examples).repeat()
        return dataset.batch(local, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return strategy.distribute_datasets_from_function(make)


def matmul_peak_flops(n: int, dtype: str = "float32", repeats: int = 5,
                      per_repeat: int = 4) -> dict[str, float]:
    """The best FLOP/s of an n×n @ n×n matmul (2·n³ FLOPs) in `dtype` in this process, by
    library: TF's kernel, TF under XLA (what the training step uses) and, for float32,
    NumPy's BLAS (a CPU's practical peak, e.g. OpenBLAS). The MFU is taken against the
    best. On a GPU, TF's float32 matmuls run as TF32 (TF's default on Ampere and newer)."""
    a = tf.random.normal([n, n], dtype=dtype)
    b = tf.random.normal([n, n], dtype=dtype)

    def chain(a, b):
        c = a
        for _ in range(per_repeat):  # a chain: nothing can be skipped or overlapped
            c = tf.matmul(c, b) * tf.cast(1e-3, dtype)
        return tf.reduce_sum(tf.cast(c, tf.float32))

    def best_time(run):
        run()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        return best

    flops = per_repeat * 2 * n ** 3
    out = {}
    for name, jit in (("tensorflow", False), ("xla", True)):
        fn = tf.function(chain, jit_compile=jit)
        out[name] = flops / best_time(lambda fn=fn: fn(a, b).numpy())
    if dtype != "float32":
        return out
    an, bn = a.numpy(), b.numpy()

    def blas():
        c = an
        for _ in range(per_repeat):
            c = (c @ bn) * 1e-3
        return c
    out["numpy_blas"] = flops / best_time(blas)
    return out


def _real_data(config):
    """(files, vocab, data dir) of real TFRecords: --real_data, or the sample corpus's."""
    seq_len = config.data.max_seq_length
    if _REAL_DATA.value:
        vocab_file = _VOCAB_FILE.value or config.data.vocab_file
        if not vocab_file:
            raise errors.UserError("--real_data needs --vocab_file (the data's vocab.txt)")
        vocab = tokenizer_lib.Vocab.load(vocab_file)
        return pipeline.resolve_files(_REAL_DATA.value, seq_len, vocab), vocab, _REAL_DATA.value
    corpus_path, vocab = _prepare()
    files = _sample_data(corpus_path, vocab, seq_len)
    return files, vocab, os.path.join(_WORKDIR.value, f"data_{seq_len}")


def _timed_loop(trainer, iterator, num_steps: int) -> float:
    """Seconds for one loop of `num_steps` steps, run as training runs it
    (`Trainer.run_loop`: the first loop compiles). After it, untimed, the allocator's free
    memory goes back to the OS, as the training loop does after each loop
    (training/memory.py)."""
    start = time.perf_counter()
    trainer.run_loop(iterator, num_steps)
    int(trainer.step.numpy())  # waits for the loop
    seconds = time.perf_counter() - start
    memory_lib.release()
    return seconds


def _time_steps(trainer, iterators: dict, steps: int, per_loop: int) -> dict:
    """{name: [(steps, seconds) per loop]}: `steps` steps from each iterator in loops of
    `per_loop`, the iterators taking turns loop by loop in A B B A order, so that a drift
    in the machine's speed (neighbours, clocks) reaches each of them alike."""
    timings = {name: [] for name in iterators}
    names, done = list(iterators), 0
    while done < steps:
        n = min(per_loop, steps - done)
        for name in names:
            timings[name].append((n, _timed_loop(trainer, iterators[name], n)))
        names.reverse()
        done += n
    return timings


def _rates(timings: list, batch_size: int) -> dict:
    steps = sum(n for n, _ in timings)
    seconds = sum(t for _, t in timings)
    per_step = [t / n for n, t in timings]
    return {"seq_per_sec": steps * batch_size / seconds, "steps_per_sec": steps / seconds,
            "step_time_median_s": statistics.median(per_step), "step_times_s": per_step}


def _profile(trainer, iterator, logdir: str) -> None:
    """A TensorBoard profiler trace of PROFILE_STEPS one-step loops, written to `logdir`
    (as plugins/profile/<run>/<host>.xplane.pb)."""
    tf.profiler.experimental.start(logdir)
    try:
        for _ in range(PROFILE_STEPS):
            step = int(trainer.step.numpy())
            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                _timed_loop(trainer, iterator, 1)
    finally:
        tf.profiler.experimental.stop()


def bench_train():
    memory = MemoryStages()
    from electra_tf import model_config  # pylint: disable=g-import-not-at-top
    from electra_tf.model import flops as flops_lib  # pylint: disable=g-import-not-at-top
    from electra_tf.training import distribute  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top

    config = _CONFIG.value
    batch_size, steps = _flag(_BATCH_SIZE, 32), _flag(_STEPS, 10)
    warmup, per_loop = _WARMUP_STEPS.value, _STEPS_PER_LOOP.value
    if batch_size < 1 or steps < 1 or warmup < 0 or per_loop < 1:
        raise errors.UserError("--batch_size, --steps and --steps_per_loop must be "
                               "positive, --warmup_steps not negative")
    if _INPUT_BATCHES.value < 1:
        raise errors.UserError("--input_batches must be positive")
    with config.unlocked():
        config.train.batch_size = batch_size
        config.data.max_seq_length = _SEQ_LEN.value
        config.train.steps_per_loop = per_loop
    seq_len = config.data.max_seq_length

    # The strategy first: config.runtime.cpu_devices splits the CPU into logical
    # devices, which TF allows only before anything initialises them.
    strategy = distribute.get_strategy(config.runtime)
    distribute.local_batch_size(strategy, batch_size)  # the replicas must divide it
    memory.record("strategy")
    if _PEAK_TFLOPS.value is not None and _PEAK_TFLOPS.value <= 0:
        raise errors.UserError("--peak_tflops must be positive")

    # ---------------------------------------------------------------- data
    use_real = bool(_REAL_DATA.value) or _COMPARE_DATA.value
    use_synthetic = not _REAL_DATA.value or _COMPARE_DATA.value
    if use_real:
        # Compared with real data, synthetic batches take its vocabulary and P, so that
        # both runs cost the same FLOPs.
        files, vocab, data_dir = _real_data(config)
        vocab_size = vocab.size
        masking_config = loop.masking_config(config, vocab)
        num_predictions = masking_config.max_predictions
    else:
        vocab_size = _flag(_VOCAB_SIZE, 30522)
        num_predictions = masking.max_predictions_per_seq(config.data.mask_prob, seq_len)
    datasets = {}  # the first one's figures are the headline ones
    if use_synthetic:
        datasets["synthetic"] = _synthetic_dataset(strategy, config, num_predictions,
                                                   vocab_size)
    if use_real:
        datasets["real"] = loop.distributed_dataset(strategy, files, config, masking_config,
                                                    training=True)
    input_rate = None
    if _COMPARE_DATA.value:  # the real input path alone, before training competes for CPU
        input_rate = _batches_per_sec(datasets["real"], _INPUT_BATCHES.value)

    memory.record("datasets")

    # ---------------------------------------------------------------- steps
    trainer = loop.Trainer(config, strategy, vocab_size, num_predictions)
    memory.record("trainer_built")
    iterators = {name: iter(dataset) for name, dataset in datasets.items()}
    start = time.perf_counter()
    # Tracing apart from compiling: the Python graph of the loop, then (in the first
    # call) XLA's compilation and the first steps.
    trainer.train_loop.get_concrete_function(next(iter(iterators.values())),
                                             tf.constant(max(warmup, 1)))
    memory.record("traced")
    if warmup:  # tracing and XLA compilation: once, the sources having the same shapes
        for iterator in iterators.values():
            _timed_loop(trainer, iterator, warmup)
    warmup_s = time.perf_counter() - start
    memory.record("warmup_compiled")
    timings = _time_steps(trainer, iterators, steps, per_loop)
    memory.record("timed_steps")
    profile_dir = None
    if _PROFILE.value or _PROFILE_DIR.value:
        profile_dir = _PROFILE_DIR.value or os.path.join(_WORKDIR.value, "profile")
        _profile(trainer, iterators["real" if use_real else "synthetic"], profile_dir)
        memory.record("profile")
    # The machine's matmul peak last: the memory it leaves (NumPy's BLAS keeps its
    # per-thread buffers, XLA its executables: ~60 MiB) then sits under no training
    # step. Its stage still counts in peak_rss_mib, on top of what the process holds
    # between steps (below the steps' peak at the default n). In the dtype the step
    # multiplies in (bfloat16 under mixed_bfloat16).
    compute_dtype = keras.mixed_precision.DTypePolicy(
        distribute.dtype_policy(config.train.mixed_precision, strategy)).compute_dtype
    peaks = matmul_peak_flops(_MATMUL_SIZE.value, compute_dtype)
    peak = _PEAK_TFLOPS.value * 1e12 if _PEAK_TFLOPS.value else max(peaks.values())
    memory.record("matmul_peak")

    # ---------------------------------------------------------------- figures
    headline = _rates(next(iter(timings.values())), batch_size)
    loss = trainer.train_metrics.result().get("loss")
    shape = model_config.shape(config)
    objective = model_config.objective_name(config)  # each objective's own passes
    model_flops = flops_lib.for_shape(shape, seq_len, num_predictions, vocab_size, objective)
    seq_per_sec = headline["seq_per_sec"]
    achieved = seq_per_sec * model_flops
    replicas = strategy.num_replicas_in_sync
    results = {
        "seq_per_sec": round(seq_per_sec, 3),
        "seq_per_sec_per_replica": round(seq_per_sec / replicas, 3),
        "steps_per_sec": round(headline["steps_per_sec"], 4),
        "tokens_per_sec": round(seq_per_sec * seq_len, 1),
        "step_time_median_s": round(headline["step_time_median_s"], 4),
        "step_times_s": [round(t, 3) for t in headline["step_times_s"]],
        "warmup_s": round(warmup_s, 1),
        "model_flops_per_seq": model_flops,
        "achieved_flops": round(achieved),
        "matmul_peak_flops": round(max(peaks.values())),
        "matmul_peak_flops_by_library": {k: round(v) for k, v in peaks.items()},
        "matmul_dtype": compute_dtype,
        # Against --peak_tflops where given (a datasheet figure), else the measured matmul.
        "mfu": round(achieved / peak, 4),
        "mfu_peak_flops": round(peak),
        "mfu_peak_source": "stated" if _PEAK_TFLOPS.value else "measured_matmul",
        "loss": None if loss is None else round(float(loss), 4),
        "batch_size": batch_size, "seq_len": seq_len, "size": config.model.size,
        "shape": shape.to_dict(), "objective": objective,
        "steps": steps, "warmup_steps": warmup, "steps_per_loop": per_loop,
        "num_predictions": num_predictions, "vocab_size": vocab_size,
        "data": "+".join("synthetic" if name == "synthetic" else f"real:{data_dir}"
                         for name in datasets),
        "jit_compile": bool(config.train.jit_compile),
        # What XLA compiled of the step: whole_step, forward_backward or none.
        "xla_scope": trainer.xla_scope,
        "accumulation_steps": trainer.accumulation_steps,
        "remat": trainer.remat,  # recomputed FLOPs are not in model_flops_per_seq / mfu
        "mixed_precision": config.train.mixed_precision,
        "dtype_policy": trainer.policy,
        "strategy": type(strategy).__name__,
        "replicas": replicas,
        "profile_dir": profile_dir,
        # {stage: [resident after it, peak during it]} in MiB, in the order they ran.
        "memory_by_stage_mib": memory.stages,
        "peak_rss_mib": memory.peak_mib,
    }
    if tf.config.list_logical_devices("GPU"):  # the allocator's high-water mark on GPU 0
        results["gpu_peak_memory_mib"] = round(
            tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20)
    if _COMPARE_DATA.value:
        real = _rates(timings["real"], batch_size)
        results.update({
            "real_seq_per_sec": round(real["seq_per_sec"], 3),
            "real_step_time_median_s": round(real["step_time_median_s"], 4),
            "real_step_times_s": [round(t, 3) for t in real["step_times_s"]],
            "input_batches_per_sec": round(input_rate, 2),
            "input_examples_per_sec": round(input_rate * batch_size, 1),
            "input_batches": _INPUT_BATCHES.value,
            # > 1: the pipeline alone outruns training; it must, by a wide margin.
            "input_to_step_ratio": round(input_rate / headline["steps_per_sec"], 2),
            # ≈ 1 (within 5%): training on real data is as fast as on synthetic batches.
            "real_vs_synthetic": round(real["seq_per_sec"] / seq_per_sec, 4),
            # 1: both sources ran the same traced (and compiled) step.
            "train_loop_traces": trainer.train_loop.experimental_get_tracing_count(),
        })
    return results


def _device():
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name}, {cores} CPU cores" + (f", GPUs: {', '.join(gpus)}" if gpus else "")


def _versions():
    import keras_hub  # pylint: disable=g-import-not-at-top
    return {"tensorflow": tf.__version__, "keras": keras.__version__,
            "keras_hub": keras_hub.__version__, "tensorflow_text": text.__version__,
            "python": platform.python_version()}


def _cpu_allocation():
    """What shapes the allocator's speed and memory on a CPU: glibc's tunables (huge pages:
    training/memory.py restarts the tool with them), whether TF runs oneDNN (its own
    choice by CPU, or TF_ENABLE_ONEDNN_OPTS), and whether oneDNN's allocator pools the
    step's buffers or takes them from malloc (TF_ONEDNN_USE_SYSTEM_ALLOCATOR, set by
    cli.py)."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
        onednn = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):  # not in TF's public API: may go away
        onednn = None
    return {"glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
            "tf_enable_onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "onednn": onednn,
            "onednn_system_allocator": os.environ.get("TF_ONEDNN_USE_SYSTEM_ALLOCATOR")}


def _status_mib(field: str) -> int | None:
    """A memory figure of /proc/self/status (VmRSS: resident now, VmHWM: its peak) in
    MiB, or None where /proc is missing (macOS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return None


def _reset_peak_rss() -> None:
    """Restarts the kernel's resident-memory high-water mark (VmHWM) from the current
    RSS (Linux >= 4.0), so that the next reading is the peak of one stage alone; where
    it cannot, the next reading is the peak so far."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_mib() -> int:
    """The peak RSS since the last restart (or since the process began): the kernel's
    VmHWM. Not getrusage's ru_maxrss, which also counts the image a process replaced
    by exec: a benchmark started from a large parent (pytest with TF loaded) would
    report the parent's size. ru_maxrss only where there is no /proc (macOS; bytes)."""
    peak = _status_mib("VmHWM")
    if peak is None:
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = round(maxrss / (2**20 if sys.platform == "darwin" else 1024))
    return peak


class MemoryStages:
    """Where the memory goes: after each stage, the resident memory then and the peak
    during that stage alone (the kernel's high-water mark, restarted after each
    reading; where it cannot be restarted, the peak so far). `peak_mib` is the
    process's peak over all stages."""

    def __init__(self):
        self.stages = {}
        self.peak_mib = 0
        self.record("imports")  # the peak since the process started

    def record(self, stage: str) -> None:
        peak = _peak_rss_mib()
        self.peak_mib = max(self.peak_mib, peak)
        self.stages[stage] = [_status_mib("VmRSS"), peak]
        _reset_peak_rss()


def main(argv):
    if len(argv) > 1:
        raise errors.UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    if _MODE.value != "train" and (_COMPARE_DATA.value or _PROFILE.value or _PROFILE_DIR.value):
        raise errors.UserError("--compare_data and --profile[_dir] are for --mode=train")
    if _PROFILE.value or _PROFILE_DIR.value:
        # XLA:CPU marks each of its ops (fusions, dots) in the trace only when asked; XLA
        # reads the flag at its first compilation, which comes later.
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_enable_xprof_traceme=true").strip()
    if _MODE.value == "train":
        results = bench_train()
    else:
        corpus_path, vocab = _prepare()
        bench = {"input": bench_input, "create_data": bench_create_data,
                 "resume": bench_resume}[_MODE.value]
        results = bench(corpus_path, vocab)
    results.update({
        "mode": _MODE.value,
        "peak_rss_mib": max(results.get("peak_rss_mib", 0), _peak_rss_mib()),
        "rss_at_end_mib": _status_mib("VmRSS"),  # between steps: without a step's peak
        "device": _device(),
        "versions": _versions(),
        **_cpu_allocation(),
    })
    sys.stdout.flush()
    print(json.dumps(results))


if __name__ == "__main__":
    cli.app_run(main)
