"""Checkpoints of a run: what they hold, restoring the newest readable one, and the checks
that a workdir is resumed by the same run.

A pre-training checkpoint is `tf.train.Checkpoint(step, model, optimizer, **the
algorithm's items)` (`checkpoint_of`): those names are the format, and every older
checkpoint restores by them. TF writes a checkpoint's files first and then, atomically,
the `checkpoint` state file that names it, so a crash while saving leaves the previous one
the latest; `restore_newest` also falls back past one that cannot be read (a damaged
disk), for pre-training and fine-tuning alike.
"""

import os
from typing import Any, Callable

import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf import model_config
from electra_tf import workdir as workdir_lib
from electra_tf.data import order
from electra_tf.data import pipeline
from electra_tf.text import tokenizer


def checkpoint_of(trainer) -> tf.train.Checkpoint:
    """What a pre-training checkpoint holds: the step, the model, the optimizer (its
    iteration count, slots and loss scale) and the algorithm's items (two_stage: its
    switch step and discriminator optimizer)."""
    return tf.train.Checkpoint(step=trainer.step, model=trainer.model,
                               optimizer=trainer.optimizer,
                               **trainer.algorithm.checkpoint_items())


def restore_newest(directory: str, restore: Callable[[str], Any]) -> tuple[str | None, Any]:
    """Calls `restore(path)` on the newest checkpoint of `directory`, and on the one
    before it while a checkpoint cannot be read (each reported); returns (its path, what
    `restore` returned), or (None, None) where `directory` holds no checkpoint.

    Raises RunError when none of the checkpoints can be read."""
    paths = listed_checkpoints(directory)
    for path in reversed(paths):
        try:
            return path, restore(path)
        except (tf.errors.OpError, IndexError) as e:  # IndexError: a truncated data file
            logging.error("Cannot read checkpoint %s (%s): trying the one before it", path,
                          (str(e).strip().splitlines() or [type(e).__name__])[0])
    if paths:
        raise errors.RunError(f"none of the checkpoints in {directory} can be read "
                              f"({', '.join(os.path.basename(p) for p in paths)})")
    return None, None


def listed_checkpoints(directory: str) -> list[str]:
    """The checkpoints the state file of `directory` lists, oldest first, as paths (what
    `restore_newest` tries, newest first; `tf.train.latest_checkpoint` gives None where
    the newest one's files are gone, though an older one restores)."""
    state = tf.train.get_checkpoint_state(workdir_lib.absolute(directory))
    paths = list(state.all_model_checkpoint_paths) if state else []
    if state and state.model_checkpoint_path and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    # TF joins the relative ones to the directory it was given (made absolute: else the
    # paths would be relative to the directory and to the working directory at once).
    return paths


def restore(trainer, checkpoint, directory) -> str | None:
    """Restores the newest readable checkpoint of `directory` into `checkpoint`
    (`checkpoint_of(trainer)`); returns its path, None where there is none.

    A converted checkpoint (tools/convert_checkpoint.py) holds the step and the model
    only: it starts a fresh optimizer (and warm-up) on the converted weights. One written
    before some of the algorithm's items existed starts those afresh.
    """
    def restore_one(path):
        # The reader of the prefix itself: tf.train.list_variables first asks isdir(path),
        # which `ram://` answers yes for a prefix of ckpt-N.index, and then looks for a
        # state file inside it.
        saved = {name.split("/")[0] for name in
                 tf.compat.v1.train.NewCheckpointReader(path).get_variable_to_shape_map()}
        items = trainer.algorithm.checkpoint_items()
        missing = sorted(set(items) - saved)
        restoring = checkpoint if "optimizer" in saved and not missing else (
            tf.train.Checkpoint(step=trainer.step, model=trainer.model)
            if "optimizer" not in saved else tf.train.Checkpoint(
                step=trainer.step, model=trainer.model, optimizer=trainer.optimizer,
                **{k: v for k, v in items.items() if k in saved}))
        restoring.restore(path).assert_existing_objects_matched()
        if missing and "optimizer" in saved:  # written before these items existed
            logging.warning("Checkpoint %s has no %s: starting it afresh", path,
                            ", ".join(missing))
        return saved

    path, saved = restore_newest(directory, restore_one)
    if path is None:
        logging.info("No checkpoint in %s: starting from step 0", directory)
        return None
    logging.info("Resumed from %s at step %d%s", path, int(trainer.step.numpy()),
                 "" if "optimizer" in saved else " (no optimizer state: a new one)")
    if "optimizer" not in saved:
        _warn_if_fresh_generator(os.path.dirname(directory), trainer.model)
    return path


def forget_newer(directory: str, restored: str) -> None:
    """Lists no checkpoint newer than `restored` (the one `restore` fell back to) in the
    state file of `directory`; their files stay until a save of the same step replaces
    them. A `tf.train.CheckpointManager` made afterwards starts from `restored`, as TF's
    multi-worker preemption handler does: it restores its manager's newest checkpoint
    when it is made, which would be the damaged one again."""
    directory = workdir_lib.absolute(directory)
    state = tf.train.get_checkpoint_state(directory)  # its paths joined to `directory`
    full = list(state.all_model_checkpoint_paths)
    times = list(state.all_model_checkpoint_timestamps)
    kept = full.index(restored) + 1 if restored in full else len(full)
    logging.warning("The state file of %s lists %s as the newest checkpoint from now on (%s "
                    "cannot be read)", directory, os.path.basename(restored),
                    ", ".join(os.path.basename(p) for p in full[kept:]) or "the newest")
    # Written relative to the directory, as CheckpointManager writes them (the run can
    # move): TF makes a path relative to a URL directory itself (os.path.isabs calls the
    # URL relative) and keeps one given relative to a local one.
    names = [os.path.basename(p) if os.path.isabs(directory) else p
             for p in full[:kept] or [restored]]
    tf.compat.v1.train.update_checkpoint_state(
        directory, names[-1], all_model_checkpoint_paths=names,
        all_model_checkpoint_timestamps=times[:kept] if len(times) == len(full) else None,
        last_preserved_timestamp=state.last_preserved_timestamp)


def _warn_if_fresh_generator(workdir, model):
    """A workdir converted from a discriminator alone (its converted.json, written by
    tools/convert_checkpoint.py) has a generator of fresh weights: say so."""
    converted = workdir_lib.read_json(workdir, workdir_lib.CONVERTED)
    if converted and converted.get("generator") == "fresh":
        logging.warning(
            "%s was converted from a discriminator alone (%s): the generator starts from "
            "fresh weights (hidden %d, %d layers) and trains from here with the converted "
            "discriminator", workdir, converted.get("source"),
            model.generator_size.hidden_size, model.generator_size.num_layers)


# (section, key) of what a run trains: another value would not continue it.
_RUN_IDENTITY = (("model", "objective"), ("train", "algorithm"),
                 ("train", "two_stage_generator_steps"), ("train", "generator"),
                 ("model", "generator_init"))


# What the masks of the data stream are drawn by (data/masking.py).
_MASKS = (("data", "mask_prob"), ("data", "mask_token_rate"), ("data", "random_token_rate"),
          ("data", "whole_word_masking"))


def check_pretraining_workdir(workdir, saved: dict | None = None) -> None:
    """A one-line error where `workdir`'s config.json (`saved`, else read) is not a
    pre-training run's: a fine-tuning run's (it names a task) or another program's."""
    if saved is None:
        saved = workdir_lib.read_json(workdir, workdir_lib.CONFIG)
    if saved is not None and "size" not in saved.get("model", {}):
        what = "a fine-tuning run" if "task" in saved else "no pre-training run"
        raise errors.UserError(f"{workdir} holds {what} ("
                               f"{workdir_lib.path(workdir, workdir_lib.CONFIG)} has no "
                               "model.size); use another --workdir")


def check_same_run(config, workdir, vocab) -> dict:
    """A workdir holds one run: resuming it with another model, objective, sequence
    length, batch size, seed or vocab would not continue it (or fail deep in restore).
    Returns the run's config.json as it was ({} where there is none), which the loop
    reads again (`warn_if_other_layout`, `layouts`) before it writes the new one."""
    path = workdir_lib.path(workdir, workdir_lib.CONFIG)
    saved = workdir_lib.read_json(workdir, workdir_lib.CONFIG)
    if saved is None:
        return {}
    check_pretraining_workdir(workdir, saved)
    # Every comparison is with the completed config: a key the run's version did not
    # write has the value that version ran with.
    completed = model_config.complete(saved)
    before = model_config.shape(completed)
    now = model_config.shape(config)
    if before != now:
        old, new = _flat(before.to_dict()), _flat(now.to_dict())
        changed = [key for key in new if new[key] != old[key]]
        raise errors.UserError(
            ", ".join(f"{model_config.config_key(k)}={new[k]!r}" for k in changed)
            + f", but the run in {workdir} was started with "
            + ", ".join(repr(old[k]) for k in changed)
            + f" ({path}): use another --workdir, or the same model shape to resume")
    # What is trained: another objective has other variables and other losses.
    for section, key in _RUN_IDENTITY:
        before, now = completed[section][key], config[section][key]
        if before != now:
            raise errors.UserError(
                f"config.{section}.{key}={now!r}, but the run in {workdir} was started with "
                f"{before!r} ({path}): use another --workdir, or the same value to resume")
    # Once it has trained (a converted workdir is at step 0), also what the position in
    # the data stream and its masks depend on, and AdamW's update rule (a run of an
    # earlier version, bias-corrected, or a Large one masking 15%, does not take a new
    # default silently; LAMB has no such option; AdamW's and LAMB's slots have the same
    # names, so a switch would restore without a word).
    listed = listed_checkpoints(workdir_lib.checkpoints(workdir))
    latest = listed[-1] if listed else None
    trained = any(not path.endswith("-0") for path in listed)
    adamw = (("train", "adam_bias_correction"),) if config.train.optimizer == "adamw" else ()
    for section, key in ((("data", "max_seq_length"), ("data", "shuffle_buffer"),
                          *_MASKS, ("train", "batch_size"), ("train", "seed"),
                          ("train", "optimizer"), *adamw)
                         if trained else ()):
        before, now = completed[section][key], config[section][key]
        if before != now:
            raise errors.UserError(
                f"config.{section}.{key}={now!r}, but the run in {workdir} was started with "
                f"{before!r} ({path}): use another --workdir, or the same value to resume")
    if trained and saved.get("data_order") != order.VERSION:
        logging.warning(
            "The run in %s was started with an older data order (%s); it continues with "
            "this version's (%s): from %s on it reads other examples than the older version "
            "would have", workdir, saved.get("data_order", "a shuffle buffer"), order.VERSION,
            os.path.basename(latest))
    vocab_copy = workdir_lib.path(workdir, workdir_lib.VOCAB)
    if tf.io.gfile.exists(vocab_copy):
        if tokenizer.Vocab.load(vocab_copy).sha256 != vocab.sha256:
            raise errors.UserError(
                f"config.data.vocab_file={config.data.vocab_file!r} differs from the vocab "
                f"the run in {workdir} was started with ({vocab_copy})")
    return saved


def layout_of(saved: dict, step: int) -> dict | None:
    """The layout ({"input_pipelines": H, "replicas": N}) that trained the checkpoint of
    `step`, from config.json's `layouts`, [[s, layout], ...]: each start of the run at
    step s on another layout than the last; None where a run of an earlier version
    recorded none. The checkpoint of step t was saved by the start of the greatest s < t
    (a start saves no checkpoint at its own step)."""
    before = [layout for start, layout in saved.get("layouts", ()) if start < step]
    return before[-1] if before else None


def layouts(saved: dict, step: int, layout: dict) -> list:
    """config.json's `layouts` for a start at `step` (the restored checkpoint's) on
    `layout`, from the run's config.json as it was (`saved`): the starts at or after
    `step` saved nothing that survives, and are dropped."""
    kept = [[start, old] for start, old in saved.get("layouts", ()) if start < step]
    if not kept or kept[-1][1] != layout:
        kept.append([step, layout])
    return kept


def warn_if_other_layout(workdir, saved: dict, layout: dict, step: int,
                         restored: str) -> None:
    """Resuming on other hosts ({"input_pipelines": H, "replicas": N}) than the ones
    that trained the checkpoint restored (`restored`, at `step`; `layout_of` the run's
    config.json as it was, `saved`) is allowed, and said: each host reads its own chunks
    of the data (data/order.py), so on other hosts the examples a host reads from here
    differ (until the epoch ends, some come again and others wait). Other replicas on as
    many hosts continue exactly (a host masks its rows of a step together), unsaid."""
    before = layout_of(saved, step)
    if before is None or before["input_pipelines"] == layout["input_pipelines"]:
        return
    was = (f"{before['input_pipelines']} input pipeline(s) (hosts) and "
           f"{before['replicas']} replica(s)")
    now = f"{layout['input_pipelines']} and {layout['replicas']}"
    logging.warning("The run in %s trained %s with %s and goes on with %s: from there each "
                    "host reads another share of the data, so until this epoch ends some "
                    "examples are read again and others later than in an uninterrupted run "
                    "(resume with %s input pipeline(s) to continue it exactly)", workdir,
                    os.path.basename(restored), was, now, before["input_pipelines"])


def warn_if_older_masks(workdir, saved: dict, layout: dict, step: int,
                        restored: str) -> None:
    """A run begun before the masks were drawn per host step (config.json without
    `data_masks`) drew them per replica's batch: where it had more than one replica per
    host (or, where it recorded no layout, this start has), the masks differ from an
    uninterrupted run of that version from the checkpoint `restored` (of `step`) on:
    said."""
    if saved.get("data_masks") == pipeline.MASKS or step == 0:
        return
    before = layout_of(saved, step) or layout
    if before["replicas"] <= before["input_pipelines"]:
        return
    logging.warning("The run in %s was started by a version that masked each replica's "
                    "batch on its own; this one masks each host's rows of a step together: "
                    "from %s on, the masks differ from those that version would have drawn",
                    workdir, os.path.basename(restored))


def _flat(d: dict, prefix: str = "") -> dict:
    """{"a.b": value} of a nested dict."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
