"""`electric`: ELECTRIC, the discriminator trained as an energy-based cloze model by
noise-contrastive estimation (Clark et al. 2020, "Pre-Training Transformers as
Energy-Based Cloze Models"; the original's `electric_objective`).

    input_ids (UNMASKED) ─► two-tower cloze generator ─► cloze_logits [B, S, V]:
        q(x_t | every other token) at every position; cloze loss at the candidates
    at the masked positions: sample from q ─► corrupted_ids; EVERY sampled position is
        noise (is_replaced = 1), even where the sample is the original token
    corrupted_ids ─► discriminator ─► head ─► energies E [B, S]
    disc_logits = E + stop_gradient(log q(corrupted token)) + log(p / (1 − p))
    loss = cloze + disc_weight · sigmoid cross-entropy over every real token

The generator is two encoders of its shape over the same embeddings: one attends left to
right (position t reads 0..t), one right to left (t..S−1). Position t joins the left
tower's state at t − 1 and the right tower's at t + 1, so nothing it is built from has
read token t (`TwoTowerCloze`). Its head is an MLM head (dense, gelu, LayerNorm, the tied
token table, a bias) on those 2·Hg-wide states, at every position.

The energy E(x)_t is the head's output alone; a text's score is −Σ_t E_t over its real
tokens (`token_scores`; the paper's unnormalised log-likelihood), one pass of the
discriminator. After training the discriminator is an ordinary encoder: fine-tuning and
export take it as they take ELECTRA's.

The cloze loss is normalised by the real tokens (like the discriminator's), so it is one
global mean under any number of replicas; the original divides by its candidates (the
real tokens but [CLS] and the [SEP]s: a few percent fewer). Only the joint algorithm
trains it (its generator learns by the cloze loss, not by MLM), and never with
tie=all (two causal towers cannot be the discriminator).

>>> causal_mask(3, "ltr").numpy().tolist()  # query row i reads keys j <= i
[[1, 0, 0], [1, 1, 0], [1, 1, 1]]
>>> round(noise_log_ratio(0.15), 4)  # the prior odds of noise at mask_prob 0.15
-1.7346
"""

import dataclasses
import math

import keras
import tensorflow as tf

from electra_tf.model import context as context_lib
from electra_tf.model import encoder
from electra_tf.model import flops
from electra_tf.model import losses
from electra_tf.model import remat
from electra_tf.model import sampling
from electra_tf.model.objectives import base
from electra_tf.model.objectives import electra

DIRECTIONS = ("ltr", "rtl")  # left to right, right to left (the original's scopes)


def causal_mask(seq_len, direction: str):
    """[S, S] int32, 1 where query i may attend key j: j ≤ i (`ltr`) or j ≥ i (`rtl`)."""
    ones = tf.ones([seq_len, seq_len], tf.int32)
    return (tf.linalg.band_part(ones, -1, 0) if direction == "ltr"
            else tf.linalg.band_part(ones, 0, -1))


class _Masked:
    """A transformer block called with a fixed `attention_mask` too (what
    `remat.call_block` calls: `block(x, padding_mask=..., training=...)`)."""

    def __init__(self, block, attention_mask):
        self.block, self.name, self.attention_mask = block, block.name, attention_mask

    def __call__(self, x, **kwargs):
        return self.block(x, attention_mask=self.attention_mask, **kwargs)


@keras.saving.register_keras_serializable(package="electra_tf")
class CausalEncoder(encoder.Encoder):
    """An `Encoder` whose blocks attend one way only (`direction`: `ltr` or `rtl`), on
    top of the padding mask: [B, S, H], position t having read 0..t or t..S−1."""

    def __init__(self, embeddings, hidden_size: int, num_layers: int, num_heads: int,
                 intermediate_size: int, direction: str = "ltr", **kwargs):
        super().__init__(embeddings, hidden_size, num_layers, num_heads, intermediate_size,
                         **kwargs)
        if direction not in DIRECTIONS:
            raise ValueError(f"`direction` must be one of {DIRECTIONS}. Received: "
                             f"`direction={direction!r}`")
        self.direction = direction

    # === Forward ===
    def call(self, inputs, training=None):
        x = self.embeddings(inputs["token_ids"], inputs["segment_ids"], training=training)
        if self.projection is not None:
            x = self.projection(x)                               # [B, S, E] → [B, S, H]
        padding_mask = keras.ops.cast(inputs["padding_mask"], "bool")
        shape = tf.shape(inputs["token_ids"])
        attention_mask = tf.broadcast_to(causal_mask(shape[1], self.direction)[None],
                                         [shape[0], shape[1], shape[1]])  # [B, S, S]
        for block in self.blocks:
            x = remat.call_block(_Masked(block, attention_mask), x, padding_mask, training)
        return x                                                 # [B, S, H]

    # === Config ===
    def get_config(self):
        return {**super().get_config(), "direction": self.direction}


@keras.saving.register_keras_serializable(package="electra_tf")
class TwoTowerCloze(keras.layers.Layer):
    """The cloze generator: `ltr` and `rtl` `CausalEncoder`s over one input; position t
    gets [ltr state at t − 1, rtl state at t + 1]: [B, S, 2·Hg], built from every token
    but t. (Rows 0 and S − 1 take the far end's state, which has read everything: they
    hold [CLS] and [SEP] or padding, never a cloze candidate.)"""

    def __init__(self, ltr: CausalEncoder, rtl: CausalEncoder, **kwargs):
        super().__init__(**kwargs)
        if ltr.embeddings is not rtl.embeddings:
            raise ValueError("The two towers read one `Embeddings` object. Received two.")
        # === Layers ===
        self.ltr = ltr
        self.rtl = rtl

    @property
    def embeddings(self) -> encoder.Embeddings:
        return self.ltr.embeddings

    def build(self, input_shape):
        self.ltr.build(input_shape)
        self.rtl.build(input_shape)
        self.built = True

    # === Forward ===
    def call(self, inputs, training=None):
        left = self.ltr(inputs, training=training)               # [B, S, Hg]: read 0..t
        # The towers share their embeddings (and their dropout's stream): the second pass
        # folds a salt into the step's seed, or it would draw the first one's masks.
        active = context_lib.active()
        with context_lib.entered(None if active is None else active.salted(2)):
            right = self.rtl(inputs, training=training)          # [B, S, Hg]: read t..S−1
        return tf.concat([tf.roll(left, 1, axis=1), tf.roll(right, -1, axis=1)], -1)

    # === Config ===
    def get_config(self):
        return {**super().get_config(), "ltr": keras.layers.serialize(self.ltr),
                "rtl": keras.layers.serialize(self.rtl)}

    @classmethod
    def from_config(cls, config):
        return cls(**dict(config, ltr=keras.layers.deserialize(config["ltr"]),
                          rtl=keras.layers.deserialize(config["rtl"])))


def noise_log_ratio(mask_prob: float) -> float:
    """log(p / (1 − p)): the NCE prior odds of noise, p the share of tokens sampled."""
    return math.log(mask_prob / (1.0 - mask_prob))


class Electric(electra.Electra):
    """ELECTRA's discriminator and head (`make_head`, `detection`: its probability of
    noise, from the whole logit), trained against the cloze model's noise."""

    name = "electric"
    loss_names = ("cloze_loss", "rtd_loss")
    names = ("loss", "cloze_loss", "rtd_loss", "cloze_accuracy",
             "sampled_masked_lm_accuracy", "disc_accuracy", "disc_precision", "disc_recall",
             "disc_auc", "replaced_fraction", "grad_norm")
    log_fields = (("cloze", "cloze_loss", 4), ("rtd", "rtd_loss", 4),
                  ("disc_auc", "disc_auc", 3))
    vocab_logits = ("cloze_logits",)
    step_only = base.Objective.step_only + ("energies", "log_q")

    def refusal(self, tie, algorithm):
        if tie == "all":
            return ("config.model.tie='all' would make the generator the discriminator, "
                    "which cannot attend causally; use tie=embeddings (the original's) or none")
        if algorithm != "joint":
            return (f"config.train.algorithm={algorithm!r}: its generator learns by the cloze "
                    "loss, trained jointly; use algorithm joint")
        return None

    # === Model ===
    def make_generator(self, model, embeddings):
        size = model.shape.generator

        def tower(direction):
            return CausalEncoder(embeddings, size.hidden_size, size.num_layers,
                                 size.num_heads, size.intermediate_size, direction=direction,
                                 dropout=model.dropout,
                                 attention_dropout=model.attention_dropout,
                                 dtype=model.dtype_policy, name=f"generator_{direction}")
        return TwoTowerCloze(tower("ltr"), tower("rtl"), dtype=model.dtype_policy,
                             name="generator")

    def forward(self, model, batch, context):
        input_ids = batch["input_ids"]
        positions = batch["masked_lm_positions"]
        # q(· | every other token) at every position, from the UNMASKED input.
        cloze = model.generator_pass(input_ids, batch, context)
        cloze_logits = tf.cast(model.generator_head(
            cloze, mask_positions=base.every_position(input_ids),
            vocabulary_multiple=context.vocabulary_multiple), tf.float32)       # [B, S, V]
        outputs = model.sample(batch, tf.gather(cloze_logits, tf.cast(positions, tf.int32),
                                                batch_dims=1), context)
        # NCE: a sampled token is noise whatever it is, the original token included.
        sampled = sampling.replace_masked(tf.zeros_like(input_ids), positions,
                                          batch["masked_lm_weights"],
                                          tf.ones_like(outputs["sampled_ids"]))  # [B, S]
        outputs["is_replaced"] = tf.cast(sampled, tf.float32) * tf.cast(
            batch["input_mask"], tf.float32)
        sequence = model.encode(outputs["corrupted_ids"], batch, context)
        energies = tf.cast(model.discriminator_head(sequence), tf.float32)      # [B, S]
        # log q of the token each position now holds: the noise model's term, a constant
        # to the discriminator (the cloze loss alone trains the generator).
        log_q = tf.stop_gradient(-losses.mlm_token_losses(cloze_logits,
                                                          outputs["corrupted_ids"]))
        outputs.update(cloze_logits=cloze_logits, energies=energies, log_q=log_q,
                       disc_logits=energies + log_q + noise_log_ratio(model.mask_prob))
        return outputs

    # === Loss ===
    def loss(self, outputs, batch, num_masked=None, num_tokens=None):
        del num_masked
        token_mask = tf.cast(batch["input_mask"], tf.float32)             # [B, S]
        if num_tokens is None:
            num_tokens = tf.reduce_sum(token_mask)
        cloze_tokens = losses.mlm_token_losses(outputs["cloze_logits"], batch["input_ids"])
        cloze = losses.mean(cloze_tokens, base.candidates(batch), num_tokens)
        rtd_tokens = losses.rtd_token_losses(outputs["disc_logits"], outputs["is_replaced"])
        rtd = losses.mean(rtd_tokens, token_mask, num_tokens)
        return cloze + self.disc_weight * rtd, {
            "cloze_loss": cloze, "rtd_loss": rtd, "cloze_token_losses": cloze_tokens,
            "rtd_token_losses": rtd_tokens}

    def total(self, values):
        return values["cloze_loss"] + self.disc_weight * values["rtd_loss"]

    # === Metrics ===
    def metric_inputs(self, batch, outputs, values):
        token_mask = tf.cast(batch["input_mask"], tf.float32)
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)
        predicted = tf.cast(outputs["disc_logits"] > 0, tf.float32)
        candidates = base.candidates(batch)
        return {
            # As the loss: the candidates' cross-entropies over the real tokens.
            "cloze_loss": (values["cloze_token_losses"] * candidates, token_mask),
            "cloze_accuracy": (base.agree(outputs["cloze_predictions"], batch["input_ids"]),
                               candidates),
            "sampled_masked_lm_accuracy": (base.agree(outputs["sampled_ids"],
                                                      batch["masked_lm_ids"]), weights),
            "rtd_loss": (values["rtd_token_losses"], token_mask),
            "disc_accuracy": (base.agree(predicted, outputs["is_replaced"]), token_mask),
            "replaced_fraction": (outputs["is_replaced"], token_mask)}

    # === Serving, FLOPs ===
    def serve(self, model, sequence, input_mask):
        """The energies (the head's output; low: the token fits its context)."""
        energies = tf.cast(model.discriminator_head(sequence), tf.float32)
        return {"energies": energies * tf.cast(input_mask, tf.float32)}

    def token_scores(self, model, sequence):
        """−E_t: the unnormalised log-likelihood of each token in its context."""
        return -tf.cast(model.discriminator_head(sequence), tf.float32)

    def training_flops(self, shape, seq_len, num_predictions, vocab_size,
                       frozen_generator=False):
        del num_predictions  # the cloze head runs at every position
        d, g = shape.discriminator, shape.generator
        # Two towers, and the head on their joined [2·Hg] states at all S positions.
        cloze = 2 * flops.encoder_flops(g, seq_len) + flops.mlm_head_flops(
            dataclasses.replace(g, hidden_size=2 * g.hidden_size), seq_len, vocab_size)
        return (3 * (flops.encoder_flops(d, seq_len) + flops.rtd_head_flops(d, seq_len))
                + (1 if frozen_generator else 3) * cloze)
