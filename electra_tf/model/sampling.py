"""Sampling replacement tokens from the generator, on token ids.

`sample` draws one token per masked position by inverting the CDF of the generator's
softmax with ONE uniform number per position (`[B, P]`). The caller supplies those numbers,
so a draw is a pure function of (logits, uniform): the training loop makes them from the
seed, the step and the example's index in the global batch, which gives the same samples
whatever the number of replicas, and after a resume.

The CDF is found in two levels (blocks of 128 vocabulary entries, then inside the chosen
block) rather than one cumulative sum over the vocabulary: a float32 running sum over 30k
entries drifts by ~1e-3 and is 4x slower on CPU. The probabilities are never normalised:
the uniform number is scaled to the total mass instead. The block masses are the
exponentials exp((logit - max) / temperature) summed by block, and the chosen block's 128
entries are recomputed from its logits, so nothing of shape `[B, P, V]` is kept past the
block sums. Round-off never draws an id of probability 0 (`_first_passing`).

>>> import tensorflow as tf
>>> logits = tf.math.log(tf.constant([[[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]]) + 1e-9)
>>> sample(logits, tf.constant([[0.3, 0.9]])).numpy().tolist()
[[1, 2]]
"""

import dataclasses
import math

import tensorflow as tf

from electra_tf import config_check

BLOCK = 128
SCHEDULES = config_check.CHOICES["model.temperature_schedule"]


@dataclasses.dataclass(frozen=True)
class TemperatureSchedule:
    """The sampling temperature at a step: `start` throughout (`constant`), or from `start`
    to 1.0 over `steps` steps, in a straight line (`linear`) or half a cosine (`cosine`),
    then 1.0 (Fast-ELECTRA's smoothing of the generator's softmax, cooled as training goes).
    A function of the step alone, so a resumed run samples as an uninterrupted one.

    >>> linear = TemperatureSchedule("linear", start=3.0, steps=100)
    >>> [round(float(linear(s)), 2) for s in (0, 50, 100, 200)]
    [3.0, 2.0, 1.0, 1.0]
    >>> cosine = TemperatureSchedule("cosine", start=3.0, steps=100)
    >>> [round(float(cosine(s)), 2) for s in (0, 25, 50, 100)]
    [3.0, 2.71, 2.0, 1.0]
    """
    kind: str = "constant"
    start: float = 1.0
    steps: int = 0

    def __call__(self, step) -> tf.Tensor:
        """The temperature at `step` (an integer, or a tensor): a float32 scalar."""
        if self.kind == "constant":
            return tf.constant(self.start, tf.float32)
        progress = tf.minimum(tf.cast(step, tf.float32) / max(self.steps, 1), 1.0)
        if self.kind == "cosine":
            progress = 0.5 * (1.0 - tf.cos(math.pi * progress))
        return self.start + (1.0 - self.start) * progress


def sample(logits: tf.Tensor, uniform: tf.Tensor, temperature: float | tf.Tensor = 1.0,
           disallowed_ids: tf.Tensor | None = None) -> tf.Tensor:
    """Token ids `[B, P]` (int32) drawn from softmax(logits / temperature).

    Args:
      logits: `[B, P, V]` generator logits at the masked positions.
      uniform: `[B, P]` numbers in [0, 1), one per position.
      temperature: softmax temperature (a number or a scalar tensor); 1.0 samples the
        generator's own distribution.
      disallowed_ids: `[B, P]` ids that must not be drawn (the original tokens, for
        `disallow_correct`), or None.
    """
    batch, positions, vocab = logits.shape
    n = batch * positions
    num_blocks = -(-vocab // BLOCK)
    logits = tf.reshape(tf.cast(logits, tf.float32), [n, vocab])
    top = tf.reduce_max(logits, axis=-1, keepdims=True)                  # [N, 1]
    disallowed = None if disallowed_ids is None else tf.reshape(
        tf.cast(disallowed_ids, tf.int32), [n, 1])

    def weights(values, ids):
        """The unnormalised probabilities exp((logit - max) / temperature) of `values`,
        the logits of `ids`; 0 past the vocabulary and at the disallowed id."""
        keep = ids < vocab
        if disallowed is not None:  # the original token's probability zeroed
            keep &= ids != disallowed
        return tf.where(keep, tf.exp((values - top) / temperature), 0.0)

    # Whole blocks: the logits padded to a multiple of BLOCK (the padding weighs 0).
    padded = tf.pad(logits, [[0, 0], [0, num_blocks * BLOCK - vocab]],
                    constant_values=-float("inf"))
    every_id = tf.range(num_blocks * BLOCK, dtype=tf.int32)[None]          # [1, V']
    block_mass = tf.reduce_sum(tf.reshape(weights(padded, every_id),
                                          [n, num_blocks, BLOCK]), axis=-1)  # [N, blocks]
    block_cdf = tf.math.cumsum(block_mass, axis=-1)
    target = tf.reshape(tf.cast(uniform, tf.float32), [n]) * block_cdf[:, -1]   # [N]

    # The first block whose CDF passes the target, then the first entry inside it.
    block = _first_passing(block_cdf, block_mass, target)               # [N]
    target -= tf.gather(block_cdf, block, batch_dims=1) - tf.gather(block_mass, block,
                                                                     batch_dims=1)
    in_block = block[:, None] * BLOCK + tf.range(BLOCK, dtype=tf.int32)[None]  # [N, 128]
    in_block_logits = tf.gather(logits, tf.minimum(in_block, vocab - 1), batch_dims=1)
    in_block_mass = weights(in_block_logits, in_block)                  # [N, 128]
    entry = _first_passing(tf.math.cumsum(in_block_mass, axis=-1), in_block_mass, target)
    ids = tf.minimum(block * BLOCK + entry, vocab - 1)
    return tf.reshape(ids, [batch, positions])



def log_probability(logits: tf.Tensor, ids: tf.Tensor,
                    temperature: float | tf.Tensor = 1.0,
                    disallowed_ids: tf.Tensor | None = None) -> tf.Tensor:
    """log P(ids) `[B, P]` (float32) under the distribution `sample` draws from with the
    same arguments: softmax(logits / temperature), renormalised without `disallowed_ids`
    where given. Differentiable in `logits` (the adversarial generator's policy gradient).

    >>> logits = tf.math.log(tf.constant([[[0.2, 0.3, 0.5]]]))
    >>> round(float(tf.exp(log_probability(logits, tf.constant([[2]])))[0, 0]), 4)
    0.5
    >>> round(float(tf.exp(log_probability(logits, tf.constant([[2]]),
    ...                                    disallowed_ids=tf.constant([[1]])))[0, 0]), 4)
    0.7143
    """
    ids = tf.cast(ids, tf.int32)
    scaled = tf.cast(logits, tf.float32) / temperature                   # [B, P, V]
    if disallowed_ids is None:
        return tf.gather(tf.nn.log_softmax(scaled), ids, batch_dims=2)   # [B, P]
    # The disallowed logit at −inf: the log-softmax of the others is the renormalised
    # distribution, exact however sure the generator is of the disallowed id (log(1 − P)
    # from a float32 P is 0 once P > 1 − 2⁻²⁴), and nothing reaches that logit, on which
    # the draw does not depend.
    scaled = _set_at(scaled, disallowed_ids, -float("inf"))
    chosen = tf.gather(tf.nn.log_softmax(scaled), ids, batch_dims=2)     # [B, P]
    # Drawing the disallowed id itself is impossible but where every other id has
    # probability 0 (a padding slot's degenerate row): 0 there, never −inf (0 · −inf is
    # NaN in a weighted mean).
    return tf.where(ids == tf.cast(disallowed_ids, tf.int32), 0.0, chosen)


def _set_at(values, ids, value):
    """`values` `[B, P, V]` with `value` at each position's id of `ids` `[B, P]`: a
    scatter, not a `[B, P, V]` one-hot."""
    batch, positions, _ = values.shape
    b, p = tf.meshgrid(tf.range(batch), tf.range(positions), indexing="ij")
    index = tf.stack([b, p, tf.cast(ids, tf.int32)], axis=-1)              # [B, P, 3]
    return tf.tensor_scatter_nd_update(values, index, tf.fill([batch, positions], value))


def _first_passing(cdf, mass, target):
    """`[N]` the first entry of each row whose `cdf` passes `target` (`[N]`) and whose
    `mass` (`[N, K]`, of which `cdf` is the running sum) is positive: the inverse CDF.
    Round-off can put the target below the first step (the chosen block's offset
    subtracted, slightly negative) or at or past the top (a block's entries summed in
    another order than its mass): then the first, or the last, entry of positive mass,
    never one of mass 0 (a disallowed or padded id); the last entry where none has mass
    (a degenerate row).

    >>> cdf = tf.constant([[0.0, 0.5, 1.0]]); mass = tf.constant([[0.0, 0.5, 0.5]])
    >>> [int(_first_passing(cdf, mass, tf.constant([t]))[0]) for t in (-1e-9, 0.5, 1.0)]
    [1, 2, 2]
    """
    size = cdf.shape[-1]
    index = tf.range(size, dtype=tf.int32)[None]
    positive = mass > 0
    first = tf.reduce_min(tf.where((cdf > target[:, None]) & positive, index, size), axis=-1)
    last = tf.reduce_max(tf.where(positive, index, -1), axis=-1)
    return tf.where(first < size, first, tf.where(last >= 0, last, size - 1))


def replace_masked(masked_input_ids: tf.Tensor, positions: tf.Tensor, weights: tf.Tensor,
                   sampled_ids: tf.Tensor) -> tf.Tensor:
    """`masked_input_ids` with the sampled ids written at the masked positions.

    Padding predictions (weight 0, position 0) leave their position unchanged.
    """
    positions = tf.cast(positions, tf.int32)
    current = tf.gather(masked_input_ids, positions, batch_dims=1)      # [B, P]
    updates = tf.where(weights > 0, tf.cast(sampled_ids, masked_input_ids.dtype), current)
    batch, num = positions.shape
    rows = tf.broadcast_to(tf.range(batch)[:, None], [batch, num])
    index = tf.stack([rows, positions], axis=-1)                         # [B, P, 2]
    return tf.tensor_scatter_nd_update(masked_input_ids, index, updates)
