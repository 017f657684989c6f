"""TensorBoard output: scalars, the config as text and as hparams."""

import json

import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api


def write_scalars(writer, values: dict, step: int):
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.scalar(name, value)
    writer.flush()


def flatten(config, prefix="") -> dict:
    """{"train.batch_size": 128, ...} for a (nested) ConfigDict."""
    out = {}
    for key, value in config.items():
        if hasattr(value, "items"):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def write_config(writer, config):
    """The config as a JSON text summary."""
    with writer.as_default(step=0):
        tf.summary.text("config", "```\n" + json.dumps(config.to_dict(), indent=2) + "\n```")
    writer.flush()


def write_hparams(logdir: str, config):
    """The config as TensorBoard hparams of the run `logdir` (WORKDIR/logs).

    The HParams dashboard lists, per run, the scalars of the sub-runs of the run that
    holds the hparams (metric "eval/disc_auc" is tag disc_auc of `logdir/eval`), so they
    are written at `logdir` itself, next to `train/` and `eval/` (or fine-tuning's
    `dev/`), not in a sub-run. TensorBoard finds sub-runs only below a run that has a
    name, so it must be started above `logdir` (--logdir=WORKDIR, or a directory of
    workdirs): at --logdir=WORKDIR/logs the hparams run is "." and the table lists no
    metrics (tensorboard 2.21). No experiment config (`hparams_config`): TensorBoard
    infers it from the runs, so runs of different kinds under one --logdir all show."""
    values = {k: v if isinstance(v, (bool, int, float, str)) else str(v)
              for k, v in flatten(config).items()}
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default(step=0):
        hparams_api.hparams(values)
    writer.close()
