"""Pre-trains ELECTRA: `python -m electra_tf.train --config=configs/electra.py:SIZE --workdir=DIR`.

Override any config field with `--config.SECTION.KEY=VALUE` (see configs/electra.py).
Re-running the same command resumes from the latest checkpoint in DIR.
"""

from absl import flags
from absl import logging
from ml_collections import config_flags

from electra_tf import cli
from electra_tf import model_config

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file and size, e.g. configs/electra.py:small.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, logs and config.json go here.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    model_config.checked(_CONFIG.value)  # a bad config answered before TensorFlow loads
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    logging.set_verbosity(logging.INFO)
    results = loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    if results:  # none when the workdir was already at config.train.steps
        print("final metrics: " + " ".join(f"{k}={v:.4f}" for k, v in results.items()))
    print(f"TensorBoard: tensorboard --logdir={_WORKDIR.value}")


if __name__ == "__main__":
    cli.prepare_process()  # before TensorFlow is imported (in `main`)
    cli.app_run(main)
