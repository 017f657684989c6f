"""`StepContext`: everything one pass of the pre-trainer needs besides its batch and its
weights, as one immutable value, and the one place the layers read it from.

A training step builds one (`for_step`): the step, the dropout seed derived once from
(run seed, step), the sampling noise of this replica's rows, the block of the global
batch those rows are (the replica), the step's sampling temperature, the algorithm's
stage, `training`, the recomputation mode (`model/remat.py`) and the multiple the MLM
heads pad the vocabulary to (`model/heads.py`, chosen for the device). A micro-batch of
gradient accumulation takes its own rows and block (`for_block`); evaluation and the
predictions view build theirs (no dropout seed: not training). The objective hands it to
the model's passes (`objective.forward(model, batch, context)` → `model.generate`,
`model.encode`, ...).

How the layers deep inside read it: each encoder pass of the model runs inside
`entered(context)` (the generator's with a salted seed, `salted`), which makes it the
`active()` context for the layers traced in it: `HashDropout` draws its stateless masks
from its `seed` and `block` (`model/dropout.py`), and the recomputing layers read its
`remat` (`model/remat.py`). A recomputed backward pass, traced after the forward's
context has closed, enters the context its forward call captured. `active()` is a
`contextvars.ContextVar`: each thread (a MirroredStrategy replica) sees its own.

It is a `tf.nest` structure (its tensors are the leaves; `training`, `remat`, `stage` and
`vocabulary_multiple` are static), so a compiled function takes it as one argument.

>>> context = StepContext.for_step(7, 3, training=True, remat="selective")
>>> context.seed.numpy().tolist(), context.block, active() is None
([7, 3], 0, True)
>>> with entered(context.for_block(2)):
...     active().block, active().remat
(2, 'selective')
>>> context.remat = "none"
Traceback (most recent call last):
...
dataclasses.FrozenInstanceError: cannot assign to field 'remat'
"""

import contextlib
import contextvars
import dataclasses
from typing import Any

import tensorflow as tf

from electra_tf import config_check
from electra_tf import errors

REMAT_MODES = config_check.CHOICES["train.remat"][1:]  # what `remat` may be: all but auto
_ACTIVE = contextvars.ContextVar("electra_tf_step_context", default=None)


# Compared by identity (eq=False): == on its tensor fields fails inside a graph.
@dataclasses.dataclass(frozen=True, eq=False)
class StepContext:
    """One (micro-)batch pass's randomness and settings (see the module docstring).

    `training`: dropout and recomputation on (Keras' `training` of the encoders).
    `uniform`: [B, P] noise in [0, 1) that drives the generator's sampling, this block's
    rows; None: drawn afresh (`tf.random.uniform`). `temperature`: the sampling
    temperature (a scalar); None: the model's own. `seed`: a [2] int64 tensor from which
    every dropout mask is a stateless function; None: Keras' seed generators draw them.
    `block`: which block of the batch's row count the rows are in the global batch (the
    replica, or replica · N + micro-batch under accumulation), an int32 scalar.
    `remat`: the recomputation mode of the backward pass (`REMAT_MODES`). `stage`: the
    algorithm's stage (a name), None outside training. `step`: the step (int64), None
    outside training. `vocabulary_multiple`: what the MLM heads pad the vocabulary to
    (`heads.padding_multiple`, chosen for the device); None: the heads' own."""

    training: bool = False
    uniform: Any = None
    temperature: Any = None
    seed: Any = None
    block: Any = 0
    remat: str = "none"
    stage: str | None = None
    step: Any = None
    vocabulary_multiple: int | None = None

    def __post_init__(self):
        if self.vocabulary_multiple is not None and not (
                isinstance(self.vocabulary_multiple, int) and self.vocabulary_multiple >= 1):
            raise ValueError("`vocabulary_multiple` must be a positive int or None. "
                             f"Received: `vocabulary_multiple={self.vocabulary_multiple!r}`")
        errors.check_choice("remat", self.remat, REMAT_MODES, ValueError)

    @classmethod
    def for_step(cls, run_seed, step, **fields) -> "StepContext":
        """The context of `step` of a run seeded `run_seed`: its dropout seed is
        (run seed, step) as int64; `fields` give the rest."""
        seed = tf.stack([tf.cast(run_seed, tf.int64), tf.cast(step, tf.int64)])
        return cls(seed=seed, step=tf.cast(step, tf.int64), **fields)

    def for_block(self, block, uniform=None) -> "StepContext":
        """The same step for the rows of `block` (a micro-batch), with their `uniform`
        noise (None: this context's)."""
        return dataclasses.replace(self, block=block,
                                   uniform=self.uniform if uniform is None else uniform)

    def salted(self, salt: int) -> "StepContext":
        """This context with `salt` folded into the dropout seed (0: unchanged): passes
        that run layers another pass of the step runs too (shared embeddings, a second
        tower) draw other masks."""
        if self.seed is None or not salt:
            return self
        seed = tf.random.experimental.stateless_fold_in(tf.cast(self.seed, tf.int64), salt,
                                                        alg="philox")
        return dataclasses.replace(self, seed=tf.cast(seed, tf.int64))

    # A `tf.nest` structure: tensors as leaves, the static fields as metadata.
    def __tf_flatten__(self):
        return ((self.training, self.remat, self.stage, self.vocabulary_multiple),
                (self.uniform, self.temperature, self.seed, self.block, self.step))

    @classmethod
    def __tf_unflatten__(cls, metadata, components):
        training, remat, stage, vocabulary_multiple = metadata
        uniform, temperature, seed, block, step = components
        return cls(training=training, uniform=uniform, temperature=temperature, seed=seed,
                   block=block, remat=remat, stage=stage, step=step,
                   vocabulary_multiple=vocabulary_multiple)


def active() -> StepContext | None:
    """The context of the encoder pass being traced (`entered`), or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def entered(context: StepContext | None):
    """Within the block, `active()` is `context` (None: no context). The model enters
    it around each encoder pass, while tracing; a recomputed pass re-enters its
    forward's."""
    token = _ACTIVE.set(context)
    try:
        yield context
    finally:
        _ACTIVE.reset(token)
