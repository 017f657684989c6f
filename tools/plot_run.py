r"""Plots pre-training runs' learning curves from their TensorBoard logs, as a PNG.

  python tools/plot_run.py --workdir=RUN [--workdir=RUN2 ...] --output=curves.png

Four panels against the step: the objective's loss (MLM + disc_weight · RTD, logged as
`objective_loss`; under two_stage and adversarial `loss` is what a step differentiated,
another quantity), the generator's MLM loss, the discriminator's RTD loss and its AUC;
training (lines, from `logs/train`) and evaluation on held-out data (markers, from
`logs/eval`). Several workdirs share the axes, each labelled by the shortest end of its
path that tells it from the others (/tmp/a/run and /tmp/b/run: a/run, b/run). A
fine-tuning run is refused: these panels are pre-training's (TensorBoard shows its logs).
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import os

from absl import flags

from electra_tf import errors
from electra_tf import flags as common_flags

_WORKDIR = flags.DEFINE_multi_string("workdir", None, "A pre-training run's --workdir "
                                     "(repeat to compare runs).", required=True)
_OUTPUT = flags.DEFINE_string("output", None, "The PNG to write.", required=True)
_TITLE = flags.DEFINE_string("title", None, "Figure title (default: the workdirs).")

# The first panel is the objective's total, which training and evaluation both log
# (`loss` is what a training step differentiated: one stage's loss under two_stage, the
# policy's under adversarial); runs logged before `objective_loss` existed give `loss`.
PANELS = (("objective_loss", "loss: MLM + disc_weight · RTD"),
          ("mlm_loss", "generator: MLM loss"),
          ("rtd_loss", "discriminator: RTD loss"), ("disc_auc", "discriminator: AUC"))
FALLBACK = {"objective_loss": "loss"}


def read_scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of every scalar summary in `logdir`'s event files (a
    resumed run's later value of a step wins)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    values: dict[str, dict[int, float]] = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            event = tf.compat.v1.Event.FromString(record)
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    values.setdefault(value.tag, {})[event.step] = float(
                        tf.make_ndarray(value.tensor))
    return {tag: sorted(points.items()) for tag, points in values.items()}


def panel_points(scalars: dict, tag: str) -> list[tuple[int, float]] | None:
    """The points of panel `tag` in one log's `scalars` (`read_scalars`): the tag's,
    else its older name's (`FALLBACK`).

    >>> panel_points({"loss": [(1, 9.0)], "objective_loss": [(1, 2.0)]}, "objective_loss")
    [(1, 2.0)]
    >>> panel_points({"loss": [(1, 9.0)]}, "objective_loss")
    [(1, 9.0)]
    """
    return scalars.get(tag) or scalars.get(FALLBACK.get(tag))


def labels(workdirs: list[str]) -> list[str]:
    """Each workdir's shortest trailing run of path components that no other workdir ends
    with (its whole path where it is the end of another's); a `UserError` for a workdir
    given twice.

    >>> labels(["/tmp/a/run", "/tmp/b/run", "/tmp/c/other"])
    ['a/run', 'b/run', 'other']
    >>> labels(["/run", "/tmp/a/run"])
    ['/run', 'a/run']
    """
    # Local ones absolute (`.` and its full path are one run); a URL as given.
    paths = [(w.rstrip("/") or w) if "://" in w else os.path.abspath(w) for w in workdirs]
    for i, path in enumerate(paths):
        if path in paths[:i]:
            raise errors.UserError(f"--workdir={workdirs[i]}: given twice")
    parts = [path.split("/") for path in paths]
    out = []
    for i, mine in enumerate(parts):
        others = [theirs for j, theirs in enumerate(parts) if j != i]
        ends = (mine[-k:] for k in range(1, len(mine) + 1))
        out.append(next(("/".join(end) for end in ends
                         if all(theirs[-len(end):] != end for theirs in others)), paths[i]))
    return out


def plot(runs: dict[str, dict[str, dict]], output: str, title: str) -> None:
    """`runs`: {label: {"train": scalars, "eval": scalars}} → a 2×2 PNG at `output`."""
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    figure, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (tag, name), axis in zip(PANELS, axes.flat):
        for i, (label, split) in enumerate(runs.items()):
            colour = colours[i % len(colours)]
            for which, style in (("train", {"linestyle": "-"}),
                                 ("eval", {"linestyle": "--", "marker": "o"})):
                points = panel_points(split[which], tag)
                if points:
                    steps, values = zip(*points)
                    axis.plot(steps, values, color=colour, label=f"{label} ({which})",
                              **style)
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    axes.flat[-1].axhline(0.5, color="grey", linewidth=0.8)  # chance
    axes.flat[0].legend(fontsize="small")
    figure.suptitle(title)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    tmp = workdir_lib.aside(output)  # whole or not at all, gs:// too
    tf.io.gfile.makedirs(os.path.dirname(output) or ".")
    with tf.io.gfile.GFile(tmp, "wb") as f:
        figure.savefig(f, dpi=100, format="png")
    plt.close(figure)
    tf.io.gfile.rename(tmp, output, overwrite=True)


def main(argv):
    del argv
    common_flags.check_output_path("output", _OUTPUT.value)
    # Imports TensorFlow, as reading the logs does: only once the flags are checked.
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    runs = {}
    for workdir, label in zip(_WORKDIR.value, labels(_WORKDIR.value)):
        task = (workdir_lib.read_json(workdir, workdir_lib.CONFIG) or {}).get("task")
        if task:  # its `loss` is the task's, its metrics under logs/<dev split>
            logdir = workdir_lib.path(workdir, workdir_lib.LOGS)
            raise errors.UserError(f"--workdir={workdir}: a fine-tuning run ({task}); "
                                   "plot_run plots pre-training runs (tensorboard "
                                   f"--logdir={logdir} shows this one)")
        train_logs = workdir_lib.logs(workdir, workdir_lib.TRAIN_LOGS)
        scalars = {"train": read_scalars(train_logs),
                   "eval": read_scalars(workdir_lib.logs(workdir, workdir_lib.EVAL_LOGS))}
        if not scalars["train"]:
            raise errors.UserError(f"--workdir={workdir}: no training summaries in "
                                   f"{train_logs}")
        runs[label] = scalars
    plot(runs, _OUTPUT.value, _TITLE.value or ", ".join(runs))
    steps = max(points[-1][0] for split in runs.values() for points in split["train"].values())
    print(f"wrote {_OUTPUT.value} ({len(runs)} run(s): {', '.join(runs)}; up to step "
          f"{steps:,})")


if __name__ == "__main__":
    cli.app_run(main)
