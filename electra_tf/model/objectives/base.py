"""What every pre-training objective is: its forward pass, its loss, its metrics, its
serving head and its FLOPs, behind one base class (`Objective`).

The pre-trainer (`model/pretrainer.py`) builds the layers an objective asks for
(`uses_generator`, `make_head`); a pass over a batch is `Objective.forward`, which runs
the model's passes in the step's context (`model/context.py`); the
train step calls `loss`, `compact` and, through `training/metrics.py`, `metric_inputs`
and `detection`; export calls `serve`; `objectives.training_flops` calls
`training_flops`. None of them names an objective.

The pieces several objectives share are here: the generator's metrics and the serving
output of a masked-LM head.
"""

import tensorflow as tf

from electra_tf.model import flops

# configs/electra.py's config.model.disc_weight: the weight of an objective made without
# a config (only its class facts read: FLOPs, metric names, doctests).
DISC_WEIGHT = 50.0


class Objective:
    """One pre-training objective: a member of `objectives.OBJECTIVES`, made from the
    run's config (`Member(config)`, `model_config.objective`).

    A member sets `name` and the class attributes below, and implements the hooks marked
    *abstract* (here they raise `NotImplementedError`): `make_head`, `forward`, `loss`,
    `total`, `metric_inputs`, `serve`, `training_flops`; `detection` where it `detects`,
    `token_scores` where it `scores`. The other hooks have defaults a member may keep:
    `refusal` refuses nothing, `make_generator` leaves the pre-trainer's own generator,
    `compact` drops `vocab_logits` and `step_only` outputs."""

    name: str = ""
    uses_generator: bool = True   # a generator samples replacements for masked positions
    detects: bool = False         # the main head is the RTD head: precision/recall/AUC, the
                                  # predictions view, conversion to the original's layout
    scores: bool = False          # `token_scores` in one pass (else a text's score is the
                                  # pseudo-log-likelihood: one pass per token)
    loss_names: tuple = ()        # the scalar losses of `loss`'s values (checked finite)
    names: tuple = ()             # every metric, in log/TensorBoard order
    log_fields: tuple = ()        # (label, metric, decimals) of the log line after `loss`
    vocab_logits: tuple = ()      # outputs of [B, P|S, V] logits: never leave the step
    step_only: tuple = ("generator_hidden", "temperature")  # outputs the metrics never
                                                            # read: dropped

    def __init__(self, config=None):
        """`config`: the run's ConfigDict, whose config.model.disc_weight weighs the
        discriminator's loss; None where only the class's facts are read (`DISC_WEIGHT`)."""
        self.disc_weight = DISC_WEIGHT if config is None else config.model.disc_weight

    # === Model ===
    def refusal(self, tie: str, algorithm: str) -> str | None:
        """Why this objective cannot run with `config.model.tie` and
        `config.train.algorithm` (a clause of a one-line error), or None (the default:
        it runs with any)."""
        del tie, algorithm
        return None

    def make_generator(self, model, embeddings):
        """The generator encoder on `embeddings`, or None for the pre-trainer's own
        (one encoder of `model.shape.generator`)."""
        del model, embeddings
        return None

    def make_head(self, model):
        """Abstract: the head on the main (discriminator-shaped) encoder of `model`."""
        raise NotImplementedError

    def forward(self, model, batch, context) -> dict:
        """The outputs of one pass of `model` over `batch` (`model.generate` /
        `model.encode`) in `context` (a `model.context.StepContext`: `training`, the
        sampling noise and temperature, the dropout seed and block, the recomputation
        mode); the trainer, evaluation and the predictions view call it."""
        raise NotImplementedError

    # === Loss ===
    def loss(self, outputs, batch, num_masked=None, num_tokens=None):
        """Abstract: (total loss, values): the scalars of `loss_names` and the per-token
        losses `metric_inputs` reads. The normalizers default to this batch's counts."""
        raise NotImplementedError

    def total(self, values):
        """Abstract: the total loss from the scalar losses (tensors or floats)."""
        raise NotImplementedError

    def compact(self, outputs) -> dict:
        """What the metrics read: vocabulary logits replaced by their argmax
        (`mlm_logits` → `mlm_predictions`) and hidden states dropped, never returned
        from the compiled step."""
        small = {k: v for k, v in outputs.items()
                 if k not in self.vocab_logits and k not in self.step_only}
        for key in self.vocab_logits:
            small[key.replace("_logits", "_predictions")] = argmax(outputs[key])
        return small

    # === Metrics ===
    def metric_inputs(self, batch, outputs, values) -> dict:
        """Abstract: {metric: (values, weights)} of the token-weighted means, for one
        batch."""
        raise NotImplementedError

    def detection(self, batch, outputs):
        """Abstract where `detects`: (labels, probability, weights) for
        precision/recall/AUC."""
        raise NotImplementedError

    # === Serving, FLOPs ===
    def serve(self, model, sequence, input_mask) -> dict:
        """Abstract: the head's serving outputs for the main encoder's `sequence`
        [B, S, H]."""
        raise NotImplementedError

    def token_scores(self, model, sequence):
        """Abstract where `scores`: how well each token fits its context, [B, S] float32,
        read from one pass of the main encoder (`sequence` [B, S, H]); a text's score is
        their sum over its tokens but [CLS] and [SEP] (`candidates`; the `score`
        signature)."""
        raise NotImplementedError

    def training_flops(self, shape, seq_len: int, num_predictions: int,
                       vocab_size: int, frozen_generator: bool = False) -> int:
        """Abstract: forward + backward (3 × forward) FLOPs per sequence
        (`model/flops.py`); a frozen generator's forward only
        (`generator_training_flops`)."""
        raise NotImplementedError


def agree(a, b):
    return tf.cast(tf.equal(tf.cast(a, tf.int32), tf.cast(b, tf.int32)), tf.float32)


def generator_metric_inputs(batch, outputs, values) -> dict:
    """The generator's metrics: its MLM loss and accuracy, its samples' accuracy, and the
    share of real tokens its samples changed."""
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)         # [B, P]
    labels = batch["masked_lm_ids"]
    return {
        "mlm_loss": (values["mlm_token_losses"], weights),
        "masked_lm_accuracy": (agree(outputs["mlm_predictions"], labels), weights),
        "sampled_masked_lm_accuracy": (agree(outputs["sampled_ids"], labels), weights),
        "replaced_fraction": (outputs["is_replaced"], tf.cast(batch["input_mask"],
                                                              tf.float32)),
    }


def candidates(batch):
    """[B, S] float32: the tokens a language model predicts, the real tokens but [CLS]
    (row 0) and each segment's closing [SEP] (the last token of a segment), read from
    the packing ([CLS] A [SEP] B [SEP], segment ids 0 then 1) without the vocab."""
    mask = tf.cast(batch["input_mask"], tf.int32)
    segments = tf.cast(batch["segment_ids"], tf.int32)
    next_mask = tf.pad(mask[:, 1:], [[0, 0], [0, 1]])
    next_segment = tf.pad(segments[:, 1:], [[0, 0], [0, 1]], constant_values=-1)
    closes = tf.equal(next_mask, 0) | tf.not_equal(next_segment, segments)
    first = tf.equal(every_position(mask), 0)
    return tf.cast(tf.equal(mask, 1) & ~closes & ~first, tf.float32)


def argmax(logits):
    """`tf.argmax(logits, -1)` as int32 (the first index of the largest logit), as two
    plain reductions: the maximum, then the least index that holds it. XLA:CPU runs
    argmax's (value, index) reduction over the vocabulary as one of a step's slowest
    passes (16 ms of the ~2.4-s Small step on 2 cores); these two fuse with what reads
    the logits. Only a row with a NaN differs (a valid id, not argmax's).

    >>> argmax(tf.constant([[1.0, 3.0, 3.0, 2.0]])).numpy().tolist()
    [1]
    """
    vocab = logits.shape[-1]
    largest = tf.reduce_max(logits, axis=-1, keepdims=True)
    first = tf.reduce_min(tf.where(logits == largest, tf.range(vocab, dtype=tf.int32), vocab),
                          axis=-1)
    return tf.minimum(first, vocab - 1)


def every_position(ids):
    """[B, S] positions 0..S-1 of every row of `ids` [B, S] (an MLM head at all tokens)."""
    return tf.broadcast_to(tf.range(tf.shape(ids)[1], dtype=tf.int32)[None], tf.shape(ids))


def serve_lm(head, sequence, input_mask) -> dict:
    """An MLM head's serving output: the most likely token at every position (fill-mask),
    `predicted_ids` [B, S] int32 (0 at padding)."""
    logits = head(sequence, mask_positions=every_position(input_mask))    # [B, S, V]
    ids = tf.argmax(logits, -1, output_type=tf.int32)
    return {"predicted_ids": ids * tf.cast(input_mask, tf.int32)}


def generator_training_flops(shape, seq_len, num_predictions, vocab_size,
                             frozen: bool = False) -> int:
    """The generator's share of a step: forward + backward (3 × forward), or its forward
    alone when it is `frozen` (config.train.generator=frozen: no backward pass)."""
    passes = 1 if frozen else 3
    return passes * flops.generator_flops(shape.generator, seq_len, num_predictions,
                                          vocab_size)
