"""GLUE fine-tuning configs: `--config=configs/finetune.py:TASK[,SIZE]`.

    python -m electra_tf.finetune --config=configs/finetune.py:mrpc --workdir=/tmp/mrpc \
        --config.init_checkpoint=/tmp/electra_small --config.data.dir=/data/glue/MRPC

TASK is one of cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte. The learning rate and the
layer-wise decay come from the pre-trained model (0 below): its size preset's, or for a
custom shape values between the presets' by its width and depth
(electra_tf/finetuning/hparams.py); SIZE (tiny, small, base, large) sets a preset's
instead. Defaults per task are the original's (electra_tf/finetuning/glue.py says where
each comes from); any field can be overridden with `--config.SECTION.KEY=VALUE`.
"""

import ml_collections

from electra_tf.finetuning import glue
from electra_tf.finetuning import hparams


def get_config(arg: str = "mrpc") -> ml_collections.ConfigDict:
    task_name, _, size = arg.partition(",")
    if task_name not in glue.TASKS:
        raise ValueError(f"unknown task {task_name!r}; choose one of "
                         f"{', '.join(glue.TASKS)}")
    task = glue.TASKS[task_name]
    if size and size not in hparams.LEARNING_RATE:
        raise ValueError(f"unknown size {size!r}; choose one of "
                         f"{', '.join(hparams.LEARNING_RATE)}")
    preset = hparams.for_size(size) if size else hparams.Defaults(0.0, 0.0, "")
    config = ml_collections.ConfigDict()
    config.task = task_name               # from TASK above: the defaults below are its own
    config.init_checkpoint = ""   # the pre-training run's workdir (or RUN/checkpoints/ckpt-N)
    # The best model's predictions on the test split(s), in GLUE's submission format:
    # WORKDIR/test_predictions/<CoLA.tsv, MNLI-m.tsv, ...>.
    config.predict_test = False

    config.data = ml_collections.ConfigDict()
    config.data.dir = ""                  # GLUE's TSVs for this task (train.tsv, dev*.tsv)
    config.data.tfds_data_dir = ""        # else TFDS glue/<task>, prepared in this data dir
    config.data.max_seq_length = task.max_seq_length  # original: 128
    config.data.on_bad = "error"          # error|skip: bad TSV rows stop the run or are counted

    config.model = ml_collections.ConfigDict()
    config.model.dropout = 0.1            # on the [CLS] vector; original: 0.1

    config.train = ml_collections.ConfigDict()
    config.train.batch_size = task.train_batch_size      # original: 32
    config.train.epochs = task.num_train_epochs          # original: 3 (10 for RTE, STS-B)
    # 0 = from the pre-trained model's shape (its preset's: original, 1e-4; 5e-5 Large).
    config.train.learning_rate = preset.learning_rate
    config.train.layerwise_lr_decay = preset.layerwise_lr_decay  # 0 = from it (0.8; Large 0.9)
    config.train.warmup_proportion = task.warmup_proportion  # original: 0.1
    config.train.weight_decay = task.weight_decay_rate   # original: 0.01
    config.train.clip_norm = 1.0                         # original: 1.0
    config.train.eval_every = 0           # steps between dev evaluations; 0 = every epoch
    config.train.steps_per_loop = 100     # steps per tf.function call (and log line)
    config.train.seed = 0

    config.runtime = ml_collections.ConfigDict()
    config.runtime.strategy = "auto"      # as pre-training: auto|tpu|mirrored|multi_worker|one_device
    config.runtime.tpu = ""
    config.runtime.cpu_devices = 0
    return config
