"""Fine-tuning on any task of the family (GLUE, SQuAD): `finetune(config, workdir)`.

    init_checkpoint (a pre-training run) ─► discriminator encoder ─► the task's head
    the task's data ─► Rows (task.py) ─► tf.data: the task's `prepare` (GLUE: the serving
    tokenization; SQuAD: windows made on the host) ─► steps under the strategy: the
    task's loss / global batch ─► gradients all-reduced ─► LayerwiseAdamW (clip 1.0,
    warm-up, linear decay, layer-wise lr)
    every eval_every steps and at the end: the task's dev metrics ─► TensorBoard,
       results.json, the best checkpoint (by the task's primary metric) in DIR/best,
       the best step's prediction files (SQuAD's predictions.json) in DIR
    DIR/export/<step>: the best model as the task's SavedModel (task.export)

Re-running the same command resumes from DIR/checkpoints (another task, model, batch,
seed or schedule is refused: `_check_resume_config`). Any strategy pre-training runs
under: one device, mirrored, multi_worker and TPU see the same global batches (`_dataset`),
evaluate every dev row once on every replica's share, gathered so that every worker
computes the same metrics; the chief writes the run (the others write aside, then remove
it). The loop knows tasks only through `task.Task`: a new task is a new module.
"""

import contextlib
import math
import os

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

from electra_tf import config_check
from electra_tf import errors
from electra_tf import model_config
from electra_tf import progress
from electra_tf import workdir as workdir_lib
from electra_tf.finetuning import hparams
from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning import task as task_lib
from electra_tf.finetuning import tasks
from electra_tf.serving import export
from electra_tf.training import checkpointing
from electra_tf.training import distribute
from electra_tf.training import optimizer as optimizer_lib
from electra_tf.text import tokenizer
from electra_tf.training import summaries

SUM = tf.distribute.ReduceOp.SUM


def load_pretrained(init_checkpoint: str):
    """(vocab, restored ElectraPretrainer, lower_case, the pre-training run's config) from
    a pre-training workdir or one of its checkpoint prefixes (RUN/checkpoints/ckpt-N)."""
    if not init_checkpoint:
        raise errors.UserError("config.init_checkpoint is empty: give the pre-training "
                               "run's directory (or one of its checkpoints)")
    if tf.io.gfile.isdir(init_checkpoint):
        workdir, checkpoint = init_checkpoint, None
    elif not tf.io.gfile.exists(init_checkpoint + ".index"):
        raise errors.UserError(f"config.init_checkpoint={init_checkpoint!r}: neither a run "
                               "directory nor a checkpoint prefix (RUN/checkpoints/ckpt-N)")
    else:
        workdir, checkpoint = os.path.dirname(os.path.dirname(init_checkpoint)), init_checkpoint
    try:
        run_config, vocab, pretrained, _ = export.load_run(workdir, checkpoint)
    except errors.UserError as e:
        raise errors.UserError(f"config.init_checkpoint={init_checkpoint!r}: {e}") from None
    return vocab, pretrained, export.lower_case_of(run_config, workdir=workdir), run_config


# config.train's rates that a 0 leaves to the pre-trained model's shape (`_default_rates`).
FROM_MODEL = ("learning_rate", "layerwise_lr_decay")


def _default_rates(config, discriminator) -> list[str]:
    """Fills a 0 learning rate or layer-wise decay from the pre-trained model's shape;
    returns the keys it filled ("train.learning_rate", ...)."""
    defaults = hparams.for_shape(discriminator)
    filled = [name for name in FROM_MODEL if not config.train[name]]
    for name in filled:
        config.train[name] = getattr(defaults, name)
    if filled:
        logging.info("Fine-tuning with %s: the defaults of %s (configs/finetune.py:TASK,SIZE "
                     "or --config.train.* to choose)",
                     " and ".join(f"{name} {config.train[name]:g}" for name in filled),
                     defaults.source)
    return [f"train.{name}" for name in filled]


def _dataset(strategy, rows: task_lib.Rows, global_batch, training, seed, epoch=0,
             skip=0):
    """The rows as distributed batches of (inputs, labels, positions): the same global
    batches whatever the strategy (one device, replicas, workers, TPU cores), each input
    pipeline taking its share of every global batch's rows.

    Training: shuffled per epoch (seed + epoch), whole batches, `skip` of them consumed
    (resume). Evaluation: in order, the last batch padded with rows at position -1, so that
    every replica runs every step on static shapes; `FineTuner.evaluate` drops them and
    puts the rest back in the rows' order by their positions.
    """
    n = len(rows)
    columns = dict(rows.columns, position=np.arange(n, dtype=np.int32))
    pad = 0 if training else -n % global_batch
    if pad:  # copies of the first row, at position -1
        columns = {k: np.concatenate([v, np.repeat(v[:1], pad, axis=0)])
                   for k, v in columns.items()}
        columns["position"][n:] = -1

    @tf.autograph.experimental.do_not_convert
    def prepare(batch):
        inputs, labels = rows.prepare({k: v for k, v in batch.items() if k != "position"})
        return inputs, labels, batch["position"]

    def make(context: tf.distribute.InputContext):
        data = tf.data.Dataset.from_tensor_slices(columns)
        if training:
            data = data.shuffle(n, seed=seed + epoch)
        data = data.batch(global_batch, drop_remainder=True).skip(skip)
        share = global_batch // context.num_input_pipelines
        first = context.input_pipeline_id * share
        data = data.map(tf.autograph.experimental.do_not_convert(
            lambda c: {k: x[first:first + share] for k, x in c.items()}))
        data = data.unbatch().batch(context.get_per_replica_batch_size(global_batch),
                                    drop_remainder=True)
        return data.map(prepare, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
            tf.data.AUTOTUNE)
    return strategy.distribute_datasets_from_function(make)


def _build(model, max_seq_length: int) -> None:
    """Creates the model's variables: one call on a [1, max_seq_length] row of zeros."""
    model({"input_ids": tf.zeros([1, max_seq_length], tf.int32),
           "input_mask": tf.ones([1, max_seq_length], tf.int32),
           "segment_ids": tf.zeros([1, max_seq_length], tf.int32)})


class FineTuner:
    """Model, optimizer and compiled steps of one fine-tuning run."""

    def __init__(self, config, strategy, task: task_lib.Task, encoder, steps: int):
        self.config, self.strategy, self.task = config, strategy, task
        self.global_batch = config.train.batch_size
        distribute.local_batch_size(strategy, self.global_batch)  # or a clear error
        with strategy.scope():
            self.model = task.build_model(encoder)
            _build(self.model, config.data.max_seq_length)
            warmup = int(config.train.warmup_proportion * steps)
            self.optimizer = model_lib.LayerwiseAdamW(
                model_lib.learning_rate_multipliers(self.model, config.train.layerwise_lr_decay),
                learning_rate=optimizer_lib.WarmupLinearDecay(config.train.learning_rate,
                                                              warmup, steps),
                weight_decay=config.train.weight_decay, beta_1=0.9, beta_2=0.999,
                epsilon=1e-6, global_clipnorm=config.train.clip_norm or None,
                bias_correction=config.train.adam_bias_correction)
            self.optimizer.exclude_from_weight_decay(
                var_list=optimizer_lib.no_decay_variables(self.model))
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.train_steps = tf.function(self._train_steps, autograph=False)
        self._eval_step = tf.function(self._eval_step, autograph=False)

    def _replica_step(self, inputs, labels):
        with tf.GradientTape() as tape:
            # This replica's share of the global batch's mean loss.
            loss = tf.reduce_sum(self.task.loss(self.model, inputs, labels)) / self.global_batch
        grads = tape.gradient(loss, self.model.trainable_variables)
        grads = tf.distribute.get_replica_context().all_reduce(SUM, grads)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def _train_steps(self, iterator, num_steps):
        def step(done, total):
            inputs, labels, _ = next(iterator)
            loss = self.strategy.run(self._replica_step, args=(inputs, labels))
            self.step.assign_add(1)
            return done + 1, total + self.strategy.reduce(SUM, loss, axis=None)
        _, total = tf.while_loop(lambda done, _: done < num_steps, step,
                                 (tf.zeros_like(num_steps), tf.constant(0.0)))
        return total / tf.cast(num_steps, tf.float32)

    def _eval_step(self, inputs, positions):
        """Every replica's outputs and positions: gathered on every worker across workers
        (a collective), concatenated from the local replicas otherwise (NCCL's gather is
        known to hang on some multi-GPU machines)."""
        outputs = self.strategy.run(lambda x: self.model(x, training=False), args=(inputs,))
        values = (outputs, positions)
        if isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return tf.nest.map_structure(lambda t: self.strategy.gather(t, axis=0), values)
        return tf.nest.map_structure(
            lambda t: tf.concat(self.strategy.experimental_local_results(t), 0), values)

    def evaluate(self, dataset):
        """The model's outputs (a tensor or a dict of them, as numpy) for every row of a
        `_dataset(training=False)`, in the rows' order: the same arrays on every worker,
        so that every worker takes the same best step."""
        outputs, positions = [], []
        for inputs, _, batch_positions in dataset:
            batch_outputs, batch_positions = self._eval_step(inputs, batch_positions)
            outputs.append(tf.nest.map_structure(lambda t: t.numpy(), batch_outputs))
            positions.append(batch_positions.numpy())
        positions = np.concatenate(positions)
        order = np.argsort(positions, kind="stable")[np.sum(positions < 0):]  # padding first
        return tf.nest.map_structure(lambda *parts: np.concatenate(parts)[order], *outputs)


# Fields of configs/finetune.py that an earlier version's config.json lacks, at the value
# that version ran with (`complete`).
EARLIER_DEFAULTS = {"train.adam_bias_correction": True}


def complete(config) -> ml_collections.ConfigDict:
    """A copy of the fine-tuning `config` (a ConfigDict or a config.json's dict) with the
    task's own fields that it lacks (a config.json of an earlier version) from the
    task's defaults (`Task.configure`), and the fields an earlier version ran without at
    the value it ran with (`EARLIER_DEFAULTS`); an unknown task is a `UserError`."""
    completed = ml_collections.ConfigDict(
        config.to_dict() if hasattr(config, "to_dict") else config)
    defaults = ml_collections.ConfigDict({"data": {}, "model": {}, "train": {}})
    tasks.get(completed.task, defaults).configure(defaults)
    # Every section of the defaults, empty where neither the config nor the task fills it.
    return model_config.fill_absent(completed, {
        **{section: ml_collections.ConfigDict() for section in defaults},
        **{f"{section}.{name}": value
           for section, fields in defaults.items() for name, value in fields.items()},
        **EARLIER_DEFAULTS})


def validate(config) -> ml_collections.ConfigDict:
    """The config a fine-tuning run trains with (`complete`: a copy of `config`), or a
    one-line `UserError` naming the key: the task known, every value in its range and
    the strategy among its choices (`config_check`), and the task's own checks
    (`Task.check_config`). Each check is written once, where the value is used; this runs
    every one that needs no device, data, model or workdir. The loop and
    `experiments/compare.py` call it before anything is built or written. What the
    pre-trained model decides (a learning rate of 0: its shape's) the loop fills once it
    has read it."""
    resolved = complete(config)
    config_check.check(resolved)
    tasks.get(resolved.task, resolved).check_config()
    return resolved


# What the learning rate and the updates follow at each step: on resume, another value
# would rebuild the warm-up and decay around the restored step (the rate jumps) and
# config.json would report it for the whole run.
SCHEDULE_KEYS = ("train.epochs", "train.learning_rate", "train.layerwise_lr_decay",
                 "train.warmup_proportion", "train.weight_decay", "train.clip_norm")


def _check_resume_config(config, workdir, task: task_lib.Task):
    """A one-line error for a resume whose config disagrees with the run's (the data
    position, the schedule and the head depend on them; a run started from another
    pre-trained model would go on, or be reported, as if it were this one). A rate left
    to the pre-trained model is compared once filled (`_finetune`)."""
    schedule = tuple(key for key in SCHEDULE_KEYS
                     if key.partition(".")[2] not in FROM_MODEL
                     or config.train[key.partition(".")[2]])
    _check_resume(config, workdir, ("task", "init_checkpoint", "train.batch_size",
                                    "train.seed", "data.max_seq_length",
                                    "train.adam_bias_correction") + schedule
                  + task.resume_keys)


def _check_resume(config, workdir, keys, source: str = "") -> None:
    """A one-line error where the run in `workdir` ran with another value of one of
    `keys` ("section.name" or "name"): its config.json `complete`d (a field its version
    did not write: the task's default); `source` says where the new value came from."""
    saved = workdir_lib.read_json(workdir, workdir_lib.CONFIG)
    if saved is None:
        return
    if "task" not in saved:  # a pre-training run's (or another program's) config.json
        raise errors.UserError(f"{workdir} holds a run that is not a fine-tuning run (its "
                               "config.json names no task); use a new --workdir")
    saved = complete(saved)
    for key in keys:
        section, _, name = key.rpartition(".")
        old = saved[section].get(name) if section else saved.get(name)
        new = config[section][name] if section else config[name]
        if key == "init_checkpoint":  # one run however it is spelt: runs/a/, ./runs/a
            old, new = (workdir_lib.absolute(p).rstrip("/") if p else p for p in (old, new))
        if old != new:
            raise errors.UserError(f"config.{key}={new}{source} differs from the run in "
                                   f"{workdir} ({old}); resume with the same value or use a "
                                   "new --workdir")


def finetune(config, workdir: str, strategy=None) -> dict:
    """Fine-tunes on `config.task`; returns the best evaluation's metrics per dev split."""
    config = validate(config)  # before anything is written
    task = tasks.get(config.task, config)
    _check_resume_config(config, workdir, task)
    strategy = strategy or distribute.get_strategy(config.runtime)
    chief = distribute.is_chief(strategy)
    # One run writes a workdir: the chief holds it (the other workers write aside).
    with workdir_lib.Lock(workdir) if chief else contextlib.nullcontext():
        if chief:
            workdir_lib.remove_partial_files(workdir)
        return _finetune(config, workdir, strategy, task, chief)


def _finetune(config, workdir, strategy, task, chief) -> dict:
    with strategy.scope():  # the encoder's variables must belong to the strategy
        vocab, pretrained, lower_case, run_config = load_pretrained(config.init_checkpoint)
    filled = _default_rates(config, model_config.shape(run_config).discriminator)
    _check_resume(config, workdir, filled, " (the pre-trained model's default)")
    if config.data.max_seq_length > pretrained.max_sequence_length:
        raise errors.UserError(f"config.data.max_seq_length={config.data.max_seq_length} "
                               f"exceeds the model's {pretrained.max_sequence_length} positions")
    try:
        data = task.read(vocab, lower_case)
    except errors.UserError as e:
        where = (f"config.data.dir={config.data.dir!r}" if config.data.dir else
                 f"config.data.tfds_data_dir={config.data.tfds_data_dir!r}")
        raise type(e)(f"{where}: {e}") from None
    _check_resume(config, workdir, task.read_keys, " (from the data)")
    train, evals, tests = data.train, data.evals, data.tests
    for name, rows in [("train", train)] + list(evals.items()) + list(tests.items()):
        logging.info("%s %s: %s", task.name, name, rows.summary)

    batch = config.train.batch_size
    steps_per_epoch = len(train) // batch
    if steps_per_epoch < 1:
        raise errors.UserError(f"config.train.batch_size={batch}: the training set has only "
                               f"{len(train)} rows")
    steps = math.ceil(config.train.epochs * steps_per_epoch)
    tuner = FineTuner(config, strategy, task, pretrained.discriminator, steps)

    # The chief writes the run; the other workers (multi_worker) save alongside it, as
    # checkpoints and SavedModels under a strategy must be written by every worker, into
    # WORKDIR/tmp/worker_N, removed at the end. Every worker resumes from the chief's files.
    own = workdir if chief else workdir_lib.worker_dir(workdir, distribute.worker_id(strategy))
    checkpoint = tf.train.Checkpoint(step=tuner.step, model=tuner.model,
                                     optimizer=tuner.optimizer)
    manager = tf.train.CheckpointManager(checkpoint, workdir_lib.checkpoints(own),
                                         max_to_keep=2,  # a damaged newest: the one before
                                         step_counter=tuner.step)
    best_dir = workdir_lib.path(own, workdir_lib.BEST)
    state = {"task": task.name, "best": None, "evaluations": []}
    # The newest readable checkpoint (one that cannot be read is reported and skipped).
    latest, _ = checkpointing.restore_newest(
        workdir_lib.checkpoints(workdir),
        lambda path: checkpoint.restore(path).assert_existing_objects_matched())
    if latest:
        saved_state = workdir_lib.read_json(workdir, workdir_lib.RESULTS)
        if saved_state is not None:
            state = saved_state
            # Evaluations after the restored step are replayed: drop their records.
            restored = int(tuner.step.numpy())
            state["evaluations"] = [e for e in state["evaluations"] if e["step"] <= restored]
        logging.info("Resumed from %s at step %d", latest, int(tuner.step.numpy()))
    # What is exported already, read by every worker before anything of this run is
    # written there: every worker then exports, or none (saving may be collective).
    exported_steps = _exported_steps(workdir)
    tf.io.gfile.makedirs(own)
    if chief:
        workdir_lib.write_json(workdir, workdir_lib.CONFIG, config.to_dict())
        if not tf.io.gfile.exists(workdir_lib.path(workdir, workdir_lib.VOCAB)):
            workdir_lib.copy_vocab(workdir, vocab.path)
        # The encoder's shape and tokenization, so that the run exports on its own
        # (tools/export_savedmodel.py --workdir=THIS_RUN) wherever the pre-training run is.
        workdir_lib.write_json(workdir, workdir_lib.PRETRAINED, {
            "init_checkpoint": config.init_checkpoint, "lower_case": lower_case,
            "config": run_config.to_dict()})
        logs = workdir_lib.path(workdir, workdir_lib.LOGS)
        train_writer = tf.summary.create_file_writer(
            workdir_lib.logs(workdir, workdir_lib.TRAIN_LOGS))
        eval_writers = {s: tf.summary.create_file_writer(workdir_lib.logs(workdir, s))
                        for s in evals}  # one per dev split, named as the split
        summaries.write_config(train_writer, config)
        summaries.write_hparams(logs, config)  # dev metrics per run
    else:
        train_writer = tf.summary.create_noop_writer()
        eval_writers = {s: train_writer for s in evals}
    eval_data = {s: (rows, _dataset(strategy, rows, batch, False, config.train.seed))
                 for s, rows in evals.items()}

    step = start = int(tuner.step.numpy())
    bar = progress.Progress(steps - step, unit="steps")
    eval_every = config.train.eval_every or steps_per_epoch
    while step < steps:
        epoch, offset = divmod(step, steps_per_epoch)
        iterator = iter(_dataset(strategy, train, batch, True, config.train.seed, epoch,
                                 skip=offset))
        while offset < steps_per_epoch and step < steps:
            n = min(steps_per_epoch - offset, steps - step, eval_every - step % eval_every,
                    config.train.steps_per_loop)
            loss = float(tuner.train_steps(iterator, tf.constant(n)))
            if not math.isfinite(loss):
                raise errors.RunError(
                    f"loss is {loss} between steps {step} and {step + n}: stopped without "
                    "saving; the last good checkpoint is the latest in "
                    f"{workdir_lib.checkpoints(workdir)}. Lower "
                    "config.train.learning_rate")
            step, offset = step + n, offset + n
            summaries.write_scalars(train_writer, {
                "loss": loss, "learning_rate": float(tuner.optimizer.learning_rate)}, step)
            bar.update(step - start, force=step == steps, loss=loss)
            if step % eval_every == 0 or step == steps:
                _evaluate(tuner, eval_data, eval_writers, state, step, best_dir,
                          workdir if chief else None)
                workdir_lib.write_json(own, workdir_lib.RESULTS, state)
                _remove_other_best(best_dir, state["best"]["step"])
                manager.save(checkpoint_number=step)
    if state["best"] is None:  # e.g. a finished run whose results.json was removed
        _evaluate(tuner, eval_data, eval_writers, state, step, best_dir,
                  workdir if chief else None)
        workdir_lib.write_json(own, workdir_lib.RESULTS, state)

    # Export the best model: restore its weights, write the SavedModel, keep going.
    best = _best_prefix(best_dir, state["best"]["step"])
    if not chief and not tf.io.gfile.exists(best + ".index"):
        # A best of an earlier run (before this resume): the chief's, written back then.
        best = _best_prefix(workdir_lib.path(workdir, workdir_lib.BEST),
                            state["best"]["step"])
    if not tf.io.gfile.exists(best + ".index"):
        raise errors.UserError(f"{best}: the best checkpoint results.json names is missing")
    tf.train.Checkpoint(model=tuner.model).read(best).assert_existing_objects_matched()
    if state["best"]["step"] not in exported_steps:
        output = workdir_lib.path(own, workdir_lib.EXPORT, str(state["best"]["step"]))
        if tf.io.gfile.exists(output):  # a non-chief's leftover of a crashed run
            tf.io.gfile.rmtree(output)
        task.export(tuner.model, vocab, config.data.max_seq_length, output, lower_case)
    state["export"] = workdir_lib.path(workdir, workdir_lib.EXPORT, str(state["best"]["step"]))
    if tests:
        state["test_predictions"], scores = _predict_tests(tuner, tests, batch, workdir,
                                                           chief, config.train.seed)
        if scores:
            state["test_metrics"] = scores
    workdir_lib.write_json(own, workdir_lib.RESULTS, state)
    if not chief:
        tf.io.gfile.rmtree(own)
        try:  # WORKDIR/tmp, once the last of the other workers has removed its own
            if not tf.io.gfile.listdir(os.path.dirname(own)):
                tf.io.gfile.rmtree(os.path.dirname(own))
        except tf.errors.OpError:
            pass  # another worker removed it, or is still writing
    return state["best"]["metrics"]


def _predict_tests(tuner, tests, batch, workdir, chief, seed) -> tuple[dict, dict]:
    """The (restored best) model's predictions on each test split, in the task's
    submission format, and their metrics where the test file holds the answers:
    ({split: file}, {split: metrics}). Every worker predicts (collectives), the chief
    writes."""
    written, scores = {}, {}
    for split, rows in tests.items():
        outputs = tuner.evaluate(_dataset(tuner.strategy, rows, batch, False, seed))
        evaluation = tuner.task.predict_test(split, rows, outputs)
        (name, text), = evaluation.files.items()
        if chief:
            _write_files(workdir, {name: text})
        written[split] = os.path.join(workdir, name)
        logging.info("test %s: %d predictions in %s", split, len(rows), written[split])
        if evaluation.metrics:
            scores[split] = evaluation.metrics
            logging.info("test %s (the best step's model): %s", split, " ".join(
                f"{k} {v:.4f}" for k, v in evaluation.metrics.items()))
    return written, scores


def _write_files(directory, files: dict[str, str]) -> None:
    for name, text in files.items():
        workdir_lib.write_text(directory, name, text)


def _exported_steps(workdir) -> set[int]:
    """The steps whose SavedModel is complete in WORKDIR/export (written by rename)."""
    return {int(os.path.basename(path.rstrip("/")))
            for path in tf.io.gfile.glob(workdir_lib.path(workdir, workdir_lib.EXPORT, "*"))
            if os.path.basename(path.rstrip("/")).isdigit()
            and tf.io.gfile.exists(os.path.join(path, "saved_model.pb"))}


def _best_prefix(best_dir, step):
    return os.path.join(best_dir, f"ckpt-{step}")


def _remove_other_best(best_dir, keep_step):
    """Older best checkpoints go only once results.json names the new one."""
    keep = os.path.basename(_best_prefix(best_dir, keep_step))
    for path in tf.io.gfile.glob(os.path.join(best_dir, "ckpt-*")):
        if not os.path.basename(path).startswith(keep + "."):
            tf.io.gfile.remove(path)


def _evaluate(tuner, eval_data, eval_writers, state, step, best_dir, chief_workdir):
    """Scores every dev split; a new best is saved to `best_dir` and its prediction
    files (if the task makes any) written to `chief_workdir` (None on other workers)."""
    task = tuner.task
    metrics, files = {}, {}
    for split, (rows, data) in eval_data.items():
        evaluation = task.evaluate(split, rows, tuner.evaluate(data))
        metrics[split] = evaluation.metrics
        files.update(evaluation.files)
        summaries.write_scalars(eval_writers[split], metrics[split], step)
        logging.info("eval %s at step %d (%d rows): %s", split, step, len(rows),
                     " ".join(f"{k} {v:.4f}" for k, v in metrics[split].items()))
    first = list(eval_data)[0]
    score = metrics[first][task.primary_metric]
    state["evaluations"].append({"step": step, "metrics": metrics})
    if state["best"] is None or score > state["best"]["score"]:
        state["best"] = {"step": step, "score": score, "metric": f"{first}/{task.primary_metric}",
                         "metrics": metrics}
        tf.train.Checkpoint(model=tuner.model).write(_best_prefix(best_dir, step))
        if files:
            state["best"]["files"] = sorted(files)
        if chief_workdir:
            _write_files(chief_workdir, files)


def is_finetuning_run(workdir: str) -> bool:
    """Whether `workdir` holds a fine-tuning run (its config.json names a task)."""
    try:
        return "task" in (workdir_lib.read_json(workdir, workdir_lib.CONFIG) or {})
    except errors.UserError:  # not valid JSON: not a run of ours
        return False


def run_task(workdir: str) -> task_lib.Task:
    """The task of a fine-tuning run, bound to the run's config.json (`complete`)."""
    config = complete(workdir_lib.read_json(workdir, workdir_lib.CONFIG))
    return tasks.get(config.task, config)


def export_run(workdir: str, output: str, checkpoint: str | None = None,
               max_seq_length: int | None = None, lower_case: bool | None = None) -> str:
    """The task's export of a fine-tuning run: its best checkpoint (the one results.json
    names) or `checkpoint`, built from the run's own files (config.json, pretrained.json,
    vocab.txt), not from the pre-training run."""
    task = run_task(workdir)
    config = task.config
    pretrained = workdir_lib.read_json(workdir, workdir_lib.PRETRAINED)
    if pretrained is None:
        raise errors.UserError(f"{workdir_lib.path(workdir, workdir_lib.PRETRAINED)}: not "
                               "found (a fine-tuning run made before it was written: re-run "
                               "its fine-tuning command to add it)")
    if checkpoint is None:
        best = (workdir_lib.read_json(workdir, workdir_lib.RESULTS) or {}).get("best")
        if not best:
            raise errors.UserError(f"{workdir_lib.path(workdir, workdir_lib.RESULTS)}: no "
                                   "best evaluation yet; finish the run or give "
                                   "--checkpoint=RUN/checkpoints/ckpt-N")
        checkpoint = _best_prefix(workdir_lib.path(workdir, workdir_lib.BEST), best["step"])
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise errors.UserError(f"--checkpoint={checkpoint}: no such checkpoint")
    vocab = tokenizer.Vocab.load(workdir_lib.path(workdir, workdir_lib.VOCAB))
    model = model_config.pretrainer(ml_collections.ConfigDict(pretrained["config"]),
                                    vocab.size, dtype="float32")
    finetuned = task.build_model(model.discriminator)
    seq = max_seq_length or config.data.max_seq_length
    if not 3 <= seq <= model.max_sequence_length:
        raise errors.UserError(f"--max_seq_length={seq}: must be in 3.."
                               f"{model.max_sequence_length} (the position table)")
    _build(finetuned, seq)
    model_config.read_model(finetuned, checkpoint, f"the {task.name} model")
    logging.info("export: %s's model from %s", task.name, checkpoint)
    return task.export(finetuned, vocab, seq, output,
                       pretrained["lower_case"] if lower_case is None else lower_case)
