"""Dynamic masking of a batch, with tf.text's masked-LM ops, to static shapes.

A fresh 15% of the tokens of each example is masked every time the example is read.
Selection is `tf_text.RandomItemSelector` (never `[CLS]`, `[SEP]` or padding), the new
values come from `tf_text.MaskValuesChooser`, and `tf_text.mask_language_model` applies
them; the ragged results are padded to `[batch, max_predictions]` so that every shape
is static (TPUs and XLA need that).

With `whole_word_masking`, the items selected are whole words: a token that is not a
`##` continuation piece, with the `##` pieces after it (`[CLS]`, `[SEP]` and a piece
right after them are words of their own). Words are drawn in a random order and taken
while the budget allows (ceil(15% of the selectable tokens), at most `max_predictions`);
a word longer than what is left is skipped, never partly masked (`WholeWordSelector`).
The 85/15 choice is then made per token, as without it. Text in Chinese and Japanese is
split into one token per CJK character, so each character is a word of its own: masking
Chinese words needs a word segmenter, which is not built in.

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

If 8 is a `##` piece, "7 ##8" is one word, longer than the budget of one token:

>>> words = dataclasses.replace(config, whole_word_masking=True, continuation_ids=(8,))
>>> mask_batch(batch, words)["masked_lm_positions"].numpy().tolist()
[[3, 0]]
"""

import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_text as text

from electra_tf import config_check


# The original ELECTRA's bound on masked positions per sequence (19 for 0.15, 128); its
# owner needs no TensorFlow, so that a config that gives none is refused at once.
max_predictions_per_seq = config_check.max_predictions_per_seq


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """How to mask. The defaults are the original ELECTRA's.

    mask_token_rate/random_token_rate: of the selected tokens, the share replaced by
    `[MASK]` and by a random token; the rest stay unchanged. ELECTRA: 0.85/0.0;
    BERT: 0.8/0.1.
    whole_word_masking: select whole words (see the module docstring); a word is a
    token not in `continuation_ids` (the vocab's `##` pieces) and the pieces after it.
    """

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]
    max_predictions: int
    mask_prob: float = 0.15
    mask_token_rate: float = 0.85
    random_token_rate: float = 0.0
    whole_word_masking: bool = False
    continuation_ids: tuple[int, ...] = ()

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
        num_to_select = self._budget(
            tf.reduce_sum(tf.cast(selectable, tf.float32), axis=1))
        # An item is chosen when it is among the row's first `num_to_select` in a random
        # order of the selectable items.
        ranks = tf.argsort(self._random_order(selectable), axis=1)  # [B, L]
        chosen = tf.cast(ranks, tf.float32) < num_to_select[:, None]
        return tf.RaggedTensor.from_tensor(chosen, lengths=input_ids.row_lengths())

    def _budget(self, num_selectable):
        """How many tokens to select in each row, float32 [B], of `num_selectable` [B]."""
        # The epsilon keeps float error from rounding up: in float32, 100 × 0.15 is
        # 15.000001, whose ceil (16, what tf.text's selector picks) is one too many.
        return tf.minimum(tf.math.ceil(num_selectable * self.selection_rate - 1e-4),
                          float(self.max_selections_per_batch))

    def _random_order(self, selectable):
        """Each row's items [B, L] in a random order, the unselectable ones last."""
        # A random key per item, above every selectable key for the unselectable ones.
        keys = tf.where(selectable, _uniform(tf.shape(selectable), self._seed), 2.0)
        return tf.argsort(keys, axis=1)


class WholeWordSelector(BatchRandomSelector):
    """Selects whole words of `[batch, (words), (pieces)]` ids, the budget in tokens.

    The budget is `BatchRandomSelector`'s, counted in tokens: `ceil(selection_rate *
    selectable tokens)`, at most `max_selections`. The selectable words of a row are
    taken in a random order while they fit what is left of it; a word longer than that
    is skipped (as BERT's whole-word masking does), so no word is ever partly selected
    and the selection never exceeds the budget. With a `seed` the draw is stateless.
    """

    def get_selection_mask(self, input_ids, axis=1):
        if axis != 1 or input_ids.ragged_rank != 2:
            raise ValueError(f"WholeWordSelector selects words of [batch, (words), (pieces)]"
                             f" ids. Received: `axis={axis}`, "
                             f"`ragged_rank={input_ids.ragged_rank}`")
        selectable = self.get_selectable(input_ids, axis).to_tensor()  # [B, W] bool
        lengths = tf.cast(input_ids.row_lengths(axis=2).to_tensor(), tf.int32)  # [B, W]
        remaining = tf.cast(self._budget(tf.reduce_sum(
            tf.cast(tf.where(selectable, lengths, 0), tf.float32), axis=1)), tf.int32)

        # Words in a random order: what fits of it, in that order (the greedy rule).
        order = self._random_order(selectable)  # [B, W]
        lengths = tf.gather(lengths, order, batch_dims=1)
        candidates = tf.gather(selectable, order, batch_dims=1)
        taken = tf.zeros_like(candidates)

        def fitting(candidates, remaining):
            return candidates & (lengths <= remaining[:, None])

        def take(taken, candidates, remaining):
            # Each round takes the longest run of candidates that fits as a whole; the
            # candidate after it is longer than what is left and drops out, as does every
            # other one that no longer fits. A round takes at least one word per row
            # that has a candidate, so there are at most `max_selections` rounds.
            total = tf.cumsum(tf.where(candidates, lengths, 0), axis=1)
            fits = candidates & (total <= remaining[:, None])
            remaining -= tf.reduce_sum(tf.where(fits, lengths, 0), axis=1)
            return taken | fits, fitting(candidates & ~fits, remaining), remaining

        taken, _, _ = tf.while_loop(
            lambda taken, candidates, remaining: tf.reduce_any(candidates), take,
            (taken, fitting(candidates, remaining), remaining))
        chosen = tf.gather(taken, tf.argsort(order, axis=1), batch_dims=1)  # word order
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
    return tf.random.stateless_uniform(shape, seed=seed, alg="philox")


def _group_words(tokens, input_ids, config: MaskingConfig) -> tf.RaggedTensor:
    """`tokens` [B, (len)] grouped by word: [B, (words), (pieces)]. A word starts at
    each token but a `##` piece, and at a piece first in its row or after a special
    token; a special token is a word of its own."""
    def is_one_of(ids):  # [B, S] bool: input_ids among `ids`
        table = np.zeros([config.vocab_size], bool)
        table[list(ids)] = True
        return tf.gather(tf.constant(table), input_ids)

    special = is_one_of(config.special_ids)
    after_special = tf.pad(special[:, :-1], [[0, 0], [1, 0]], constant_values=True)
    starts = special | after_special | ~is_one_of(config.continuation_ids)
    starts = tf.RaggedTensor.from_tensor(starts, lengths=tokens.row_lengths())
    pieces = tf.RaggedTensor.from_row_starts(
        tokens.values, tf.where(starts.values)[:, 0])  # [words in the batch, (pieces)]
    return tf.RaggedTensor.from_row_lengths(
        pieces, tf.reduce_sum(tf.cast(starts, tf.int64), axis=1))


def mask_batch(batch: dict[str, tf.Tensor], config: MaskingConfig,
               selector_class=None, seed=None) -> dict[str, tf.Tensor]:
    """Adds `masked_input_ids` [B, S] and `masked_lm_{positions,ids,weights}` [B, P].

    `batch` holds `input_ids`, `input_mask`, `segment_ids`, each int32 [B, S] with a
    static shape; the real tokens of a row come first (input_mask 1), then padding.
    `selector_class` is any `tf_text.RandomItemSelector` (the benchmark compares them);
    None: `WholeWordSelector` under `config.whole_word_masking`, else
    `BatchRandomSelector`. `seed`: a [2] integer tensor that makes every draw stateless
    (see the module docstring); it needs `BatchRandomSelector` (or a subclass).
    """
    input_ids = batch["input_ids"]
    batch_size, seq_length = input_ids.shape
    num_predictions = config.max_predictions

    lengths = tf.reduce_sum(batch["input_mask"], axis=1)
    tokens = tf.RaggedTensor.from_tensor(input_ids, lengths=lengths)  # [B, (len)]
    if config.whole_word_masking:
        # tf.text selects the items of axis 1 and masks all their pieces.
        tokens = _group_words(tokens, input_ids, config)  # [B, (words), (pieces)]
    if selector_class is None:
        selector_class = (WholeWordSelector if config.whole_word_masking
                          else BatchRandomSelector)
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
                                  seed=tf.random.experimental.stateless_fold_in(
                                      seed, 1, alg="philox"))
        chooser = StatelessMaskValuesChooser(
            config.vocab_size, config.mask_id,
            tf.random.experimental.stateless_fold_in(seed, 2, alg="philox"), **rates)
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
