"""The attention core (scores → masked softmax → dropout → ·V), written for few passes
over the `[B, heads, S, S]` tensors.

Keras' `MultiHeadAttention` core makes five passes over them in the forward pass (the
mask's select and the row max, the exponential, the row sum, the division, the dropout)
and two more in the backward pass, and keeps both the probabilities and the dropped
probabilities for it. `core` computes the same function as FlashAttention's
arithmetic does (Dao et al., 2022), in plain ops that XLA fuses:
- forward: the row max `m` of the masked scores, then `A = keep · exp(x - m)` and its
  row sum `l` in one pass; the context is `(A · V) / ((1 - rate) · l)`: the softmax's
  normalisation and the dropout's scale move from `[B, heads, S, S]` to the context's
  `[B, S, heads, head]`;
- backward (`tf.custom_gradient`): the probabilities are recomputed from the kept scores
  (`exp(x - m) / l`, fused into their consumers), the dropout mask is redrawn from the
  forward's seed (`dropout.HashDropout.keep_mask`), and the softmax's row term
  `Σ_s P·dP` is `Σ_d dO · O` on the context (`[B, S, heads, head]`), so the gradient of
  the scores is one elementwise pass.
It keeps the scores (one `[B, heads, S, S]` tensor, not two) and the row statistics.

Forward values equal Keras' up to float rounding (the division comes after the ·V);
the dropout masks are the same elements (the mask's index runs over the same
`[B, heads, S, S]` layout). A row whose keys are all masked gives a zero context, as
Keras' masked softmax does. The softmax statistics are float32 under a bfloat16
policy (the matmuls stay bfloat16).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> q, k, v = (rng.normal(size=(1, 3, 2, 4)).astype("float32") for _ in range(3))
>>> mask = np.array([[[True, True, False]] * 3])
>>> out = core(q, k, v, mask, scale=0.5)                     # [1, 3, 2, 4]
>>> scores = np.einsum("btnd,bsnd->bnts", q, k) * 0.5 - 1e9 * ~mask[:, None]
>>> probabilities = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
>>> bool(np.allclose(out, np.einsum("bnts,bsnd->btnd", probabilities, v), atol=1e-6))
True
"""

import tensorflow as tf

# Projected [B, S, heads, head] tensors. Keras' MultiHeadAttention writes the scores
# key first ("aecd,abcd->acbe"): TF's einsum then multiplies K·Qᵀ into [B, heads, S, T]
# and transposes after. In the 2026-11-29 H200 profile of Base, 7.1 ms of the fusions
# over [B, heads, S, S] transposed as they went (docs/benchmark-log.md, "GPU"). Query
# first, the product is [B, heads, T, S] as computed: XLA:CPU's program loses 5
# transposes and 5 copies of such tensors; a GPU's is not measured yet.
_SCORES = "abcd,aecd->acbe"   # query, key → [B, heads, T, S]
_CONTEXT = "acbe,aecd->abcd"  # probabilities, value → [B, T, heads, head]
_MASKED = -1e9  # Keras' masked-softmax fill (bfloat16 and float32)


def core(query, key, value, attention_mask=None, scale: float = 1.0, dropout=None,
         training=None):
    """The attention context `[B, T, heads, head]` of projected `query` `[B, T, heads,
    head]`, `key` and `value` `[B, S, heads, head]`: softmax(scale · QKᵀ) over the keys
    that `attention_mask` (`[B, T, S]` or `[B, 1, S]`, True where attended; None: all)
    allows, dropped by `dropout` (a `dropout.HashDropout`, or None) in training, · V."""
    query = query * tf.cast(scale, query.dtype)
    scores = tf.einsum(_SCORES, query, key)                      # [B, heads, T, S]
    if attention_mask is None:
        attended = None
    else:
        attended = tf.expand_dims(tf.cast(attention_mask, tf.bool), 1)  # [B, 1, T|1, S]
    rate = dropout.rate if dropout is not None and training else 0.0
    if not 0 <= rate < 1:
        raise ValueError(f"The attention's dropout rate must be in [0, 1). Received: "
                         f"`rate={rate}`")
    keep_mask = dropout.keep_mask(scores) if rate else None
    return _softmax_dropout_value(scores, value, attended, keep_mask, rate)


def _softmax_dropout_value(scores, value, attended, keep_mask, rate: float):
    """`dropout(softmax(scores masked by attended)) · value` with the gradient of the
    module docstring; `keep_mask(like)` gives the same mask each call.

    Each `[B, heads, S, S]` operand of a matmul is its own exponential of the scores
    (`_exp`), written so that XLA cannot merge it with another (the dropout's select
    comes before the exponential, the backward pass's subtracts the log-sum-exp): each
    is then one pass from the scores, where one exponential shared by several consumers
    would be a pass writing it and one more reading it per consumer."""
    dtype = value.dtype
    dropout_scale = 1.0 / (1.0 - rate)

    @tf.custom_gradient
    def run(scores, value):
        x = _masked(scores, attended)                            # float32 [B, h, T, S]
        row_max = tf.reduce_max(x, axis=-1, keepdims=True)       # [B, h, T, 1]
        row_sum = tf.reduce_sum(tf.exp(x - row_max), axis=-1, keepdims=True)
        # 0 for a row with no key attended (Keras' masked softmax gives 0), else 1.
        live = (tf.ones_like(row_sum) if attended is None else
                tf.cast(tf.reduce_any(attended, axis=-1, keepdims=True), tf.float32))
        # log Σ exp(x), +inf for such a row: P = exp(x - log_sum) is 0 there.
        log_sum = tf.where(live > 0, row_max + tf.math.log(row_sum), float("inf"))
        kept = _exp(x, keep_mask, row_max, attended)             # keep · exp(x - max)
        unnormalised = tf.einsum(_CONTEXT, tf.cast(kept, dtype), value)  # [B, T, h, d]
        normaliser = _swap_heads(live * dropout_scale / row_sum)  # [B, T, h, 1]
        context = tf.cast(tf.cast(unnormalised, tf.float32) * normaliser, dtype)

        def grad(d_context):
            # dP = keep · scale · (dO Vᵀ); dx = P · (dP - Σ_s P · dP), and
            # Σ_s P · dP = Σ_d dO · O: a sum over the context's [B, T, h, d].
            x = _masked(scores, attended)
            probabilities = tf.exp(x - log_sum)
            dropped = (probabilities if keep_mask is None else
                       _exp(x, keep_mask, log_sum) * dropout_scale)
            d_probabilities = tf.cast(tf.einsum("abcd,aecd->acbe", d_context, value),
                                      tf.float32) * dropout_scale
            if keep_mask is not None:
                d_probabilities = tf.where(keep_mask(scores), d_probabilities, 0.0)
            row_term = tf.reduce_sum(tf.cast(d_context, tf.float32)
                                     * tf.cast(context, tf.float32), axis=-1, keepdims=True)
            d_scores = probabilities * (d_probabilities - _swap_heads(row_term))
            d_value = tf.einsum("acbe,abcd->aecd", tf.cast(dropped, dtype), d_context)
            return tf.cast(d_scores, scores.dtype), d_value

        return context, grad

    return run(scores, value)


def _masked(scores, attended):
    """The scores as float32, Keras' fill where no key is attended."""
    x = tf.cast(scores, tf.float32)
    return x if attended is None else tf.where(attended, x, _MASKED)


def _exp(x, keep_mask, shift, attended=None):
    """`exp(x - shift)` where `keep_mask` keeps and `attended` attends (everywhere where
    None), else 0: the select before the exponential keeps XLA from merging it with
    `exp(x - shift)`'s."""
    keep = None if keep_mask is None else keep_mask(x)
    if attended is not None:
        keep = attended if keep is None else tf.logical_and(keep, attended)
    if keep is not None:
        x = tf.where(keep, x, -float("inf"))
    return tf.exp(x - shift)


def _swap_heads(row):
    """`[B, heads, T, 1]` ⇄ `[B, T, heads, 1]` (the context's layout)."""
    return tf.transpose(row, [0, 2, 1, 3])
