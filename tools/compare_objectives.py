r"""Pre-trains several objectives at EQUAL training compute, fine-tunes each on the same
downstream task, and writes a Markdown table and a PNG plot (the issue's RTD-vs-MLM
experiment, the paper's Table 5 on your own data).

  python tools/compare_objectives.py --config=configs/electra.py:tiny \
      --config.data.train_files=DATA --config.data.eval_files=HELDOUT \
      --config.data.vocab_file=vocab.txt --config.train.steps=600 \
      --task_text=heldout.txt --output_dir=/tmp/compare

The budget is the training FLOPs (`model/flops.py`, per objective) of
`config.train.steps` steps of `--budget_objective` (electra); each objective trains
floor(budget / its FLOPs per step) steps, so `mlm` (no generator) trains more steps and
`all_tokens_mlm` (the vocabulary at every position) fewer. Same data, seed and
everything else; the warm-up is scaled with the steps. Each objective's held-out
metrics are evaluated `--evaluations` times along the way.

Downstream: GLUE TSVs (`--task_dir`, `--task`), or, with `--task_text=FILE`, a task made
from its lines (nothing is downloaded): sentences as they are (label 1) against the
same sentences with two words swapped (label 0), in SST-2's layout. Every objective
fine-tunes its encoder (ELECTRA's discriminator; `mlm`'s model) with the same settings.

Writes OUTPUT_DIR/results.json, table.md and comparison.png (of the last task run);
runs/OBJECTIVE and finetune/TASK/OBJECTIVE hold the runs (re-running resumes them;
another task re-uses the pre-training runs).
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import csv
import importlib.util
import json
import os
import random
import time

from absl import flags
from ml_collections import config_flags

from electra_tf import errors
from electra_tf import flags as common_flags

config_flags.DEFINE_config_file("config", "configs/electra.py:tiny",
                                "The pre-training config every objective shares.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the runs, table and plot go.",
                                  required=True)
_OBJECTIVES = flags.DEFINE_list("objectives", "electra,electra_15,mlm,replace_mlm,"
                                "all_tokens_mlm", "The objectives to compare.")
_BUDGET = flags.DEFINE_string("budget_objective", "electra", "The budget is the FLOPs of "
                              "config.train.steps steps of this objective.")
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


def swapped_words_task(text_file: str, directory: str, num_train: int, seed: int) -> str:
    """train.tsv/dev.tsv in SST-2's layout from `text_file`'s lines of 4+ words, each
    line used once (dev's never in train): as it is (1) or with two different words
    swapped (0), in equal numbers."""
    with open(text_file, encoding="utf-8") as f:
        lines = [" ".join(l.split()) for l in f if len(l.split()) >= 4]
    rng = random.Random(seed)
    rng.shuffle(lines)
    num_dev = max(num_train // 4, 1)
    if len(lines) < num_train + num_dev:  # dev sentences never seen in training
        raise errors.UserError(
            f"--task_text={text_file}: {len(lines)} lines of 4+ words, fewer than the "
            f"{num_train + num_dev} --task_examples={num_train} needs (train + dev)")
    os.makedirs(directory, exist_ok=True)
    for split, n, offset in (("train", num_train, 0), ("dev", num_dev, num_train)):
        rows = []
        for i in range(n):
            words = lines[offset + i].split()
            label = i % 2
            if not label:
                a, b = rng.sample(range(len(words)), 2)
                while words[a] == words[b] and len(set(words)) > 1:
                    a, b = rng.sample(range(len(words)), 2)
                words[a], words[b] = words[b], words[a]
            rows.append([" ".join(words), str(label)])
        with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8",
                  newline="") as f:
            out = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\",
                             lineterminator="\n")
            out.writerow(["sentence", "label"])
            out.writerows(rows)
    return directory


def budgets(config, vocab, names, budget_objective):
    """{objective: (steps, training FLOPs per step)} at the FLOPs of config.train.steps
    steps of `budget_objective`."""
    from electra_tf import model_config  # pylint: disable=g-import-not-at-top
    from electra_tf.model import objectives  # pylint: disable=g-import-not-at-top
    from electra_tf.data import pipeline  # pylint: disable=g-import-not-at-top
    shape = model_config.shape(config)
    predictions = pipeline.masking_config(config, vocab).max_predictions

    def per_step(name):
        return config.train.batch_size * objectives.training_flops(
            shape, config.data.max_seq_length, predictions, vocab.size, name)
    budget = config.train.steps * per_step(budget_objective)
    return {name: (int(budget // per_step(name)), per_step(name)) for name in names}


def evaluations(logdir: str) -> list[tuple[int, dict]]:
    """[(step, {metric: value})] of a run's held-out evaluations (TensorBoard's own
    reader; a resumed run's later value of a step wins)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
    events = event_accumulator.EventAccumulator(
        logdir, size_guidance={event_accumulator.TENSORS: 0})
    events.Reload()
    by_step: dict[int, dict] = {}
    for tag in events.Tags()["tensors"]:
        if events.SummaryMetadata(tag).plugin_data.plugin_name == "scalars":
            for event in events.Tensors(tag):
                by_step.setdefault(event.step, {})[tag] = float(
                    tf.make_ndarray(event.tensor_proto))
    return sorted(by_step.items())


def pretrain(config, name, steps, workdir):
    """Pre-trains `name` for `steps` steps (resuming `workdir`); the seconds it took."""
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    run = config.copy_and_resolve_references()
    run.model.objective = name
    run.train.warmup_steps = round(config.train.warmup_steps * steps / config.train.steps)
    run.train.steps = steps
    run.train.eval_every = max(1, steps // max(_EVALUATIONS.value, 1))
    run.train.checkpoint_every = steps
    run.train.log_every = min(run.train.log_every, run.train.eval_every)
    start = time.monotonic()
    loop.train_and_evaluate(run, workdir)
    return time.monotonic() - start


def finetune(config, workdir, task_dir, output):
    """Fine-tunes the run in `workdir` on the task; the dev metrics of its best step."""
    from electra_tf.finetuning import loop as finetune_loop  # pylint: disable=g-import-not-at-top
    # configs/finetune.py by its path, as --config=configs/finetune.py:TASK reads it.
    spec = importlib.util.spec_from_file_location("finetune_config", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
        "finetune.py"))
    finetune_configs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(finetune_configs)
    tuning = finetune_configs.get_config(_TASK.value)
    tuning.init_checkpoint = workdir
    tuning.data.dir = task_dir
    tuning.data.max_seq_length = config.data.max_seq_length
    tuning.train.epochs = _FT_EPOCHS.value
    tuning.train.batch_size = _FT_BATCH.value
    tuning.train.seed = config.train.seed
    tuning.runtime.strategy = config.runtime.strategy
    metrics = finetune_loop.finetune(tuning, output)
    return next(iter(metrics.values()))  # the first dev split's


def table(rows, metric, wall) -> str:
    """The Markdown table of `rows` (results.json's)."""
    def fmt(value, spec):
        return "–" if value is None else format(value, spec)
    lines = ["| objective | steps | training FLOPs | held-out loss (own) | held-out "
             "masked_lm_accuracy | held-out disc_auc | "
             f"fine-tuned {metric} | pre-training s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        last = r["eval"][-1][1] if r["eval"] else {}
        lines.append(
            f"| {r['objective']} | {r['steps']} | {r['flops']:.3g} | "
            f"{fmt(last.get('loss'), '.4f')} | {fmt(last.get('masked_lm_accuracy'), '.3f')} | "
            f"{fmt(last.get('disc_auc'), '.3f')} | {fmt(r['finetuned'].get(metric), '.3f')} | "
            f"{r['seconds']:.0f} |")
    lines.append(f"\nTotal wall time {wall / 60:.1f} min. Held-out loss is each objective's "
                 "own (not comparable across objectives); masked_lm_accuracy is the "
                 "generator's for ELECTRA-style objectives and the model's for mlm.")
    return "\n".join(lines) + "\n"


def plot(rows, metric, output):
    """Held-out loss against training FLOPs per objective; the fine-tuned score per
    objective."""
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    figure, (curves, bars) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for r in rows:
        points = [(step * r["flops_per_step"], m["loss"]) for step, m in r["eval"]]
        if points:
            curves.plot(*zip(*points), marker="o", label=r["objective"])
    curves.set(xlabel="training FLOPs", ylabel="held-out loss (its own objective)",
               title="held-out loss against compute")
    curves.legend()
    names = [r["objective"] for r in rows]
    scores = [r["finetuned"].get(metric, 0.0) for r in rows]
    bars.bar(names, scores)
    bars.set(ylabel=f"dev {metric}", title="fine-tuned, equal pre-training FLOPs")
    bars.tick_params(axis="x", rotation=20)
    for x, y in enumerate(scores):
        bars.annotate(f"{y:.3f}", (x, y), ha="center", va="bottom")
    figure.savefig(output, dpi=110)
    plt.close(figure)


def main(argv):
    del argv
    from electra_tf.model import objectives  # pylint: disable=g-import-not-at-top
    from electra_tf.text import tokenizer  # pylint: disable=g-import-not-at-top
    config, out = flags.FLAGS.config, _OUTPUT_DIR.value
    for name in [*_OBJECTIVES.value, _BUDGET.value]:
        objectives.get(name)
    if bool(_TASK_DIR.value) == bool(_TASK_TEXT.value):
        raise errors.UserError("give --task_dir=GLUE_TSV_DIR or --task_text=FILE")
    if not config.data.vocab_file:
        raise errors.UserError("config.data.vocab_file is empty")
    # Before hours of pre-training, not after them.
    if _TASK_TEXT.value and not os.path.isfile(_TASK_TEXT.value):
        raise errors.UserError(f"--task_text={_TASK_TEXT.value}: " + (
            "a directory, not a file" if os.path.isdir(_TASK_TEXT.value) else "no such file"))
    if _TASK_DIR.value and not os.path.isdir(_TASK_DIR.value):
        raise errors.UserError(f"--task_dir={_TASK_DIR.value}: no such directory")
    common_flags.check_output_path("output_dir", out, directory=True)
    vocab = tokenizer.Vocab.load(config.data.vocab_file)
    os.makedirs(out, exist_ok=True)
    task_dir = _TASK_DIR.value or swapped_words_task(
        _TASK_TEXT.value, os.path.join(out, "task"), _TASK_EXAMPLES.value,
        config.train.seed)
    # Fine-tuning runs are per task: another task re-uses the pre-training runs.
    task_name = _TASK.value if _TASK_DIR.value else "swapped_words"
    start = time.monotonic()
    plan = budgets(config, vocab, _OBJECTIVES.value, _BUDGET.value)
    rows = []
    for name, (steps, per_step) in plan.items():
        print(f"== {name}: {steps} steps x {per_step:.3g} FLOPs = {steps * per_step:.3g}",
              flush=True)
        workdir = os.path.join(out, "runs", name)
        seconds = pretrain(config, name, steps, workdir)
        curve = evaluations(os.path.join(workdir, "logs", "eval"))
        finetuned = finetune(config, workdir, task_dir,
                             os.path.join(out, "finetune", task_name, name))
        rows.append({"objective": name, "steps": steps, "flops_per_step": per_step,
                     "flops": steps * per_step, "seconds": seconds, "eval": curve,
                     "finetuned": finetuned})
    wall = time.monotonic() - start
    metric = next(iter(rows[0]["finetuned"]), "accuracy") if rows else "accuracy"
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"rows": rows, "wall_seconds": wall, "task": task_name,
                   "config": config.to_dict()}, f, indent=1)
    markdown = table(rows, metric, wall)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(markdown)
    plot(rows, metric, os.path.join(out, "comparison.png"))
    print(markdown + f"Wrote {out}/table.md, comparison.png, results.json")


if __name__ == "__main__":
    cli.app_run(main)
