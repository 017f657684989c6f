"""End to end: `python -m electra_tf.train` on tiny data learns, logs, checkpoints, resumes."""

import glob
import os
import random
import subprocess
import sys

import pytest
import tensorflow as tf

from electra_tf.data import writer
from electra_tf.text import corpus
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _learnable_corpus(path, num_documents, seed):
    """Sentences that repeat one word ("cat cat cat cat ."): a replaced token differs
    from its neighbours, a signal a tiny model picks up in a few hundred steps."""
    rng = random.Random(seed)
    docs = [[" ".join([rng.choice(helpers.WORDS)] * rng.randint(4, 10)) + " ."
             for _ in range(6)] for _ in range(num_documents)]
    corpus.write_corpus(corpus.documents_to_lines(docs), path)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    vocab = helpers.write_vocab(str(root))
    out = {"vocab": vocab.path, "root": root}
    for split, n, seed in (("train", 300, 0), ("eval", 40, 1)):
        text = _learnable_corpus(str(root / f"{split}.txt"), n, seed)
        out[split] = str(root / split)
        writer.write_pretraining_data(corpus.open_corpus(text), vocab, out[split],
                                      max_seq_length=32, num_shards=2, seed=seed,
                                      log=lambda _: None)
    return out


def _train(data, workdir, *overrides, steps=300):
    command = [
        sys.executable, "-m", "electra_tf.train", "--config=configs/electra.py:tiny",
        f"--workdir={workdir}", f"--config.data.train_files={data['train']}",
        f"--config.data.eval_files={data['eval']}", f"--config.data.vocab_file={data['vocab']}",
        "--config.data.max_seq_length=32", "--config.data.shuffle_buffer=1000",
        "--config.train.batch_size=16", f"--config.train.steps={steps}",
        "--config.train.warmup_steps=15", "--config.train.log_every=50",
        "--config.train.checkpoint_every=100", "--config.train.eval_every=300",
        "--config.train.eval_steps=5", *overrides]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _scalars(logdir, tag):
    values = []
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(values)


def _final_metrics(stdout):
    line = [l for l in stdout.splitlines() if l.startswith("final metrics:")][-1]
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[2:])}


def test_tiny_run_learns_logs_and_resumes(data, tmp_path):
    workdir = str(tmp_path / "run")
    result = _train(data, workdir)
    assert result.returncode == 0, result.stderr[-3000:]

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
                  "learning_rate", "steps_per_sec", "examples_per_sec", "tokens_per_sec"}
    for tag in train_tags:
        assert _scalars(os.path.join(workdir, "logs", "train"), tag), tag
    assert _scalars(os.path.join(workdir, "logs", "eval"), "disc_auc")[-1][0] == 300
    assert "ETA" in result.stderr and "steps/s" in result.stderr
    assert os.path.exists(os.path.join(workdir, "config.json"))
    assert os.path.exists(os.path.join(workdir, "vocab.txt"))
    assert tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")).endswith("ckpt-300")

    # The same command with more steps resumes at 300 and continues to 400.
    result = _train(data, workdir, steps=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Resumed from" in result.stderr and "ckpt-300" in result.stderr
    steps = [s for s, _ in _scalars(os.path.join(workdir, "logs", "train"), "loss")]
    assert steps[-2:] == [350, 400] and steps.count(300) == 1
    assert tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")).endswith("ckpt-400")


@pytest.mark.parametrize("override, message", [
    ("--config.train.batch_sise=8", "batch_sise"),
    ("--config.model.size=huge", "config.model.size"),
    ("--config.data.vocab_file=", "config.data.vocab_file"),
    ("--config.data.train_files=/nonexistent/*.tfrecord", "config.data.train_files"),
    ("--config.data.max_seq_length=64", "max_seq_length"),
    ("--config.train.optimizer=sgd", "config.train.optimizer"),
])
def test_bad_config_is_a_clear_error(data, tmp_path, override, message):
    result = _train(data, str(tmp_path / "run"), override, steps=1)
    assert result.returncode != 0
    assert message in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
