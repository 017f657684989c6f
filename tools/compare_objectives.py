r"""Pre-trains named config variants at EQUAL training compute, fine-tunes each alike on
the same downstream task, and writes a Markdown table and a PNG plot (the paper's
Table 5, generator-size and adversarial studies, on your own data).

  python tools/compare_objectives.py --config=configs/electra.py:tiny \
      --config.data.train_files=DATA --config.data.eval_files=HELDOUT \
      --config.data.vocab_file=vocab.txt --config.train.steps=600 \
      --preset=generator_size --task_text=heldout.txt --output_dir=/tmp/compare

A variant is a name and overrides of --config (`electra_tf/experiments/variants.py`):
`--variant=NAME:KEY=VALUE[,KEY=VALUE...]`, any key of the config (repeat the flag for
more). `--preset` adds a study's variants: `objectives` (every pre-training objective,
the default when no variant is given), `generator_size` (generator widths 1/4, 1/2, 3/4,
1 of the discriminator's), `adversarial` (joint against adversarial generator
training). `--objectives=electra,mlm` is short for a variant per objective, named by it.

The budget is the training FLOPs (`model/objectives`, each variant's own resolved shape
and objective) of `config.train.steps` steps of `--budget_variant` (default: the first
variant); each variant trains floor(budget / its FLOPs per step) steps, the warm-up
scaled alike. Same data, seed and everything else. Each variant's held-out metrics are
evaluated `--evaluations` times along the way.

Downstream: GLUE TSVs (`--task_dir`, `--task`), or, with `--task_text=FILE`, a task made
from its lines (nothing is downloaded): sentences as they are (label 1) against the
same sentences with two words swapped (label 0), in SST-2's layout. Every variant
fine-tunes its encoder (ELECTRA's discriminator; `mlm`'s model) with the same settings.

Writes OUTPUT_DIR/results.json (per variant: steps, FLOPs, every evaluation, the last
held-out masked_lm_accuracy and disc_auc, the fine-tuned dev metrics), table.md and
comparison.png (of the last task run); runs/NAME and finetune/TASK/NAME hold the runs
(re-running the same command resumes them; another task re-uses the pre-training
runs; other fine-tuning settings, --finetune_epochs among them, need another
--output_dir or the finetune/TASK folder removed).
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import importlib.util
import os

from absl import flags
from ml_collections import config_flags

from electra_tf import errors
from electra_tf import flags as common_flags

config_flags.DEFINE_config_file("config", "configs/electra.py:tiny",
                                "The pre-training config every variant overrides.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the runs, table and plot go.",
                                  required=True)
_PRESETS = flags.DEFINE_multi_enum("preset", [], ["objectives", "generator_size",
                                                  "adversarial"],
                                   "A study's variants (repeatable): objectives, "
                                   "generator_size, adversarial.")
_VARIANTS = flags.DEFINE_multi_string("variant", [], "NAME:KEY=VALUE[,KEY=VALUE...]: a "
                                      "variant overriding --config (repeatable).")
_OBJECTIVES = flags.DEFINE_list("objectives", [], "Short for a variant per objective, "
                                "named by it (model.objective=NAME).")
_BUDGET = flags.DEFINE_string("budget_variant", None, "The budget is the FLOPs of "
                              "config.train.steps steps of this variant (default: the "
                              "first).")
_OLD_BUDGET = flags.DEFINE_string("budget_objective", None, "Gone: use --budget_variant "
                                  "(with --objectives, variants are named by objective).")
_EVALUATIONS = flags.DEFINE_integer("evaluations", 4, "Held-out evaluations per run.",
                                    lower_bound=1)
_TASK = flags.DEFINE_string("task", "sst2", "The GLUE task of --task_dir "
                            "(configs/finetune.py:TASK).")
_TASK_DIR = flags.DEFINE_string("task_dir", None, "The task's TSVs (train.tsv, dev.tsv).")
_TASK_TEXT = flags.DEFINE_string("task_text", None, "Or make the task from this text "
                                 "file's lines (original vs two words swapped).")
_TASK_EXAMPLES = flags.DEFINE_integer("task_examples", 2000, "--task_text: train "
                                      "examples (dev: a quarter as many).", lower_bound=1)
_FT_EPOCHS = flags.DEFINE_integer("finetune_epochs", 3, "Fine-tuning epochs.", lower_bound=1)
_FT_BATCH = flags.DEFINE_integer("finetune_batch_size", 32, "Fine-tuning batch size.",
                                 lower_bound=1)


def finetune_config(config, task_dir: str):
    """configs/finetune.py:TASK (read by its path, as --config=configs/finetune.py:TASK
    reads it) with this comparison's data, epochs, batch and seed: every variant's."""
    spec = importlib.util.spec_from_file_location("finetune_config", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
        "finetune.py"))
    finetune_configs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(finetune_configs)
    tuning = finetune_configs.get_config(_TASK.value)
    tuning.data.dir = task_dir
    tuning.data.max_seq_length = config.data.max_seq_length
    tuning.train.epochs = _FT_EPOCHS.value
    tuning.train.batch_size = _FT_BATCH.value
    tuning.train.seed = config.train.seed
    tuning.runtime.strategy = config.runtime.strategy
    return tuning


def main(argv):
    del argv
    config, out = flags.FLAGS.config, _OUTPUT_DIR.value
    if _OLD_BUDGET.value:
        raise errors.UserError(f"--budget_objective is gone: use --budget_variant="
                               f"{_OLD_BUDGET.value} (--objectives names each variant by "
                               "its objective)")
    if bool(_TASK_DIR.value) == bool(_TASK_TEXT.value):
        raise errors.UserError("give --task_dir=GLUE_TSV_DIR or --task_text=FILE")
    if not config.data.vocab_file:
        raise errors.UserError("config.data.vocab_file is empty")
    common_flags.check_output_path("output_dir", out, directory=True)
    # After the checks that need no TensorFlow: those are answered before its start-up.
    from electra_tf.experiments import compare  # pylint: disable=g-import-not-at-top
    from electra_tf.experiments import variants  # pylint: disable=g-import-not-at-top
    from electra_tf.text import tokenizer  # pylint: disable=g-import-not-at-top
    given = variants.expand(_PRESETS.value, _VARIANTS.value, _OBJECTIVES.value)
    if not given:  # the comparison this tool began with
        given = variants.expand(["objectives"])
    # Before hours of pre-training, not after them.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    if _TASK_TEXT.value and (not tf.io.gfile.exists(_TASK_TEXT.value)
                             or tf.io.gfile.isdir(_TASK_TEXT.value)):
        raise errors.UserError(f"--task_text={_TASK_TEXT.value}: " + (
            "a directory, not a file" if tf.io.gfile.isdir(_TASK_TEXT.value)
            else "no such file"))
    if _TASK_DIR.value and not tf.io.gfile.isdir(_TASK_DIR.value):
        raise errors.UserError(f"--task_dir={_TASK_DIR.value}: no such directory")
    vocab = tokenizer.Vocab.load(config.data.vocab_file)
    budget = _BUDGET.value or given[0].name
    planned = variants.plan(config, vocab, given, budget, _EVALUATIONS.value)
    tf.io.gfile.makedirs(out)
    task_dir = _TASK_DIR.value or compare.swapped_words_task(
        _TASK_TEXT.value, workdir_lib.path(out, compare.TASK), _TASK_EXAMPLES.value,
        config.train.seed)
    # Fine-tuning runs are per task: another task re-uses the pre-training runs.
    task_name = _TASK.value if _TASK_DIR.value else "swapped_words"
    print(compare.run(planned, finetune_config(config, task_dir), out, task_name, config,
                      budget))


if __name__ == "__main__":
    cli.app_run(main)
