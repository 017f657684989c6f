"""The Trainer: the model, optimizer, metrics and compiled steps of one pre-training run.

One step of one replica (`train_step`), read top to bottom:

    global counts (all-reduce) ─► for each micro-batch (1 unless accumulation_steps):
        [XLA] forward: generator ─► sample ─► discriminator ─► losses scaled to these
        rows' share of the global mean ─► gradients (summed) ─► metrics
    ─► all-reduce (sum) ─► optimizer: clip to global norm, weight decay, AdamW

(That is the `electra` objective under the `joint` algorithm: the forward pass, the loss
and the metrics are the objective's, `model/objectives/`; which variables a step trains by
which loss and optimizer is the algorithm's stage's, `training/algorithms/`.) What XLA
compiles of it is chosen in one place, the `# ---- what XLA compiles` block of
`Trainer.__init__`.

`steps_per_loop` such steps run inside one `tf.function` (one host round-trip per loop,
which is what TPUs need), one per stage of the algorithm, its stage bound when it is
made (`train_loop`). The loop ends early, at a step boundary, when SIGTERM has set
`stop_requested` or a step's losses or gradient norm were not finite (`nonfinite`). With
the whole step compiled (one GPU, TPUs), the loop itself runs inside XLA, one launch
per loop (`_compile_xla_loop`; one replica function, `_replica_loop`, for both), and
`stop_requested` is read between launches.

Nothing here is converted by autograph (`tf.function(..., autograph=False)`; its loops
are `tf.while_loop`s): converting the ~50 functions a step calls took each process ~5 s
in the converter (~8 s of its start), and each converted call holds a copy of
`short_tracebacks()`' file set for as long as its ops live (WORKSPACE.md, Conventions,
"No autograph").

What a step's pass needs besides its batch is one immutable value, the step context
(`model/context.py`), built once per step by `step_context` and handed down as one
argument: `objective.forward(model, batch, context)` runs the model's passes in it, and
the dropout and recomputing layers read it (`context.active()`). A micro-batch takes its
rows' block and noise from it (`StepContext.for_block`).

Every random draw of step t is a function of (seed, t), so a resumed run repeats an
uninterrupted one: the sampling noise is made of stateless integer draws `[global_batch,
P]` seeded by (seed, t), of which each replica (and micro-batch) takes its rows, and the
dropout masks are stateless hashes of (seed, t, layer, global element index)
(`model/dropout.py`, the context's `seed` and `block`); both are therefore also the same
whatever the number of replicas or micro-batches. The sampling temperature is a function
of t too (`temperature`, config.model.temperature_schedule). The masks of the data are
functions of (seed, batch index) (`data/pipeline.py`).
"""

import keras
import tensorflow as tf
from absl import logging

from electra_tf import errors
from electra_tf import model_config
from electra_tf import progress
from electra_tf.model import context as context_lib
from electra_tf.model import heads
from electra_tf.training import algorithms
from electra_tf.training import distribute
from electra_tf.training import memory
from electra_tf.training import metrics as metrics_lib
from electra_tf.training import optimizer as optimizer_lib
from electra_tf.training import predictions
from electra_tf.training import step_settings
from electra_tf.training import tracebacks

SUM = tf.distribute.ReduceOp.SUM


class Trainer:
    """The model, optimizer, metrics and compiled steps of one run, under one strategy."""

    def __init__(self, config, strategy, vocab_size: int, num_predictions: int):
        self.config = config
        self.strategy = strategy
        self.num_predictions = num_predictions
        self.global_batch = config.train.batch_size
        self.local_batch = distribute.local_batch_size(strategy, self.global_batch)
        self.accumulation_steps = step_settings.micro_batches(config.train, self.local_batch)
        self.policy = distribute.dtype_policy(config.train.mixed_precision, strategy)
        seq_length = config.data.max_seq_length
        with strategy.scope():
            keras.utils.set_random_seed(config.train.seed)
            self.model = model_config.pretrainer(config, vocab_size, dtype=self.policy)
            self.model.build_for(seq_length, num_predictions)
            # What the backward pass recomputes: `auto` by the device's memory, for the
            # activations of one micro-batch (those of one are kept at a time).
            self.remat, self.remat_reason = step_settings.remat_mode(
                config.train.remat, strategy, self.model,
                self.local_batch // self.accumulation_steps, seq_length, num_predictions,
                self.policy)
            logging.info("config.train.remat=%s: %s", self.remat, self.remat_reason)
            # The projection onto the vocabulary padded to whole tiles, or not: `auto`
            # by the device.
            self.vocabulary_multiple, self.vocabulary_padding_reason = (
                step_settings.vocabulary_multiple(config.train.vocabulary_padding, strategy))
            logging.info("config.train.vocabulary_padding=%s: the vocabulary padded to %d "
                         "(a multiple of %d): %s", config.train.vocabulary_padding,
                         heads.padded_vocabulary(vocab_size, self.vocabulary_multiple),
                         self.vocabulary_multiple, self.vocabulary_padding_reason)
            # The sampling temperature of step t (constant, or a schedule to 1.0).
            self.temperature = model_config.temperature_schedule(config)
            # Which variables each step trains, by which loss (checked: errors name keys);
            # its own layers first: the run's optimizer trains them too.
            self.algorithm = algorithms.get(config)
            self.algorithm.build(config.train, self.model, self.policy)
            self.optimizer = optimizer_lib.create_optimizer(
                config.train, self.model, self.policy, layers=self.algorithm.layers())
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            # The run's one objective, the model's (its disc_weight the config's): the
            # loss, its metrics in training and evaluation, what is checked finite.
            self.objective = self.model.objective
            self.train_metrics = metrics_lib.PretrainingMetrics(
                objective=self.objective, algorithm=self.algorithm)
            self.eval_metrics = metrics_lib.PretrainingMetrics(objective=self.objective)
        self.eval_batches = 0  # global batches the last `evaluate` read
        # Host state, outside the strategy's scope: the loop's host side reads it before
        # each launch and writes it after (a TPU program reaches only the scope's).
        self.stop_requested = tf.Variable(False, trainable=False, name="stop_requested")
        # (step, which): the first step whose losses (bit 2^i: the objective's
        # `loss_names[i]`; electra: mlm_loss 1, rtd_loss 2) or gradient norm (the next
        # bit) was not finite; step -1 while none was.
        self.nonfinite = tf.Variable([-1, 0], dtype=tf.int64, trainable=False,
                                     name="nonfinite")
        # float16: steps the loss-scale optimizer skipped (overflowing gradients).
        self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name="skipped_steps")
        self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)

        # ---- what XLA compiles: decided here and nowhere else (`xla_scope` picks it).
        #   whole_step        `train_step` is one program (we compile it; TPUStrategy
        #                     compiles what it runs by itself), `steps_per_loop` of them
        #                     in one `while` (`_compile_xla_loop`), the forward/backward
        #                     pass a plain call inside it: a jit_compile function nested
        #                     in another gets the variables it reads as compile-time
        #                     constants (TF 2.21) and compiles again at every step.
        #   forward_backward  each micro-batch's `_forward_backward` is one program; the
        #                     all-reduce, clipping and update run as TF ops. On a TPU,
        #                     one step a launch, each compiled whole by TPUStrategy (the
        #                     pass a plain call in it, as above).
        #   none              nothing (config.train.jit_compile=false).
        self.xla_scope = step_settings.xla_scope(config.train, strategy)
        jit = config.train.jit_compile
        whole_step = self.xla_scope == "whole_step"
        tpu = distribute.is_tpu(strategy)
        self._jit_step = whole_step and not tpu
        self._forward_backward = (self._forward_backward_pass if whole_step or tpu else
                                  tf.function(self._forward_backward_pass, jit_compile=jit,
                                              autograph=False))
        self._forward = tf.function(self._forward_pass, jit_compile=jit,  # evaluation
                                    autograph=False)

        self.stage = self.algorithm.stage(0)  # host state: `start_loop` sets it
        self._train_loops = {}  # stage → its compiled loop (`train_loop`)
        self._compiled_stages = set()  # stages whose loop has run (`run_loop`)
        self.eval_batch = tf.function(self._eval_batch_fn, autograph=False)
        self.predict = predictions.predict_fn(  # the predictions view's, at the step's
            self.model, lambda: self.temperature(self.step.value()),  # temperature
            vocabulary_multiple=self.vocabulary_multiple)

    # ------------------------------------------------------------------ the step
    def train_step(self, batch, step, stage: str):
        """One step of this replica at `step`: gradients → update → metrics. Returns
        `[losses + 1]`: how many replicas (all workers) found each loss (electra:
        mlm_loss, rtd_loss) and the gradient norm not finite; the same on every replica,
        so all of them stop at the same step."""
        grads, values = self.gradients(batch, step, stage, self.train_metrics)
        grad_norm = tf.linalg.global_norm(grads)
        optimizer = self.stage_optimizer(stage)
        skipped = None
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            grad_norm /= tf.cast(optimizer.dynamic_scale, grad_norm.dtype)
            # An overflow: the optimizer skips the step, whose norm (inf or NaN) would
            # make TensorBoard's mean over the logged steps inf or NaN.
            skipped = tf.logical_not(tf.math.is_finite(grad_norm))
        optimizer.apply_gradients(zip(grads, self.algorithm.variables(self.model, stage)))
        self.train_metrics.update_loss(values["loss"])  # what TensorBoard calls `loss`
        self.train_metrics.update_grad_norm(grad_norm, skipped)
        finite = tf.math.is_finite(tf.stack([values[k] for k in self.objective.loss_names]
                                            + [tf.cast(grad_norm, tf.float32)]))
        return tf.distribute.get_replica_context().all_reduce(
            SUM, tf.cast(tf.logical_not(finite), tf.float32))

    def gradients(self, batch, step, stage: str, metrics=None):
        """(gradients summed over replicas, loss values) of this replica's rows at `step`;
        each micro-batch's outputs go to `metrics` (a `PretrainingMetrics`) if given.
        `values["loss"]` is this replica's share of the scalar the gradients are of (the
        stage's loss, `algorithm.loss`), the replicas' shares summing to it.

        With `accumulation_steps` N > 1 the rows are N micro-batches, run one after the
        other, their gradients summed. Every micro-batch's loss is normalised by the
        counts of the whole global batch and draws the sampling noise and the dropout
        masks of its own rows of it, so the sum is the gradient of one step on the whole
        batch (up to float rounding), and the metrics are the same."""
        variables = self.algorithm.variables(self.model, stage)
        counts = self._global_counts(batch)
        context = self.step_context(step, stage)
        n = self.accumulation_steps
        if n == 1:
            grads, outputs, values = self._forward_backward(batch, counts, context)
            # Dense, as the accumulated sum is: the norm (clipping, grad_norm) of an
            # IndexedSlices gradient would count its repeated rows one by one.
            grads = [tf.zeros(v.shape, v.dtype) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(grads, variables)]
            if metrics is not None:
                metrics.update(batch, outputs, values)
        else:
            def split(t):  # [n · size, ...] → [n, size, ...]: static micro-batch shapes
                return tf.reshape(t, [n, self.local_batch // n] + t.shape[1:].as_list())
            batches = {k: split(t) for k, t in batch.items()}
            uniforms = split(context.uniform)

            def accumulate(micro, grads, values):
                micro_batch = {k: t[micro] for k, t in batches.items()}
                micro_grads, outputs, micro_values = self._forward_backward(
                    micro_batch, counts,
                    context.for_block(context.block * n + micro, uniforms[micro]))
                if metrics is not None:
                    metrics.update(micro_batch, outputs, micro_values)
                return (micro + 1, [_add_gradient(g, m) for g, m in zip(grads, micro_grads)],
                        {k: values[k] + micro_values[k] for k in values})
            _, grads, values = tf.while_loop(
                lambda micro, *_: micro < n, accumulate,
                (tf.constant(0), [tf.zeros(v.shape, v.dtype) for v in variables],
                 {k: tf.constant(0.0) for k in ("loss", *self.objective.loss_names)}),
                maximum_iterations=n)
        # Sum over replicas here (not in Keras) so that clipping sees the global gradient.
        return tf.distribute.get_replica_context().all_reduce(SUM, grads), values

    def step_context(self, step, stage: str) -> context_lib.StepContext:
        """The context of this replica's rows at `step` (built once per step): the
        dropout seed (run seed, step), this replica's rows of the step's sampling noise,
        the replica as the block, the step's temperature, `stage`, training, the
        run's recomputation mode and the vocabulary's padding multiple."""
        seed = self.config.train.seed
        replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group,
                          tf.int32)
        return context_lib.StepContext.for_step(
            seed, step, training=True, uniform=self._uniform(seed, step), block=replica,
            temperature=self.temperature(step), stage=stage, remat=self.remat,
            vocabulary_multiple=self.vocabulary_multiple)

    def _forward_backward_pass(self, batch, counts, context):
        """forward → loss → gradients of one (micro-)batch in `context` (its rows'
        block and noise): (gradients of the context's stage's variables, the outputs the
        metrics read, loss values with the differentiated loss as `loss`)."""
        variables = self.algorithm.variables(self.model, context.stage)
        # The model seeds each pass's masks from the context's seed (the generator's
        # salted); what remat recomputes redraws the masks of its forward call.
        with tf.GradientTape() as tape:
            outputs = self.objective.forward(self.model, batch, context)
            loss, values = self.objective.loss(outputs, batch, *counts)
            loss, values = self.algorithm.loss(self.objective, loss, values, context.stage,
                                               outputs, batch, counts[0])
            values = {**values, "loss": loss}
            # Keep only what the metrics read: never return [B, P, V] logits from XLA.
            compact = self.objective.compact(outputs)
            scaled = self.stage_optimizer(context.stage).scale_loss(loss)  # float16 scaling
        return tape.gradient(scaled, variables), compact, values

    def _forward_pass(self, batch, counts, context):
        outputs = self.objective.forward(self.model, batch, context)
        _, values = self.objective.loss(outputs, batch, *counts)
        return self.objective.compact(outputs), values

    def _uniform(self, seed, index):
        """This replica's rows of the `[global_batch, P]` sampling noise for `index`.

        Made from integer draws: TF's kernel and XLA give the same stateless integers but
        not the same floats (they map bits to floats differently), and the noise must not
        depend on which of them runs the step (the whole step compiled or not, one device
        or several). The top 24 bits, times 2^-24: exact float32s in [0, 1)."""
        bits = tf.random.stateless_uniform(
            [self.global_batch, self.num_predictions],
            seed=tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)]),
            minval=None, maxval=None, dtype=tf.uint32, alg="philox")
        noise = tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)),
                        tf.float32) * 2.0**-24
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.slice(noise, [replica * self.local_batch, 0],
                        [self.local_batch, self.num_predictions])

    def _global_counts(self, batch):
        """Masked positions and real tokens in the GLOBAL batch: the loss normalizers."""
        counts = tf.stack([tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)),
                           tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))])
        counts = tf.distribute.get_replica_context().all_reduce(SUM, counts)
        return counts[0], counts[1]

    def stage_optimizer(self, stage=None):
        """The optimizer of `stage` (default: the current one): the run's `optimizer`,
        or the algorithm's own (two_stage's discriminator stage)."""
        return self.algorithm.optimizer(stage or self.stage, self.optimizer)

    # ------------------------------------------------------------------ the loop
    @property
    def train_loop(self):
        """The compiled loop of the current stage, `(iterator, num_steps)`: made once per
        stage, so a stage's trace never runs another's step."""
        if self.stage not in self._train_loops:
            self._train_loops[self.stage] = self._compile_loop(self.stage)
        return self._train_loops[self.stage]

    def _compile_loop(self, stage: str):
        """`num_steps` steps of `stage` in one `tf.function`; fewer when a stop is
        requested or a step is not finite. With the whole step compiled (one device,
        TPUs) the steps run inside XLA, `steps_per_loop` a launch (`_compile_xla_loop`);
        otherwise each step is a launch of its own, the stop checked before every step."""
        if self.xla_scope == "whole_step":
            return self._compile_xla_loop(stage, jit_compile=self._jit_step)

        def step_fn(batch, step):
            return self.train_step(batch, step, stage)

        def launch(iterator, num_steps, done):  # pylint: disable=unused-argument
            bad = self.strategy.run(step_fn, args=(next(iterator), self.step.value()))
            which, skipped = self._nonfinite_bits(
                self.strategy.experimental_local_results(bad)[0] > 0)
            self.step.assign_add(1)
            self._record_nonfinite(which, skipped)
            return done + 1
        return self._loop(launch)

    def _compile_xla_loop(self, stage: str, jit_compile: bool):
        """The loop of the whole step, its steps inside XLA: each launch runs up to
        `steps_per_loop` steps in one program (`_replica_loop`, a `while`), instead of
        one program per step. One device compiles the replica loop here (`jit_compile`);
        TPUStrategy compiles for the TPU what its `strategy.run` runs, so it is given the
        plain function: a TPU runs the function the CPU tests run.

        An iterator cannot be read inside XLA, so each launch's batches are read first,
        as many as it runs (the data's position stays the step's: `_read_if`), and the
        program takes `steps_per_loop` of them, the first one again where it runs fewer
        (no step reads those). The count of steps is an argument: one program for every
        count (one compilation per stage, on a TPU as on a GPU), at the price of the
        loop's batches being on the device at once (~9 KB an example at sequence 512,
        0.23 GB for 100 steps at batch 256) and of a traced graph with one read per
        step of the loop. The host reads `stop_requested` between launches: a SIGTERM
        stops the loop at the end of the running launch, not at the next step."""
        size = self.config.train.steps_per_loop
        replica_loop = self._replica_loop(stage, jit_compile)

        def launch(iterator, num_steps, done):
            count = tf.minimum(num_steps - done, size)
            first = next(iterator)
            batches = [first] + [self._read_if(i < count, iterator, first)
                                 for i in range(1, size)]
            ran, which, skipped = (
                self.strategy.experimental_local_results(value)[0]
                for value in self.strategy.run(
                    replica_loop, args=(batches, count, self.step.value())))
            self.step.assign_add(tf.cast(ran, tf.int64))
            self._record_nonfinite(which, skipped)
            return done + count
        return self._loop(launch)

    def _loop(self, launch):
        """The compiled `loop(iterator, num_steps)`: `done = launch(iterator, num_steps,
        done)` from 0 while `done < num_steps` and the run goes on (`_running`)."""
        def loop(iterator, num_steps):
            # Short stacks on the traced ops: less memory held after XLA's compilation
            # (training/tracebacks.py).
            with tracebacks.short_tracebacks():
                # The stop test in the condition: a branch in the body would nest the
                # step in one more graph, with its own copy of the compiled pass
                # (BENCHMARKS.md, "Memory").
                tf.while_loop(
                    lambda done: tf.logical_and(done < num_steps, self._running()),
                    lambda done: (launch(iterator, num_steps, done),),
                    (tf.zeros_like(num_steps),))
        return tf.function(loop, autograph=False)

    def _replica_loop(self, stage: str, jit_compile: bool):
        """What one replica runs in one launch of `_compile_xla_loop`: `steps(batches,
        count, step)` runs `train_step` of `stage` on `batches[:count]` (of a list of
        `steps_per_loop` batches, stacked here) at steps `step`, `step + 1`, ..., in a
        `while`, and ends after a step that is not finite. Returns (steps run, the
        last one's non-finite bits, steps float16's optimizer skipped:
        `_nonfinite_bits`), the same on every replica.

        It reads and writes only what was made under the strategy's scope (the model,
        optimizer and metrics): a TPU program reaches nothing else. Its first step comes
        as an argument; the step counter (also the scope's) is advanced around the
        launch, and the host state (the stop flag, the non-finite record, float16's
        count of skipped steps) is read and written there. A jit-compiled function if
        `jit_compile` (one device), else the plain function (TPUStrategy, and the CPU
        tests under MirroredStrategy)."""
        def steps(batches, count, step):
            # {name: [steps_per_loop, rows, ...]}
            stacked = tf.nest.map_structure(lambda *t: tf.stack(t), *batches)

            def run(i, _, skipped):
                bad = self.train_step(tf.nest.map_structure(lambda t: t[i], stacked),
                                      step + tf.cast(i, step.dtype), stage)
                which, step_skipped = self._nonfinite_bits(bad > 0)
                return i + 1, which, skipped + step_skipped

            def more(i, which, _):
                return tf.logical_and(i < count, tf.equal(which, 0))
            none = tf.constant(0, tf.int64)
            return tf.while_loop(more, run, (tf.zeros_like(count), none, none))
        return (tf.function(steps, jit_compile=True, autograph=False) if jit_compile
                else steps)

    def _read_if(self, read, iterator, otherwise):
        """`next(iterator)` if `read`, else `otherwise` (a batch read before), one
        replica's batch at a time: a distributed iterator gives a value per replica
        (`PerReplica`), which `tf.cond` does not take."""
        local = self.strategy.experimental_local_results
        chosen = tf.cond(read, lambda: local(next(iterator)), lambda: local(otherwise))
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: chosen[context.replica_id_in_sync_group])

    def _running(self):
        """Whether the loop goes on: no stop requested, every step so far finite."""
        return tf.logical_not(tf.logical_or(self.stop_requested.read_value(),
                                            self.nonfinite[0] >= 0))

    def run_loop(self, iterator, num_steps: int) -> None:
        """`num_steps` steps through `train_loop`, as one call of it would run them. The
        first call of a stage runs its first step (the one that compiles) alone under
        `memory.trimming()`: what compiling freed goes back to the OS before the steps'
        working set comes on top of it (BENCHMARKS.md, "Memory")."""
        if self.stage not in self._compiled_stages and num_steps > 0:
            self._compiled_stages.add(self.stage)
            with memory.trimming():
                self.train_loop(iterator, tf.constant(1))
            num_steps -= 1
            if not num_steps:
                return
        self.train_loop(iterator, tf.constant(num_steps))

    def start_loop(self, step: int) -> None:
        """On the host, before a loop that starts at `step`: the algorithm's stage there
        (and, at two_stage's switch, the discriminator's initialisation)."""
        self.algorithm.begin(self.model, step)
        self.stage = self.algorithm.stage(step)

    def _nonfinite_bits(self, bad):
        """(which, skipped) of one step from `bad`, [losses + 1] bool (each loss of
        `loss_names` and the gradient norm not finite): `which` sums 2^i over the
        quantities that were not finite (0: all were), `skipped` is 1 where float16's
        optimizer skipped the update, else 0 (int64 scalars)."""
        skipped = tf.constant(0, tf.int64)
        if self.loss_scaling:
            # float16: the optimizer has skipped the update (and lowered the loss scale).
            skipped = tf.cast(bad[-1], tf.int64)
            bad = tf.concat([bad[:-1], [False]], 0)
        # int32 until the sum: inside the replica loop this is TPU code, where int64
        # tensors are emulated (only scalars stay int64).
        bits = tf.constant([2**i for i in range(len(self._checked_names))], tf.int32)
        return tf.cast(tf.reduce_sum(tf.cast(bad, tf.int32) * bits), tf.int64), skipped

    def _record_nonfinite(self, which, skipped):
        """On the host, after steps that end at `self.step`: adds float16's `skipped`
        steps, and records `self.step` with `which`, the last step's non-finite bits
        (`_nonfinite_bits`), as the first non-finite step unless one was recorded."""
        self.skipped_steps.assign_add(skipped)
        first = tf.logical_and(which > 0, self.nonfinite[0] < 0)
        self.nonfinite.assign(tf.where(first, tf.stack([self.step.value(), which]),
                                       self.nonfinite.value()))

    def nonfinite_step(self) -> tuple[int, list[str]] | None:
        """(step, names of the non-finite quantities) of the first bad step, or None."""
        step, which = (int(v) for v in self.nonfinite.numpy())
        if step < 0:
            return None
        return step, [name for i, name in enumerate(self._checked_names) if which & 2**i]

    @property
    def _checked_names(self):
        return (*self.objective.loss_names, "gradient norm")

    # ------------------------------------------------------------------ evaluation
    def _eval_batch_fn(self, batch, index):
        def replica_fn(batch, index):
            counts = self._global_counts(batch)
            # A fixed noise stream per evaluation batch: evaluations are comparable. The
            # temperature is the current step's: the held-out loss is the training loss.
            context = context_lib.StepContext(
                uniform=self._uniform(self.config.train.seed + 1, index),
                temperature=self.temperature(self.step.value()),
                vocabulary_multiple=self.vocabulary_multiple)
            outputs, values = self._forward(batch, counts, context)
            self.eval_metrics.update(batch, outputs, values)
        with tracebacks.short_tracebacks():
            self.strategy.run(replica_fn, args=(batch, index))

    def check_eval_data(self, dataset) -> None:
        """At the start of a run, not hours into it at the first evaluation: a one-line
        error where the held-out data does not fill one global batch."""
        if next(iter(dataset), None) is None:
            raise self._too_few_eval_examples()

    def _too_few_eval_examples(self) -> errors.UserError:
        return errors.UserError("config.data.eval_files: fewer examples than one global "
                                f"batch ({self.global_batch})")

    def evaluate(self, dataset, num_batches: int) -> dict[str, float]:
        """The metrics of at most `num_batches` global batches of `dataset` (fewer where
        it ends first: `self.eval_batches` says how many)."""
        self.eval_metrics.reset()
        seen = 0
        # A line every 30 s: an evaluation of a large model can take minutes.
        bar = progress.Progress(num_batches, "eval batches", every_secs=30,
                                first_line_now=False)
        for index, batch in enumerate(dataset):
            if index >= num_batches:
                break
            self.eval_batch(batch, tf.constant(index, tf.int64))
            seen += 1
            bar.update(seen)
        if not seen:
            raise self._too_few_eval_examples()
        self.eval_batches = seen
        return self.eval_metrics.result()

    def loss_and_gradients(self, dist_batch, step):
        """(loss, gradients) of one distributed global batch at `step`, by the training
        step's path (global counts, noise rows, forward/backward, all-reduce) without the
        update: the loss summed over replicas (the global mean) and the all-reduced
        gradients, dense, in the order of the step's variables (joint:
        `model.trainable_variables`). For comparing strategies."""
        stage = self.algorithm.stage(step)

        def replica_fn(batch, step):
            grads, values = self.gradients(batch, step, stage)
            return values["loss"], [tf.convert_to_tensor(g) for g in grads]

        def run(dist_batch, step):
            loss, grads = self.strategy.run(replica_fn, args=(dist_batch, step))
            return (self.strategy.reduce(SUM, loss, axis=None),
                    [self.strategy.experimental_local_results(g)[0] for g in grads])
        # Compiled as the step is: whole where the step is compiled whole; else its
        # forward/backward pass is.
        return tf.function(run, jit_compile=self._jit_step or None, autograph=False)(
            dist_batch, tf.constant(step, tf.int64))


def _add_gradient(total, gradient):
    """total + gradient, for a gradient that may be `IndexedSlices` (an embedding's rows).
    Scattered with the total's static row count: XLA cannot convert IndexedSlices to
    dense inside a loop (their dense shape is not a compile-time constant there)."""
    if gradient is None:  # a variable this objective does not use
        return total
    if isinstance(gradient, tf.IndexedSlices):
        return tf.tensor_scatter_nd_add(total, gradient.indices[:, None], gradient.values)
    return total + gradient
