r"""Measures training and data-path speed; prints one JSON line last.

  python tools/benchmark.py --config=configs/electra.py:small   # training steps/s and MFU
      [--batch_size=32 --seq_len=128 --steps=10 --warmup_steps=2 --config.KEY=VALUE ...]
      [--real_data=DIR --vocab_file=vocab.txt]                   # real TFRecords instead
      [--compare_data]          # input alone, synthetic and real steps, in one process
      [--profile [--profile_dir=DIR]]                            # + a TensorBoard trace
  python tools/benchmark.py --mode=input        # masked batches/s from real TFRecords
  python tools/benchmark.py --mode=create_data  # create_pretraining_data vs tokenizer alone
      [--corpus_copies=60 --beam_workers=1 --beam_workers=2]  # and on Beam (~110 MB)
  python tools/benchmark.py --mode=resume [--resume_steps=0,1000000]  # data position cost

Each mode's logic is a module of electra_tf/benchmark/ (training, input_pipeline,
create_data, resume; host.py probes the machine); this tool reads the flags, runs one and
prints its figures with the host's as one JSON line.

--mode=train (the default) times the real `trainer.Trainer` on SYNTHETIC batches of the
pipeline's exact structure (random ids in a --vocab_size vocabulary), or with --real_data
on the real pipeline, after --warmup_steps (tracing, XLA compilation): seq/s, the model
FLOPs, the achieved FLOP/s and the MFU against a matmul peak measured in this process (or
--peak_tflops), and the memory by stage.

--compare_data: is the input pipeline ever the bottleneck? `input_to_step_ratio` (input
rate alone / synthetic step rate: >> 1 means the pipeline keeps up) and
`real_vs_synthetic` (real / synthetic step rate on one Trainer: ~1 means feeding real
data costs nothing).

--profile (or --profile_dir) traces a few more steps after the timed ones:
`tensorboard --logdir=<profile_dir>`, Profile tab.

--mode=resume: `resume_seconds_at_step` (making the input at each forged step to its first
batch), `continues_exactly`, and `replay_seconds_estimate` (what re-reading every record
before the last step would take: what resuming cost before data/order.py).

For --mode=input|create_data|resume (and --compare_data without --real_data) the corpus is the
built-in sample corpus, repeated `--corpus_copies` times so that start-up costs do not
dominate; corpus, vocab and TFRecords are cached in --workdir.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

from electra_tf import cli  # noqa: E402
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import json
import sys

from absl import flags
from absl import logging
from ml_collections import config_flags

from electra_tf import config_check
from electra_tf import errors
from electra_tf import flags as common_flags
from electra_tf import model_config
from electra_tf.benchmark import settings
from electra_tf.text import special_tokens

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_MODE = flags.DEFINE_enum("mode", "train", ["train", "input", "create_data", "resume"],
                          "What to measure.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(ROOT, "configs", "electra.py") + ":small",
    "Pre-training config and size (train mode), e.g. configs/electra.py:small.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/electra_tf_benchmark", "Cache directory.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "max_seq_length (overrides the config's).",
                                lower_bound=config_check.MIN_SEQ_LENGTH)
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
    lower_bound=len(special_tokens.SPECIAL_TOKENS) + 1)
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
    "peak_tflops", None, "Train mode: one accelerator's datasheet peak in TFLOP/s for the "
    "step's compute dtype (e.g. 989.4 for an H100 SXM's dense bfloat16; a TPU core's on a "
    "TPU, where nothing else gives an MFU); the MFU is then taken against it, times the "
    "GPUs or TPU cores the replicas run on, instead of the matmul measured in this process "
    "(both are printed).")
XPROF_TRACEME = "--xla_cpu_enable_xprof_traceme=true"
_PROFILE = flags.DEFINE_bool(
    "profile", False, "Train mode: write a TensorBoard profiler trace of a few steps "
    "after the timed ones, to --profile_dir or <workdir>/profile "
    f"(on a CPU, run with XLA_FLAGS={XPROF_TRACEME} for XLA's ops by name).")
_PROFILE_DIR = flags.DEFINE_string(
    "profile_dir", None, "Train mode: where --profile writes (giving it implies --profile).")
_RESUME_STEPS = flags.DEFINE_list(
    "resume_steps", ["0", "1000000"], "Resume mode: the (forged) steps to resume at.")
_RESUME_REPEATS = flags.DEFINE_integer("resume_repeats", 3, "Resume mode: timings per step.")
_BEAM_WORKERS = flags.DEFINE_multi_integer(
    "beam_workers", [1, 2], "--mode=create_data: also time the job on Apache Beam's "
    "DirectRunner with these numbers of worker processes (none: --beam_workers=0).")
_CORPUS_COPIES = flags.DEFINE_integer("corpus_copies", 8, "Sample corpus repetitions.",
                                      lower_bound=1)



def _flag(flag, default):
    return default if flag.value is None else flag.value


def _profile_dir() -> str | None:
    """Where --profile writes its trace; None: no trace."""
    if _PROFILE.value or _PROFILE_DIR.value:
        return _PROFILE_DIR.value or os.path.join(_WORKDIR.value, "profile")
    return None


def _resume_steps() -> list[int]:
    """The --resume_steps list as whole numbers, or a UserError."""
    try:
        return [int(s) for s in _RESUME_STEPS.value]
    except ValueError:
        raise errors.UserError(f"--resume_steps={','.join(_RESUME_STEPS.value)}: give "
                               "whole numbers") from None


def check_flags() -> None:
    """The flags' checks that need no TensorFlow (a local path's; a URL's loads TF), and
    in train mode the config's (`model_config.checked`, with the flags' overrides, as
    `training.run` validates it): a one-line `UserError` before anything is measured or
    written."""
    train = _MODE.value == "train"
    if not train and (_COMPARE_DATA.value or _PROFILE.value or _PROFILE_DIR.value):
        raise errors.UserError("--compare_data and --profile[_dir] are for --mode=train")
    settings.check_training(
        batch_size=_flag(_BATCH_SIZE, 1), steps=_flag(_STEPS, 1),
        warmup_steps=_WARMUP_STEPS.value, steps_per_loop=_STEPS_PER_LOOP.value,
        input_batches=_INPUT_BATCHES.value, peak_tflops=_PEAK_TFLOPS.value)
    if _MODE.value == "resume":
        settings.check_resume(steps=_resume_steps(), repeats=_RESUME_REPEATS.value)
    if train:
        config = _CONFIG.value.copy_and_resolve_references()
        with config.unlocked():  # training.run's overrides
            config.train.batch_size = _flag(_BATCH_SIZE, 32)
            config.data.max_seq_length = _SEQ_LEN.value
            config.train.steps_per_loop = _STEPS_PER_LOOP.value
        model_config.checked(config)
    # The folders written: the cache (the sample corpus, its vocab and TFRecords) and
    # the trace (in the cache unless --profile_dir says).
    if (not train or (_COMPARE_DATA.value and not _REAL_DATA.value)
            or (_PROFILE.value and not _PROFILE_DIR.value)):
        common_flags.check_output_path("workdir", _WORKDIR.value, directory=True)
    if _PROFILE_DIR.value:
        common_flags.check_output_path("profile_dir", _PROFILE_DIR.value, directory=True)
    if train and _REAL_DATA.value:
        vocab_file = settings.real_data_vocab(_VOCAB_FILE.value, _CONFIG.value)
        common_flags.check_input_patterns("real_data", _REAL_DATA.value)
        common_flags.check_input_path("vocab_file" if _VOCAB_FILE.value
                                      else "config.data.vocab_file", vocab_file,
                                      directory=None)


def _run_mode() -> dict:
    """The mode's figures (electra_tf/benchmark/<mode>.py), from the flags."""
    # pylint: disable=g-import-not-at-top
    from electra_tf.benchmark import create_data
    from electra_tf.benchmark import input_pipeline
    from electra_tf.benchmark import resume
    from electra_tf.benchmark import sample
    from electra_tf.benchmark import training
    # pylint: enable=g-import-not-at-top
    workdir, seq_len = _WORKDIR.value, _SEQ_LEN.value
    if _MODE.value == "train":
        return training.run(
            _CONFIG.value, workdir=workdir, seq_len=seq_len,
            batch_size=_flag(_BATCH_SIZE, 32), steps=_flag(_STEPS, 10),
            warmup_steps=_WARMUP_STEPS.value, steps_per_loop=_STEPS_PER_LOOP.value,
            vocab_size=_VOCAB_SIZE.value, real_data=_REAL_DATA.value,
            vocab_file=_VOCAB_FILE.value, compare_data=_COMPARE_DATA.value,
            input_batches=_INPUT_BATCHES.value, matmul_size=_MATMUL_SIZE.value,
            peak_tflops=_PEAK_TFLOPS.value, profile_dir=_profile_dir(),
            corpus_copies=_CORPUS_COPIES.value)
    corpus_path, vocab = sample.prepare(workdir, _CORPUS_COPIES.value,
                                        _flag(_VOCAB_SIZE, training.SAMPLE_VOCAB_SIZE))
    if _MODE.value == "input":
        return input_pipeline.run(workdir, corpus_path, vocab, seq_len=seq_len,
                                  batch_size=_flag(_BATCH_SIZE, 128),
                                  steps=_flag(_STEPS, 300))
    if _MODE.value == "create_data":
        return create_data.run(workdir, corpus_path, vocab, seq_len=seq_len,
                               beam_workers=tuple(n for n in _BEAM_WORKERS.value if n > 0))
    return resume.run(_CONFIG.value, workdir, corpus_path, vocab, seq_len=seq_len,
                      steps=_resume_steps(), repeats=_RESUME_REPEATS.value,
                      batch_size=_BATCH_SIZE.value)


def main(argv):
    del argv
    check_flags()
    # TensorFlow loads here (in `_run_mode` and `host`), once the flags are checked.
    from electra_tf.benchmark import host  # pylint: disable=g-import-not-at-top
    if _profile_dir() and XPROF_TRACEME not in os.environ.get("XLA_FLAGS", ""):
        # The tool sets no environment of its own: the user's XLA_FLAGS are the run's.
        logging.info("--profile: XLA:CPU names its ops (fusions, dots) in the trace only "
                     "with XLA_FLAGS=%s in the environment", XPROF_TRACEME)
    results = _run_mode()
    results.update({
        "mode": _MODE.value,
        "peak_rss_mib": max(results.get("peak_rss_mib", 0), host.peak_rss_mib()),
        "rss_at_end_mib": host.status_mib("VmRSS"),  # between steps: without a step's peak
        "device": host.device(),
        "versions": host.versions(),
        **host.cpu_allocation(),
    })
    sys.stdout.flush()
    print(json.dumps(results))


if __name__ == "__main__":
    cli.app_run(main)
