"""Fine-tuning configs: `--config=configs/finetune.py:TASK[,SIZE]`.

    python -m electra_tf.finetune --config=configs/finetune.py:mrpc --workdir=/tmp/mrpc \
        --config.init_checkpoint=/tmp/electra_small --config.data.dir=/data/glue/MRPC
    python -m electra_tf.finetune --config=configs/finetune.py:squad2 --workdir=/tmp/sq2 \
        --config.init_checkpoint=/tmp/electra_small --config.data.dir=/data/squad

TASK is a GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte), squad1, squad2, or a
CoNLL-format tagging set: conll2003 (NER), conll2000 (chunking), tagging (any other; see
docs/tagging.md) (electra_tf/finetuning/tasks.py). The learning rate and the layer-wise
decay come from the pre-trained model (0 below): its size preset's, or for a custom shape
values between the presets' by its width and depth (electra_tf/finetuning/hparams.py);
SIZE (tiny, small, base, large) sets a preset's instead. The other defaults are the
original ELECTRA's for the task (its configure_finetuning.py; clip_norm is its value on
another loss, see there); the task adds its own fields (glue/task.py, squad/task.py,
tagging/task.py say what each is). Any field can be overridden with
`--config.SECTION.KEY=VALUE`.
"""

import ml_collections

from electra_tf.finetuning import hparams
from electra_tf.finetuning.glue import specs as glue_specs

# The tasks' names, known without `tasks` (its members import TensorFlow) so that the
# binary answers a bad one before TF's seconds of start-up; `tasks.TASKS` in its order
# (tests/finetuning/test_finetune.py holds them equal).
TASK_NAMES = (*glue_specs.TASKS, "squad1", "squad2",
              "conll2003", "conll2000", "tagging")


def get_config(arg: str = "mrpc") -> ml_collections.ConfigDict:
    task_name, _, size = arg.partition(",")
    if task_name not in TASK_NAMES:
        raise ValueError(f"unknown task {task_name!r}; choose one of "
                         f"{', '.join(TASK_NAMES)}")
    if size and size not in hparams.LEARNING_RATE:
        raise ValueError(f"unknown size {size!r}; choose one of "
                         f"{', '.join(hparams.LEARNING_RATE)}")
    from electra_tf.finetuning import tasks  # pylint: disable=g-import-not-at-top
    task = tasks.get(task_name)
    preset = hparams.for_size(size) if size else hparams.Defaults(0.0, 0.0, "")
    schedule = task.schedule
    config = ml_collections.ConfigDict()
    config.task = task_name               # from TASK above: the defaults below are its own
    config.init_checkpoint = ""   # the pre-training run's workdir (or RUN/checkpoints/ckpt-N)
    # The best model's predictions on the test split(s): GLUE's in its submission format,
    # WORKDIR/test_predictions/<CoLA.tsv, MNLI-m.tsv, AX.tsv, ...>; tagging's in
    # test_predictions.txt with test_metrics (docs/tagging.md); not SQuAD (its test set is
    # not public).
    config.predict_test = False

    config.data = ml_collections.ConfigDict()
    config.data.dir = ""                  # the task's files: GLUE's TSVs (train.tsv, dev*.tsv),
    #                                       SQuAD's JSON (train-v1.1.json, dev-v1.1.json, ...),
    #                                       CoNLL files (train.txt, dev.txt, test.txt[.gz])
    config.data.tfds_data_dir = ""        # else TFDS (glue/<task>, squad), prepared in this dir
    config.data.max_seq_length = schedule.max_seq_length  # original: 128 (SQuAD 512,
    #                                       chunking 256)
    config.data.on_bad = "error"          # error|skip: bad rows (questions) stop the run or count

    config.model = ml_collections.ConfigDict()

    config.train = ml_collections.ConfigDict()
    config.train.batch_size = schedule.batch_size        # original: 32
    config.train.epochs = schedule.epochs  # original: 3 (10 for RTE, STS-B; 2 for SQuAD)
    # 0 = from the pre-trained model's shape (its preset's: original, 1e-4; 5e-5 Large).
    config.train.learning_rate = preset.learning_rate
    config.train.layerwise_lr_decay = preset.layerwise_lr_decay  # 0 = from it (0.8; Large 0.9)
    config.train.warmup_proportion = schedule.warmup_proportion  # original: 0.1
    config.train.weight_decay = schedule.weight_decay    # original: 0.01
    config.train.adam_bias_correction = False   # original: none (BERT's AdamWeightDecay-
    #                                       Optimizer), which its learning rates are for
    # Global-norm clipping of the gradient; original: 1.0, of another loss: ours is the
    # mean over the global batch, its (run_finetuning.py) the sum of the per-example
    # losses over each core's batch, clipped per core before CrossShardOptimizer averages
    # the cores' gradients. Its norm is ~(per-core batch)x ours: it clips far more often,
    # by an amount that depends on its topology.
    config.train.clip_norm = 1.0
    config.train.eval_every = 0           # steps between dev evaluations; 0 = every epoch
    config.train.steps_per_loop = 100     # steps per tf.function call (and log line)
    config.train.seed = 0

    config.runtime = ml_collections.ConfigDict()
    config.runtime.strategy = "auto"      # as pre-training: auto|tpu|mirrored|multi_worker|one_device
    config.runtime.tpu = ""
    config.runtime.cpu_devices = 0
    task.configure(config)                # the task's own fields
    return config
