"""End to end: `python -m electra_tf.train` on tiny data learns, logs, checkpoints, resumes."""

import concurrent.futures
import glob
import json
import os
import subprocess

import pytest
import tensorflow as tf

from electra_tf import profiling
from electra_tf.data import order
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(data, workdir, *overrides, steps=300, cwd=ROOT):
    return subprocess.run(helpers.train_command(data, workdir, *overrides, steps=steps),
                          cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=helpers.child_env())  # this checkout's, from any cwd


def _scalars(logdir, tag):
    return helpers.summaries(logdir, tag)


def _texts(logdir, tag):
    return helpers.summaries(logdir, tag, lambda array: array.item().decode())


def _hparams_dashboard(logdir):
    """(hparam names, {(group, tag)} metrics) that TensorBoard's HParams plugin shows for
    `--logdir=logdir`, computed by its own backend."""
    # pylint: disable=g-import-not-at-top
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    backend = backend_context.Context(base_plugin.TBContext(
        logdir=logdir, multiplexer=multiplexer,
        data_provider=data_provider.MultiplexerDataProvider(multiplexer, logdir)))
    request = context.RequestContext()
    experiment = backend.experiment_from_metadata(
        request, "", True, backend.hparams_metadata(request, ""), None)
    return ({h.name for h in experiment.hparam_infos},
            {(m.name.group, m.name.tag) for m in experiment.metric_infos})


def _final_metrics(stdout):
    line = [l for l in stdout.splitlines() if l.startswith("final metrics:")][-1]
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[2:])}


@pytest.mark.slow  # two training processes (2-3 min); the CLI's errors have fast tests
def test_tiny_run_learns_logs_and_resumes(data, tmp_path):
    workdir = str(tmp_path / "run")
    result = _train(data, workdir, "--config.train.profile_steps=2")
    assert result.returncode == 0, result.stderr[-3000:]
    # A profile of steps 11-12 (after the first, compiled, loop) for TensorBoard's
    # Profile tab; TF's own INFO lines (the checkpoint saver's) stay out of the log.
    assert "Profiled steps 11-12" in result.stderr
    assert glob.glob(os.path.join(workdir, "logs", "train", "plugins", "profile", "*",
                                  "*.xplane.pb"))
    # ... which tools/profile_summary.py reads: the two steps' markers.
    profile = profiling.summarize(profiling.newest_trace(os.path.join(workdir, "logs",
                                                                      "train")))
    assert profile["steps"] == 2, profile
    assert "Sharding callback" not in result.stderr

    # Learns: evaluation on held-out documents separates replaced from original tokens.
    final = _final_metrics(result.stdout)
    # (Measured: about 0.62 after 300 steps; 0.5 is chance.)
    assert final["disc_auc"] > 0.57, final
    losses = _scalars(os.path.join(workdir, "logs", "train"), "loss")
    assert [s for s, _ in losses] == [50, 100, 150, 200, 250, 300]
    assert losses[-1][1] < 0.8 * losses[0][1], losses
    # The generator learns more slowly than the discriminator in the joint objective (the
    # 50x RTD gradient dominates the clipped global norm): measured 19-25% lower MLM loss
    # at step 300 than over steps 1-50, depending on the dropout masks.
    mlm = _scalars(os.path.join(workdir, "logs", "train"), "mlm_loss")
    assert mlm[-1][1] < 0.9 * mlm[0][1], mlm

    # TensorBoard has every metric, the rates and the evaluation.
    train_tags = {"loss", "mlm_loss", "rtd_loss", "masked_lm_accuracy",
                  "sampled_masked_lm_accuracy", "disc_accuracy", "disc_precision",
                  "disc_recall", "disc_auc", "replaced_fraction", "grad_norm",
                  "learning_rate", "temperature", "steps_per_sec", "examples_per_sec",
                  "tokens_per_sec"}
    for tag in train_tags:
        assert _scalars(os.path.join(workdir, "logs", "train"), tag), tag
    assert _scalars(os.path.join(workdir, "logs", "eval"), "disc_auc")[-1][0] == 300
    # The predictions view of three held-out sequences at the evaluation.
    views = _texts(os.path.join(workdir, "logs", "eval"), "predictions")
    assert [step for step, _ in views] == [300]
    assert views[0][1].count("**Sequence") == 3 and "| P(replaced) |" in views[0][1]
    # TensorBoard's HParams dashboard (its own backend) lists the run's config and its
    # eval metrics, with TensorBoard started at the workdir.
    hparams, metrics = _hparams_dashboard(os.path.dirname(workdir))
    assert {"train.learning_rate", "model.size"} <= hparams
    assert {("eval", "disc_auc"), ("eval", "masked_lm_accuracy"), ("train", "loss")} <= metrics
    assert "ETA" in result.stderr and "steps/s" in result.stderr
    assert os.path.exists(os.path.join(workdir, "config.json"))
    assert os.path.exists(os.path.join(workdir, "vocab.txt"))
    assert tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")).endswith("ckpt-300")

    # The same command with more steps resumes at 300 and continues to 400 (given the
    # workdir relative to the working directory, as README's commands do).
    result = _train(data, "run", steps=400, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Resumed from" in result.stderr and "ckpt-300" in result.stderr
    steps = [s for s, _ in _scalars(os.path.join(workdir, "logs", "train"), "loss")]
    assert steps[-2:] == [350, 400] and steps.count(300) == 1
    assert tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")).endswith("ckpt-400")


BAD_CONFIGS = {  # override: what the error line names
    "--config.train.batch_sise=8": "--config.train.batch_sise: no such key",
    "--config.model.size=huge": "config.model.size",
    # A bad --config=FILE:ARG: the reason and the choices, no traceback text.
    "--config=configs/electra.py:huge": "error: --config=configs/electra.py:huge: unknown "
                                        "size 'huge'; choose one of tiny, small, base, large",
    "--config=configs/nothere.py:tiny": "error: --config=configs/nothere.py:tiny: cannot "
                                        "read the config file ([Errno 2] No such file",
    "--config=README.md": "error: --config=README.md: SyntaxError: ",  # not Python
    "--config=": "error: --config=: cannot read the config file (Path to config file is "
                 "an empty string.)",
    "--config.data.vocab_file=": "config.data.vocab_file",
    "--config.data.train_files=/nonexistent/*.tfrecord": "config.data.train_files",
    "--config.data.max_seq_length=64": "max_seq_length=64",
    "--config.train.optimizer=sgd": "config.train.optimizer",
    "--config.train.mixed_precision=fp8": "config.train.mixed_precision",
    "--config.runtime.strategy=ring": "config.runtime.strategy",
    "--config.model.hidden_size=96 --config.model.num_heads=5":
        "config.model.hidden_size=96 is not a multiple of config.model.num_heads=5",
    # 15 examples cannot be split over 2 replicas.
    "--config.runtime.strategy=mirrored --config.runtime.cpu_devices=2 "
    "--config.train.batch_size=15": "config.train.batch_size=15",
    # A vocab other than the one the data was made with (one word more).
    "OTHER_VOCAB": "differs from",
}


@pytest.fixture(scope="module")
def bad_config_runs(data, tmp_path_factory):
    """{override: (result, workdir)}: every bad config's run, two at a time (each is
    mostly TensorFlow's start-up, which uses one core)."""
    root = tmp_path_factory.mktemp("bad_configs")
    other = helpers.write_vocab(str(root), helpers.WORDS + ["fox"]).path

    def run(case):
        index, override = case
        workdir = root / f"run{index}"
        flags = (f"--config.data.vocab_file={other}" if override == "OTHER_VOCAB"
                 else override).split()
        return override, (_train(data, str(workdir), *flags, steps=1), workdir)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, enumerate(BAD_CONFIGS)))


@pytest.mark.parametrize("override", list(BAD_CONFIGS))
def test_bad_config_is_a_one_line_error_and_writes_nothing(bad_config_runs, override):
    result, workdir = bad_config_runs[override]
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and BAD_CONFIGS[override] in last, last
    assert "Traceback" not in result.stderr and "File \"" not in result.stderr
    assert not workdir.exists() or not any(workdir.iterdir())


@pytest.mark.slow  # one finished run, three refused resumes and one that is told
def test_resuming_with_another_model_or_batch_is_refused_and_an_older_order_is_told(
        data, tmp_path):
    workdir = tmp_path / "run"
    result = _train(data, str(workdir), "--config.data.eval_files=",
                    "--config.train.checkpoint_every=2", steps=2)
    assert result.returncode == 0, result.stderr[-2000:]
    before = sorted(str(p) for p in workdir.rglob("*"))
    for override, message in (("--config.model.generator_hidden_fraction=0.25",
                               "config.model.generator_hidden_size=16, "
                               "config.model.generator_intermediate_size=64, but the run"),
                              ("--config.train.batch_size=8", "config.train.batch_size=8"),
                              ("--config.data.shuffle_buffer=500",
                               "config.data.shuffle_buffer=500")):
        result = _train(data, str(workdir), "--config.data.eval_files=", override, steps=4)
        assert result.returncode == 2, result.stderr[-2000:]
        last = result.stderr.strip().splitlines()[-1]
        assert message in last and "was started with" in last, last
    assert sorted(str(p) for p in workdir.rglob("*")) == before

    # A run begun with the older data order resumes, and is told it reads other examples
    # from there on than the older version would have.
    saved = json.loads((workdir / "config.json").read_text())
    assert saved.pop("data_order") == order.VERSION
    (workdir / "config.json").write_text(json.dumps(saved))
    result = _train(data, str(workdir), "--config.data.eval_files=", steps=4)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "was started with an older data order (a shuffle buffer)" in result.stderr
