"""Dynamic masking of a batch, with tf.text's masked-LM ops, to static shapes.

A fresh 15% of the tokens of each example is masked every time the example is read.
Selection is `tf_text.RandomItemSelector` (never `[CLS]`, `[SEP]` or padding), the new
values come from `tf_text.MaskValuesChooser`, and `tf_text.mask_language_model` applies
them; the ragged results are padded to `[batch, max_predictions]` so that every shape
is static (TPUs and XLA need that).

With a `seed` (a [2] integer tensor), every random draw is stateless: the masks are a
pure function of the seed and the batch, so a resumed run masks its batches exactly as an
uninterrupted one did (the pipeline derives one seed per batch from the run's seed and the
batch's index). Without one, tf.text's stateful random ops are used.

>>> import tensorflow as tf
>>> batch = {"input_ids": tf.constant([[2, 7, 8, 9, 3, 0]]),
...          "input_mask": tf.constant([[1, 1, 1, 1, 1, 0]]),
...          "segment_ids": tf.constant([[0, 0, 0, 0, 0, 0]])}
>>> config = MaskingConfig(vocab_size=10, mask_id=4, special_ids=(0, 2, 3),
...                        max_predictions=2)
>>> out = mask_batch(batch, config)
>>> out["masked_lm_positions"].shape, out["masked_lm_weights"].numpy().tolist()
(TensorShape([1, 2]), [[1.0, 0.0]])
"""

import dataclasses

import tensorflow as tf
import tensorflow_text as text


def max_predictions_per_seq(mask_prob: float, max_seq_length: int) -> int:
    """The original ELECTRA's bound on masked positions per sequence (19 for 0.15, 128)."""
    return int((mask_prob + 0.005) * max_seq_length)


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """How to mask. The defaults are the original ELECTRA's.

    mask_token_rate/random_token_rate: of the selected tokens, the share replaced by
    `[MASK]` and by a random token; the rest stay unchanged. ELECTRA: 0.85/0.0;
    BERT: 0.8/0.1.
    """

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]
    max_predictions: int
    mask_prob: float = 0.15
    mask_token_rate: float = 0.85
    random_token_rate: float = 0.0

    def __post_init__(self):
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"`mask_prob` must be in (0, 1). Received: "
                             f"`mask_prob={self.mask_prob}`")
        if self.max_predictions < 1:
            raise ValueError(f"`max_predictions` must be at least 1. Received: "
                             f"`max_predictions={self.max_predictions}`")
        rates = (self.mask_token_rate, self.random_token_rate)
        if min(rates) < 0 or sum(rates) > 1:
            raise ValueError(f"`mask_token_rate` and `random_token_rate` must be >= 0 and "
                             f"sum to at most 1. Received: `mask_token_rate="
                             f"{self.mask_token_rate}`, `random_token_rate="
                             f"{self.random_token_rate}`")


class BatchRandomSelector(text.RandomItemSelector):
    """`tf_text.RandomItemSelector` with its selection computed for all rows at once.

    Same rule: in each row, `ceil(selection_rate * selectable)` items, at most
    `max_selections`, chosen uniformly among the selectable ones. tf.text's own
    selector shuffles each row in a `map_fn`; ranking one random matrix instead masks
    1.4-1.9x as many examples per second (`tools/benchmark.py --mode=input`).
    With a `seed` ([2] integers) the draw is stateless.
    """

    def __init__(self, *args, seed=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._seed = seed

    def get_selection_mask(self, input_ids, axis=1):
        if axis != 1 or input_ids.ragged_rank != 1:
            raise ValueError(f"BatchRandomSelector selects tokens of [batch, (tokens)] ids. "
                             f"Received: `axis={axis}`, `ragged_rank={input_ids.ragged_rank}`")
        selectable = self.get_selectable(input_ids, axis).to_tensor()  # [B, L] bool
        num_selectable = tf.reduce_sum(tf.cast(selectable, tf.float32), axis=1)
        # The epsilon keeps float error from rounding up: in float32, 100 × 0.15 is
        # 15.000001, whose ceil (16, what tf.text's selector picks) is one too many.
        num_to_select = tf.minimum(
            tf.math.ceil(num_selectable * self.selection_rate - 1e-4),
            float(self.max_selections_per_batch))
        # A random key per item, above every selectable key for the unselectable ones;
        # an item is chosen when its key ranks among the row's first `num_to_select`.
        keys = tf.where(selectable, _uniform(tf.shape(selectable), self._seed), 2.0)
        ranks = tf.argsort(tf.argsort(keys, axis=1), axis=1)  # [B, L]
        chosen = tf.cast(ranks, tf.float32) < num_to_select[:, None]
        return tf.RaggedTensor.from_tensor(chosen, lengths=input_ids.row_lengths())


class StatelessMaskValuesChooser(text.MaskValuesChooser):
    """`tf_text.MaskValuesChooser` whose draws are stateless functions of `seed`.

    The same rule as tf.text's: one uniform draw `u` per selected item; `u <
    mask_token_rate` puts `[MASK]`, `mask_token_rate <= u < mask_token_rate +
    random_token_rate` a uniformly random id, anything else keeps the item.
    """

    def __init__(self, vocab_size, mask_token, seed, mask_token_rate=0.8,
                 random_token_rate=0.1):
        super().__init__(vocab_size, mask_token, mask_token_rate=mask_token_rate,
                         random_token_rate=random_token_rate)
        self._seed = seed
        self._rates = (mask_token_rate, mask_token_rate + random_token_rate)

    def get_mask_values(self, masked_lm_ids):
        ids = masked_lm_ids.flat_values
        draw, random_ids = tf.unstack(_uniform(tf.stack([2, tf.size(ids)]), self._seed))
        random_ids = tf.cast(tf.minimum(random_ids * self.vocab_size, self.vocab_size - 1),
                             ids.dtype)
        low, high = self._rates
        values = tf.where(draw < low, tf.cast(self.mask_token, ids.dtype),
                          tf.where(draw < high, random_ids, ids))
        return masked_lm_ids.with_flat_values(values)


def _uniform(shape, seed):
    """Uniform [0, 1) floats: stateless with a `seed`, else tf.random's stateful op."""
    if seed is None:
        return tf.random.uniform(shape)
    return tf.random.stateless_uniform(shape, seed=seed)


def mask_batch(batch: dict[str, tf.Tensor], config: MaskingConfig,
               selector_class=BatchRandomSelector, seed=None) -> dict[str, tf.Tensor]:
    """Adds `masked_input_ids` [B, S] and `masked_lm_{positions,ids,weights}` [B, P].

    `batch` holds `input_ids`, `input_mask`, `segment_ids`, each int32 [B, S] with a
    static shape; the real tokens of a row come first (input_mask 1), then padding.
    `selector_class` is any `tf_text.RandomItemSelector` (the benchmark compares them).
    `seed`: a [2] integer tensor that makes every draw stateless (see the module
    docstring); it needs `BatchRandomSelector` (or a subclass).
    """
    input_ids = batch["input_ids"]
    batch_size, seq_length = input_ids.shape
    num_predictions = config.max_predictions

    lengths = tf.reduce_sum(batch["input_mask"], axis=1)
    tokens = tf.RaggedTensor.from_tensor(input_ids, lengths=lengths)  # [B, (len)]
    selector_args = dict(
        max_selections_per_batch=num_predictions,  # a per-row limit, despite the name
        selection_rate=config.mask_prob,
        unselectable_ids=list(config.special_ids))
    rates = dict(mask_token_rate=config.mask_token_rate,
                 random_token_rate=config.random_token_rate)
    if seed is None:
        selector = selector_class(**selector_args)
        chooser = text.MaskValuesChooser(config.vocab_size, config.mask_id, **rates)
    else:
        if not issubclass(selector_class, BatchRandomSelector):
            raise ValueError(f"A `seed` needs a BatchRandomSelector. Received: "
                             f"`selector_class={selector_class.__name__}`")
        seed = tf.convert_to_tensor(seed)
        selector = selector_class(**selector_args,
                                  seed=tf.random.experimental.stateless_fold_in(seed, 1))
        chooser = StatelessMaskValuesChooser(
            config.vocab_size, config.mask_id,
            tf.random.experimental.stateless_fold_in(seed, 2), **rates)
    masked, positions, labels = text.mask_language_model(tokens, selector, chooser)

    num_masked = positions.row_lengths()  # [B], at most num_predictions
    return {
        **batch,
        # Padding keeps its original ids, whatever the pad id of the vocab is.
        "masked_input_ids": tf.where(
            batch["input_mask"] > 0,
            masked.to_tensor(shape=[batch_size, seq_length]), input_ids),
        "masked_lm_positions": tf.cast(
            positions.to_tensor(shape=[batch_size, num_predictions]), tf.int32),
        "masked_lm_ids": labels.to_tensor(shape=[batch_size, num_predictions]),
        "masked_lm_weights": tf.sequence_mask(num_masked, num_predictions, tf.float32),
    }
