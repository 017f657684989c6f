"""Fine-tunes a pre-trained discriminator on a GLUE task, SQuAD (squad1, squad2) or a
CoNLL-format tagging task (conll2003, conll2000, tagging):

    python -m electra_tf.finetune --config=configs/finetune.py:TASK --workdir=DIR \
        --config.init_checkpoint=PRETRAIN_WORKDIR [--config.data.dir=TASK_DATA_DIR]

Writes DIR/results.json after each evaluation, DIR/best (the best checkpoint by the task's
metric), DIR/export/<step> (that model as a SavedModel), TensorBoard logs in DIR/logs
(`tensorboard --logdir=DIR`: the HParams tab lists the metrics from there), and the best
step's predictions: SQuAD's DIR/predictions.json (and null_odds.json for 2.0), tagging's
DIR/predictions.txt.
Re-running the same command resumes.
"""

from absl import flags
from absl import logging
from ml_collections import config_flags

from electra_tf import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file and task, e.g. configs/finetune.py:mrpc or :squad2.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, logs and results go here.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    from electra_tf.finetuning import loop  # pylint: disable=g-import-not-at-top
    logging.set_verbosity(logging.INFO)
    metrics = loop.finetune(_CONFIG.value, _WORKDIR.value)
    for split, values in metrics.items():
        print(f"best {split}: " + " ".join(f"{k}={v:.4f}" for k, v in values.items()))
    print(f"results: {workdir_lib.path(_WORKDIR.value, workdir_lib.RESULTS)}")
    print(f"TensorBoard: tensorboard --logdir={_WORKDIR.value}")


if __name__ == "__main__":
    cli.prepare_process()  # before TensorFlow is imported (in `main`)
    cli.app_run(main)
