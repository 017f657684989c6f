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
    """The config as a JSON text summary and as TensorBoard hparams."""
    flat = flatten(config)
    with writer.as_default(step=0):
        tf.summary.text("config", "```\n" + json.dumps(config.to_dict(), indent=2) + "\n```")
        hparams_api.hparams({k: v if isinstance(v, (bool, int, float, str)) else str(v)
                             for k, v in flat.items()})
    writer.flush()
