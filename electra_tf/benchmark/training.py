"""--mode=train: the real `trainer.Trainer` (model, optimizer, compiled steps, under
`config.runtime`'s strategy) fed synthetic batches (synthetic.py) or, with `real_data`,
the real pipeline. After `warmup_steps` (tracing, XLA compilation) it times `steps` steps
in loops of `steps_per_loop` and reports seq/s, the model FLOPs (electra_tf/model/
flops.py), the achieved FLOP/s and the MFU against a matmul peak measured in this process
(host.py) or a stated one, and the memory by stage.

`compare_data` answers "is the input pipeline ever the bottleneck?" in one process: on
real TFRecords (`real_data`, or made from the sample corpus and cached in the workdir) it
measures the input pipeline alone (`pipeline.distributed_dataset`, masking included, iterated
without training), then ONE Trainer (one compilation) alternates timed loops on synthetic
and on real batches of the same shapes and vocabulary.

`profile_dir` traces PROFILE_STEPS more steps after the timed ones (so that the tracing
overhead stays out of the timings) with the TensorBoard profiler.
"""

import statistics
import time

import keras
import tensorflow as tf

from electra_tf import profiling
from electra_tf.benchmark import host
from electra_tf.benchmark import sample
from electra_tf.benchmark import settings
from electra_tf.benchmark import synthetic
from electra_tf.data import masking
from electra_tf.data import pipeline
from electra_tf.text import tokenizer as tokenizer_lib
from electra_tf.training import memory as memory_lib

PROFILE_STEPS = 3  # a trace of a few steps is enough, and stays small
SYNTHETIC_VOCAB_SIZE = 30522  # BERT's: the synthetic batches' default vocabulary
SAMPLE_VOCAB_SIZE = 8192  # the vocab learned from the sample corpus by default


def _real_data(config, workdir, real_data, vocab_file, vocab_size, corpus_copies):
    """(files, vocab, data dir) of real TFRecords: `real_data`, or the sample corpus's."""
    seq_len = config.data.max_seq_length
    if real_data:
        vocab = tokenizer_lib.Vocab.load(settings.real_data_vocab(vocab_file, config))
        return pipeline.resolve_files(real_data, seq_len, vocab), vocab, real_data
    corpus_path, vocab = sample.prepare(workdir, corpus_copies,
                                        vocab_size or SAMPLE_VOCAB_SIZE)
    files = sample.sample_data(workdir, corpus_path, vocab, seq_len)
    return files, vocab, sample.data_dir(workdir, seq_len)


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
        profiling.run_traced(trainer, iterator, PROFILE_STEPS)
    finally:
        tf.profiler.experimental.stop()


def run(config, *, workdir: str, seq_len: int, batch_size: int = 32, steps: int = 10,
        warmup_steps: int = 2, steps_per_loop: int = 1, vocab_size: int | None = None,
        real_data: str | None = None, vocab_file: str | None = None,
        compare_data: bool = False, input_batches: int = 300, matmul_size: int = 2048,
        peak_tflops: float | None = None, profile_dir: str | None = None,
        corpus_copies: int = 8) -> dict:
    """The training figures of `config` (its batch size, length and steps per loop
    overridden) as a dict. `vocab_size`: the synthetic batches' vocabulary (default
    SYNTHETIC_VOCAB_SIZE), or with `compare_data` and no `real_data` the one learned from
    the sample corpus (default SAMPLE_VOCAB_SIZE)."""
    memory = host.MemoryStages()
    from electra_tf import model_config  # pylint: disable=g-import-not-at-top
    from electra_tf.model import heads  # pylint: disable=g-import-not-at-top
    from electra_tf.model import objectives  # pylint: disable=g-import-not-at-top
    from electra_tf.training import distribute  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    from electra_tf.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

    warmup, per_loop = warmup_steps, steps_per_loop
    settings.check_training(batch_size=batch_size, steps=steps, warmup_steps=warmup,
                            steps_per_loop=per_loop, input_batches=input_batches,
                            peak_tflops=peak_tflops)
    with config.unlocked():
        config.train.batch_size = batch_size
        config.data.max_seq_length = seq_len
        config.train.steps_per_loop = per_loop
    config = loop.validate(config)  # the checks a training run makes, before anything
    seq_len = config.data.max_seq_length

    # The strategy first: config.runtime.cpu_devices splits the CPU into logical
    # devices, which TF allows only before anything initialises them.
    strategy = distribute.get_strategy(config.runtime)
    distribute.local_batch_size(strategy, batch_size)  # the replicas must divide it
    memory.record("strategy")

    # ---------------------------------------------------------------- data
    use_real = bool(real_data) or compare_data
    use_synthetic = not real_data or compare_data
    if use_real:
        # Compared with real data, synthetic batches take its vocabulary and P, so that
        # both runs cost the same FLOPs.
        files, vocab, data_dir = _real_data(config, workdir, real_data, vocab_file,
                                            vocab_size, corpus_copies)
        vocab_size = vocab.size
        masking_config = pipeline.masking_config(config, vocab)
        num_predictions = masking_config.max_predictions
    else:
        vocab_size = vocab_size or SYNTHETIC_VOCAB_SIZE
        num_predictions = masking.max_predictions_per_seq(config.data.mask_prob, seq_len)
    datasets = {}  # the first one's figures are the headline ones
    if use_synthetic:
        datasets["synthetic"] = synthetic.synthetic_dataset(strategy, config,
                                                            num_predictions, vocab_size)
    if use_real:
        datasets["real"] = pipeline.distributed_dataset(strategy, files, config,
                                                        masking_config, training=True)
    input_rate = None
    if compare_data:  # the real input path alone, before training competes for CPU
        input_rate = sample.batches_per_sec(datasets["real"], input_batches)

    memory.record("datasets")

    # ---------------------------------------------------------------- steps
    trainer = trainer_lib.Trainer(config, strategy, vocab_size, num_predictions)
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
    if profile_dir:
        _profile(trainer, iterators["real" if use_real else "synthetic"], profile_dir)
        memory.record("profile")
    # The machine's matmul peak last: the memory it leaves (NumPy's BLAS keeps its
    # per-thread buffers, XLA its executables: ~60 MiB) then sits under no training
    # step. Its stage still counts in peak_rss_mib, on top of what the process holds
    # between steps (below the steps' peak at the default n). In the dtype the step
    # multiplies in (bfloat16 under mixed_bfloat16).
    compute_dtype = keras.mixed_precision.DTypePolicy(
        distribute.dtype_policy(config.train.mixed_precision, strategy)).compute_dtype
    peaks = host.matmul_peak_flops(matmul_size, compute_dtype)
    peak = peak_tflops * 1e12 if peak_tflops else max(peaks.values())
    memory.record("matmul_peak")
    # The peak is one accelerator's (the probe runs on the default device, a datasheet
    # gives one chip's): the step's replicas each have one, GPUs or TPU cores. Replicas
    # over a CPU's logical devices share its one peak. A TPU's probe would run on the
    # host: there only --peak_tflops gives an MFU.
    kind = distribute.device_kind(strategy)
    accelerators = 1 if kind == "cpu" else strategy.num_replicas_in_sync
    if kind == "tpu" and not peak_tflops:
        peak = None

    # ---------------------------------------------------------------- figures
    headline = _rates(next(iter(timings.values())), batch_size)
    loss = trainer.train_metrics.result().get("loss")
    shape = model_config.shape(config)
    objective = model_config.objective_name(config)  # each objective's own passes
    model_flops = objectives.training_flops(shape, seq_len, num_predictions, vocab_size,
                                           objective, model_config.generator_mode(config))
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
        # Against peak_tflops where given (a datasheet figure), else the measured matmul,
        # times the accelerators the replicas run on.
        "mfu": None if peak is None else round(achieved / (peak * accelerators), 4),
        "mfu_peak_flops": None if peak is None else round(peak),
        "mfu_peak_source": ("stated" if peak_tflops else "measured_matmul" if peak
                            else "none: give --peak_tflops on a TPU"),
        "mfu_accelerators": accelerators,
        "loss": None if loss is None else round(float(loss), 4),
        "batch_size": batch_size, "seq_len": seq_len, "size": config.model.size,
        "shape": shape.to_dict(), "objective": objective,
        "steps": steps, "warmup_steps": warmup, "steps_per_loop": per_loop,
        "num_predictions": num_predictions, "vocab_size": vocab_size,
        # The MLM heads multiply by the table padded to this (model/heads.py), and why
        # (config.train.vocabulary_padding=auto's choice for the device).
        "vocab_size_padded": heads.padded_vocabulary(vocab_size, trainer.vocabulary_multiple),
        "vocabulary_padding_reason": trainer.vocabulary_padding_reason,
        "data": "+".join("synthetic" if name == "synthetic" else f"real:{data_dir}"
                         for name in datasets),
        "jit_compile": bool(config.train.jit_compile),
        # What XLA compiled of the step: whole_step, forward_backward or none.
        "xla_scope": trainer.xla_scope,
        "accumulation_steps": trainer.accumulation_steps,
        "remat": trainer.remat,  # recomputed FLOPs are not in model_flops_per_seq / mfu
        "remat_reason": trainer.remat_reason,  # config.train.remat=auto's choice and why
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
    if compare_data:
        real = _rates(timings["real"], batch_size)
        results.update({
            "real_seq_per_sec": round(real["seq_per_sec"], 3),
            "real_step_time_median_s": round(real["step_time_median_s"], 4),
            "real_step_times_s": [round(t, 3) for t in real["step_times_s"]],
            "input_batches_per_sec": round(input_rate, 2),
            "input_examples_per_sec": round(input_rate * batch_size, 1),
            "input_batches": input_batches,
            # > 1: the pipeline alone outruns training; it must, by a wide margin.
            "input_to_step_ratio": round(input_rate / headline["steps_per_sec"], 2),
            # ≈ 1 (within 5%): training on real data is as fast as on synthetic batches.
            "real_vs_synthetic": round(real["seq_per_sec"] / seq_per_sec, 4),
            # 1: both sources ran the same traced (and compiled) step.
            "train_loop_traces": trainer.train_loop.experimental_get_tracing_count(),
        })
    return results
