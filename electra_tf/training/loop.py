"""The pre-training loop: `train_and_evaluate(config, workdir)`, read top to bottom.

    config checked ─► workdir locked ─► data (vocab, checked shards, masking) ─► Trainer
    (model, optimizer, metrics, compiled steps: trainer.py) ─► restore (checkpointing.py)
    ─► the data stream from the restored step ─► loops of steps to the next log /
    checkpoint / eval boundary ─► TensorBoard, log line, CheckpointManager, evaluation

What a step computes is `trainer.Trainer.train_step`; how a fault ends the run (a
non-finite step, a lost worker, out of memory, a damaged shard) is `faults.py`;
preemption (SIGTERM) is `preemption.py`.
"""

import contextlib
import time

import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf import model_config
from electra_tf import profiling
from electra_tf import progress
from electra_tf import workdir as workdir_lib
from electra_tf.data import order
from electra_tf.data import pipeline
from electra_tf.model import objectives
from electra_tf.text import tokenizer
from electra_tf.training import algorithms
from electra_tf.training import checkpointing
from electra_tf.training import distribute
from electra_tf.training import faults
from electra_tf.training import generator_init
from electra_tf.training import memory
from electra_tf.training import predictions
from electra_tf.training import preemption
from electra_tf.training import summaries
from electra_tf.training import trainer as trainer_lib


def validate(config):
    """The config a pre-training run trains with, or a one-line `UserError` naming the
    key: first what needs no TensorFlow (`model_config.checked`: every key present, as
    an earlier version's config.json lacks the later ones; every value in its range or
    among its choices, `config_check`; the shape), then the shape resolved and explicit,
    as config.json keeps it (a generator_init's generator: its own), the objective for
    its tie and algorithm, the generator mode, the temperature schedule and the
    algorithm. Each check is written once, beside the allowed values or in the function
    that resolves the value; this runs every one that needs no device, data or workdir
    (what depends on the strategy, e.g. float16 refused on a TPU, the Trainer checks). The
    loop, `experiments/variants.py` and the training benchmark call it before anything
    is built or written."""
    config = model_config.checked(config)
    resolved = model_config.resolve(generator_init.configure(config))
    model_config.objective(resolved)
    model_config.generator_mode(resolved)
    model_config.temperature_schedule(resolved)
    algorithms.get(resolved)
    return resolved


def train_and_evaluate(config, workdir: str, strategy=None) -> dict[str, float]:
    """Pre-trains (resuming from `workdir` if it holds a checkpoint); returns the last
    evaluation's metrics (or the last training metrics without eval files)."""
    # ---- runtime
    config = validate(config)  # before anything is written
    strategy = strategy or distribute.get_strategy(config.runtime)
    chief = distribute.is_chief(strategy)
    distribute.local_batch_size(strategy, config.train.batch_size)  # before any dataset
    checkpointing.check_pretraining_workdir(workdir)  # before it is locked and tidied
    # One run writes a workdir: the chief holds it (the other workers write aside).
    with workdir_lib.Lock(workdir) if chief else contextlib.nullcontext():
        if chief:
            workdir_lib.remove_partial_files(workdir)

        # ---- data
        if not config.data.vocab_file:
            raise errors.UserError("config.data.vocab_file is empty: give the vocab.txt "
                                   "the data was made with")
        vocab = tokenizer.Vocab.load(config.data.vocab_file)
        train_files = pipeline.config_files(config, "train_files", vocab)
        eval_files = (pipeline.config_files(config, "eval_files", vocab)
                      if config.data.eval_files else None)
        masking = pipeline.masking_config(config, vocab)
        eval_data = (pipeline.distributed_dataset(strategy, eval_files, config, masking,
                                                  training=False) if eval_files else None)
        # The view shows replaced-token detection: objectives without it have none.
        detects = objectives.OBJECTIVES.get(model_config.objective_name(config)).detects
        shown = (config.train.eval_predictions if eval_files and chief and detects else 0)
        shown_batch = (predictions.first_batch(eval_files, shown,
                                               config.data.max_seq_length, masking,
                                               config.train.seed) if shown else None)
        if shown and shown_batch is None:
            logging.warning("config.data.eval_files hold fewer than config.train."
                            "eval_predictions=%d sequences: no predictions view", shown)

        # ---- model, optimizer
        # A workdir holds one run: another shape, objective, batch, seed or vocab is a
        # one-line error here, not a failure deep in restore.
        saved_config = checkpointing.check_same_run(config, workdir, vocab)
        trainer = trainer_lib.Trainer(config, strategy, vocab.size, masking.max_predictions)
        if eval_data is not None:
            with faults.naming_damaged(eval_files, "eval_files"):
                trainer.check_eval_data(eval_data)

        # ---- checkpoint (resume). The order matters:
        # 1. the variables exist (the Trainer built model and optimizer in the strategy's
        #    scope), so that the restore assigns them all now, slots included;
        # 2. the newest readable checkpoint is restored (a damaged one is skipped, and
        #    the chief lists it no more; a converted one holds the step and the model);
        # 3. the algorithm checks what it restored (two_stage's switch step);
        # 4. a run at step 0 takes config.model.generator_init's generator (resumed, the
        #    checkpoint holds it);
        # 5. the data stream starts after the batches the restored step consumed (same
        #    seed, same order, same masks: the run continues batch for batch).
        checkpoint_dir = workdir_lib.checkpoints(workdir)
        if not chief:  # other workers must save too (collectives); they write aside
            checkpoint_dir = workdir_lib.worker_dir(workdir, distribute.worker_id(strategy))
            # What a crashed run left there is no checkpoint of this run's: TF's
            # preemption handler restores a manager's latest, which would put an older
            # step's weights on this worker (a worker that sat out the last start).
            if tf.io.gfile.exists(checkpoint_dir):
                tf.io.gfile.rmtree(checkpoint_dir)
        checkpoint = checkpointing.checkpoint_of(trainer)
        listed = checkpointing.listed_checkpoints(workdir_lib.checkpoints(workdir))
        restored = checkpointing.restore(trainer, checkpoint,
                                         workdir_lib.checkpoints(workdir))
        if chief and restored and restored != listed[-1]:  # fell back past damaged ones
            checkpointing.forget_newer(checkpoint_dir, restored)
        # Made after that: it (and TF's multi-worker preemption handler, which restores
        # its newest checkpoint) starts from the one restored.
        manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir,
                                             max_to_keep=config.train.keep_checkpoints,
                                             step_counter=trainer.step)
        trainer.algorithm.check_restored(workdir)
        step = int(trainer.step.numpy())
        # The hosts and replicas (another layout than the restored checkpoint's is said).
        layout = {"input_pipelines": distribute.input_pipelines(strategy),
                  "replicas": strategy.num_replicas_in_sync}
        if restored and chief:
            checkpointing.warn_if_other_layout(workdir, saved_config, layout, step,
                                               restored)
            checkpointing.warn_if_older_masks(workdir, saved_config, layout, step,
                                              restored)
        if step == 0 and config.model.generator_init:
            generator_init.load(trainer.model, config, vocab)
        if generator_init.frozen_at_random(config):
            logging.warning(generator_init.FROZEN_AT_RANDOM)
        iterator = iter(pipeline.distributed_dataset(strategy, train_files, config, masking,
                                                     training=True, step=step))
        if step >= config.train.steps and chief:
            logging.warning("%s is at step %d and config.train.steps=%d: nothing to "
                            "train (raise config.train.steps to go on)", workdir, step,
                            config.train.steps)

        # ---- outputs
        logs = workdir_lib.path(workdir, workdir_lib.LOGS)
        train_logs = workdir_lib.logs(workdir, workdir_lib.TRAIN_LOGS)
        if chief:
            # The data's casing, for export, fine-tuning and scoring wherever they run
            # (the data may not be there then).
            lower_case = pipeline.lower_case_of_data(config.data.train_files)
            workdir_lib.write_json(workdir, workdir_lib.CONFIG, {
                **config.to_dict(), "data_order": order.VERSION,
                "data_masks": pipeline.MASKS,
                "layouts": checkpointing.layouts(saved_config, step, layout),
                "lower_case": saved_config.get("lower_case") if lower_case is None
                else lower_case})
            workdir_lib.copy_vocab(workdir, config.data.vocab_file)
            train_writer = tf.summary.create_file_writer(train_logs)
            eval_writer = tf.summary.create_file_writer(
                workdir_lib.logs(workdir, workdir_lib.EVAL_LOGS))
            summaries.write_config(train_writer, config)
            summaries.write_hparams(logs, config)
        else:
            train_writer = eval_writer = tf.summary.create_noop_writer()

        # ---- loop
        train = config.train
        tokens_per_step = trainer.global_batch * config.data.max_seq_length
        results = {}
        saved_step = step if restored else None
        last_time, last_step, start_time, start_step = time.time(), step, time.time(), step
        last_skipped = 0
        profiler = profiling.LoopProfiler(train.profile_steps, train_logs, chief)
        handler = preemption.multi_worker_handler(strategy, manager)
        try:
            with preemption.SigtermWatcher(trainer.stop_requested,
                                           enabled=handler is None) as sigterm:
                while step < train.steps and not sigterm.received.is_set():
                    # Run to the next log/checkpoint/eval boundary, at most steps_per_loop;
                    # never across two stages of the algorithm (two_stage's switch).
                    boundary = min(min(_next_multiple(step, n) for n in (
                        train.log_every, train.checkpoint_every, train.eval_every,
                        train.steps_per_loop)), trainer.algorithm.next_boundary(step))
                    with faults.naming_damaged(train_files, "train_files"):
                        trainer.start_loop(step)
                        profiler.run_loop(trainer, iterator,
                                          min(boundary, train.steps) - step)
                    step = int(trainer.step.numpy())
                    memory.release()  # what compilation and the steps freed, back to the OS
                    faults.raise_if_nonfinite(trainer, manager)
                    if handler is not None:  # saves; Preempted if a worker got SIGTERM
                        handler.save_checkpoint_if_preempted(checkpoint_number=step)
                    if sigterm.received.is_set():
                        break

                    if step % train.log_every == 0 or step == train.steps:
                        values = trainer.train_metrics.result()
                        trainer.train_metrics.reset()
                        now = time.time()
                        rate = (step - last_step) / max(now - last_time, 1e-9)
                        values.update(learning_rate=float(
                                          trainer.stage_optimizer().learning_rate),
                                      temperature=float(trainer.temperature(step)),
                                      steps_per_sec=rate,
                                      examples_per_sec=rate * trainer.global_batch,
                                      tokens_per_sec=rate * tokens_per_step)
                        skipped = ""
                        if trainer.loss_scaling:
                            total = int(trainer.skipped_steps.numpy())
                            values["skipped_steps"] = total - last_skipped
                            values["loss_scale"] = float(
                                trainer.stage_optimizer().dynamic_scale)
                            skipped = (f" | skipped {total - last_skipped} step(s) "
                                       f"(float16 overflow; loss scale "
                                       f"{values['loss_scale']:g})")
                            last_skipped = total
                        summaries.write_scalars(train_writer, values, step)
                        overall = (step - start_step) / max(now - start_time, 1e-9)
                        fields = " ".join(
                            f"{label} {values[name]:.{decimals}f}"
                            for label, name, decimals in trainer.objective.log_fields)
                        logging.info(
                            "step %d/%d (%.1f%%) loss %.4f %s | "
                            "%.2f steps/s %.0f ex/s ETA %s%s", step, train.steps,
                            100 * step / train.steps, values["loss"], fields, rate,
                            rate * trainer.global_batch, progress.format_duration(
                                (train.steps - step) / max(overall, 1e-9)), skipped)
                        last_time, last_step, results = now, step, values

                    if step % train.checkpoint_every == 0 or step == train.steps:
                        path = manager.save(checkpoint_number=step)
                        saved_step = step
                        if chief:
                            logging.info("Saved %s", path)

                    if eval_data is not None and (step % train.eval_every == 0
                                                  or step == train.steps):
                        with faults.naming_damaged(eval_files, "eval_files"):
                            results = trainer.evaluate(eval_data, train.eval_steps)
                        memory.release()
                        summaries.write_scalars(eval_writer, results, step)
                        # Held-out data that ends before eval_steps batches is said.
                        short = (f" ({trainer.eval_batches} of config.train.eval_steps="
                                 f"{train.eval_steps} batches: the held-out data ends there)"
                                 if trainer.eval_batches < train.eval_steps else "")
                        logging.info("eval at step %d%s: %s", step, short,
                                     " ".join(f"{k} {v:.4f}" for k, v in results.items()))
                        if shown_batch is not None:
                            _write_predictions(eval_writer, trainer, shown_batch, vocab,
                                               step)
                        last_time = time.time()  # evaluation time is not training time

                if sigterm.received.is_set():
                    if saved_step != step:
                        path = manager.save(checkpoint_number=step)
                        logging.info("Saved %s", path)
                    logging.warning("Stopped by SIGTERM at step %d/%d; the same command "
                                    "resumes from there", step, train.steps)
        except preemption.Preempted:
            step = int(trainer.step.numpy())
            logging.warning("Preempted: saved a checkpoint at step %d/%d; the same command "
                            "on every worker resumes from there", step, train.steps)
        except faults.LOST_PEER as e:
            if handler is None:
                raise
            raise faults.lost_peer(e, step, workdir) from None
        except tf.errors.ResourceExhaustedError as e:
            raise faults.out_of_memory(e, step, config, workdir) from None
        finally:
            profiler.stop(trainer)
            train_writer.flush()
            eval_writer.flush()

        if not chief:
            tf.io.gfile.rmtree(workdir_lib.path(workdir, workdir_lib.TMP))
        return results


def _write_predictions(writer, trainer, batch, vocab, step):
    """The predictions view of the first held-out sequences (the same ones, masks and
    sampling noise at every evaluation), as a text summary: what the model does to them."""
    uniform = predictions.noise(trainer.config.train.seed, *batch["masked_lm_ids"].shape)
    shown = predictions.views(trainer.predict, batch, vocab, uniform)
    with writer.as_default(step=step):
        tf.summary.text("predictions", predictions.markdown(shown))
    writer.flush()


def _next_multiple(step: int, every: int) -> int:
    every = max(int(every), 1)
    return (step // every + 1) * every
