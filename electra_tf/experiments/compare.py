"""Runs planned variants (`variants.plan`) and reports them: each is pre-trained (resuming
OUTPUT_DIR/runs/NAME), its held-out evaluations read back from TensorBoard, its encoder
fine-tuned with the same settings (OUTPUT_DIR/finetune/TASK/NAME), and the whole written
as results.json, table.md and comparison.png.

Per variant, results.json's row holds `masked_lm_accuracy` (the generator's under
ELECTRA-style objectives, the model's under `mlm`) and `disc_auc` (the discriminator's,
over every token) of the last held-out evaluation, `null` where the objective has none;
`eval` holds every evaluation's metrics by step; `generator` (config.train.generator),
`generator_init` and `note` (what a frozen generator is and that its own training is not
charged; `null` for a trained one). Every file is written whole or not at all
(`workdir.py`).
"""

import csv
import io
import random
import time

import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf import model_config
from electra_tf import workdir as workdir_lib
from electra_tf.training import generator_init

# OUTPUT_DIR's folders and files.
RUNS, FINETUNE, TASK = "runs", "finetune", "task"
TABLE, PLOT = "table.md", "comparison.png"


def swapped_words_task(text_file: str, directory: str, num_train: int, seed: int) -> str:
    """train.tsv/dev.tsv in SST-2's layout from `text_file`'s lines of 4+ words, each
    line used once (dev's never in train): as it is (1) or with two different words
    swapped (0), in equal numbers."""
    with tf.io.gfile.GFile(text_file) as f:
        lines = [" ".join(l.split()) for l in f if len(l.split()) >= 4]
    rng = random.Random(seed)
    rng.shuffle(lines)
    num_dev = max(num_train // 4, 1)
    if len(lines) < num_train + num_dev:  # dev sentences never seen in training
        raise errors.UserError(
            f"--task_text={text_file}: {len(lines)} lines of 4+ words, fewer than the "
            f"{num_train + num_dev} --task_examples={num_train} needs (train + dev)")
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
        text = io.StringIO()
        out = csv.writer(text, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\",
                         lineterminator="\n")
        out.writerow(["sentence", "label"])
        out.writerows(rows)
        workdir_lib.write_text(directory, f"{split}.tsv", text.getvalue())
    return directory


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


def finetune(pretrained: str, tuning, output: str) -> dict:
    """Fine-tunes the run in `pretrained` with `tuning` (a fine-tuning config, the same
    for every variant); the dev metrics of its best step."""
    from electra_tf.finetuning import loop as finetune_loop  # pylint: disable=g-import-not-at-top
    run = tuning.copy_and_resolve_references()
    run.init_checkpoint = pretrained
    saved = workdir_lib.read_json(output, workdir_lib.CONFIG)
    if saved is not None:  # a run of an earlier version goes on with the Adam it began with
        run.train.adam_bias_correction = finetune_loop.complete(
            saved).train.adam_bias_correction
    metrics = finetune_loop.finetune(run, output)
    return next(iter(metrics.values()))  # the first dev split's


def run(planned, tuning, out: str, task_name: str, config, budget: str) -> str:
    """Pre-trains and fine-tunes each `variants.Planned` (`budget`: the variant whose
    FLOPs are the budget); writes results.json, table.md and comparison.png under
    `out`; returns the table (Markdown), for the tool to show."""
    from electra_tf.finetuning import loop as finetune_loop  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    # The fine-tuning config is every variant's: checked before hours of pre-training.
    tuning = finetune_loop.validate(tuning)
    start = time.monotonic()
    rows = []
    for p in planned:
        name = p.variant.name
        logging.info("== %s (%s): %d steps x %.3g FLOPs = %.3g", name, p.variant.spec,
                     p.steps, p.flops_per_step, p.flops)
        workdir = workdir_lib.path(out, RUNS, name)
        began = time.monotonic()
        loop.train_and_evaluate(p.config, workdir)
        seconds = time.monotonic() - began
        curve = evaluations(workdir_lib.logs(workdir, workdir_lib.EVAL_LOGS))
        last = curve[-1][1] if curve else {}
        rows.append({
            "variant": name, "overrides": dict(p.variant.overrides),
            "objective": p.config.model.objective, "algorithm": p.config.train.algorithm,
            "generator": model_config.generator_mode(p.config),
            "generator_init": p.config.model.generator_init or None,
            "note": generator_note(p.config),
            "steps": p.steps, "flops_per_step": p.flops_per_step, "flops": p.flops,
            "seconds": seconds, "eval": curve,
            "masked_lm_accuracy": last.get("masked_lm_accuracy"),
            "disc_auc": last.get("disc_auc"),
            "finetuned": finetune(workdir, tuning,
                                  workdir_lib.path(out, FINETUNE, task_name, name))})
    wall = time.monotonic() - start
    metric = next(iter(rows[0]["finetuned"]), "accuracy") if rows else "accuracy"
    workdir_lib.write_json(out, workdir_lib.RESULTS, {
        "rows": rows, "wall_seconds": wall, "task": task_name, "budget_variant": budget,
        "budget_flops": next(p.flops for p in planned if p.variant.name == budget),
        "config": config.to_dict()})
    markdown = table(rows, metric, wall)
    workdir_lib.write_text(out, TABLE, markdown)
    plot(rows, metric, out)
    logging.info("Wrote %s, %s and %s in %s", workdir_lib.RESULTS, TABLE, PLOT, out)
    return markdown


def generator_note(config) -> str | None:
    """What a frozen generator is (`None` for a trained one): the comparison charges its
    forward pass only, not the training that made it."""
    if model_config.generator_mode(config) != "frozen":
        return None
    what = (generator_init.FROZEN_AT_RANDOM if generator_init.frozen_at_random(config)
            else f"the generator is {config.model.generator_init}'s, frozen")
    return (f"{what}; its own training is not charged (training FLOPs count its "
            "forward pass only)")


def table(rows, metric: str, wall: float) -> str:
    """The Markdown table of `rows` (results.json's), the variants' overrides below it."""
    def fmt(value, spec):
        return "–" if value is None else format(value, spec)
    lines = ["| variant | steps | training FLOPs | held-out loss (own) | held-out "
             "masked_lm_accuracy | held-out disc_auc | "
             f"fine-tuned {metric} | pre-training s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        last = r["eval"][-1][1] if r["eval"] else {}
        lines.append(
            f"| {r['variant']} | {r['steps']} | {r['flops']:.3g} | "
            f"{fmt(last.get('objective_loss'), '.4f')} | {fmt(r['masked_lm_accuracy'], '.3f')} | "
            f"{fmt(r['disc_auc'], '.3f')} | {fmt(r['finetuned'].get(metric), '.3f')} | "
            f"{r['seconds']:.0f} |")
    overrides = "; ".join(
        f"{r['variant']}: " + (", ".join(f"{k}={v}" for k, v in r["overrides"].items())
                               or "the config as given") for r in rows)
    lines.append(f"\nVariants ({overrides}). Total wall time {wall / 60:.1f} min. "
                 "Held-out loss is each objective's own (comparable only between variants "
                 "of one objective); masked_lm_accuracy is the generator's for "
                 "ELECTRA-style objectives and the model's for mlm.")
    lines += [f"\n{r['variant']}: {r['note']}." for r in rows if r.get("note")]
    return "\n".join(lines) + "\n"


def plot(rows, metric: str, out: str) -> None:
    """OUT/comparison.png: held-out loss and masked_lm_accuracy against training FLOPs
    per variant; the fine-tuned score per variant."""
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    figure, (losses, accuracies, bars) = plt.subplots(1, 3, figsize=(15, 4.2),
                                                      constrained_layout=True)
    for axes, key in ((losses, "objective_loss"), (accuracies, "masked_lm_accuracy")):
        for r in rows:
            points = [(step * r["flops_per_step"], m[key]) for step, m in r["eval"]
                      if key in m]
            if points:
                axes.plot(*zip(*points), marker="o", label=r["variant"])
        axes.legend()
    losses.set(xlabel="training FLOPs", ylabel="held-out loss (its own objective)",
               title="held-out loss against compute")
    accuracies.set(xlabel="training FLOPs", ylabel="held-out masked_lm_accuracy",
                   title="(generator's) MLM accuracy against compute")
    names = [r["variant"] for r in rows]
    scores = [r["finetuned"].get(metric, 0.0) for r in rows]
    bars.bar(names, scores)
    bars.set(ylabel=f"dev {metric}", title="fine-tuned, equal pre-training FLOPs")
    bars.tick_params(axis="x", rotation=20)
    for x, y in enumerate(scores):
        bars.annotate(f"{y:.3f}", (x, y), ha="center", va="bottom")
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=110)
    plt.close(figure)
    workdir_lib.write_text(out, PLOT, png.getvalue())
