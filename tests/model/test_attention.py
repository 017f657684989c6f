"""model/attention.py: the attention core computes Keras' attention (values, gradients,
dropout masks), in fewer passes over `[B, heads, S, S]` in the compiled step; its
dropout is `config.model.attention_dropout`, its own rate."""

import typing

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import compat
from electra_tf.model import attention
from electra_tf.model import context
from electra_tf.model import dropout as dropout_lib
from electra_tf.model import encoder as encoder_lib
from electra_tf.model import remat
from tests import helpers

class Shape(typing.NamedTuple):
    """An encoder block's dimensions; `[batch, heads, seq, seq]` must be no other
    tensor's dimensions (in any order) for `_passes` to count only the attention's."""
    batch: int
    heads: int
    seq: int
    head: int
    intermediate: int


TINY = Shape(batch=3, heads=2, seq=20, head=8, intermediate=24)
# configs/electra.py's base block (model/sizes.py: hidden 768, 12 heads, FFN 3072) at
# batch 2, seq 128: XLA fuses a block the same way at any batch.
BASE = Shape(batch=2, heads=12, seq=128, head=64, intermediate=3072)


def _encoder(attention_dropout=None, dtype="float32", num_layers=1, shape=TINY):
    keras.utils.set_random_seed(0)
    batch, seq, hidden = shape.batch, shape.seq, shape.heads * shape.head
    embeddings = encoder_lib.Embeddings(vocabulary_size=30, embedding_size=hidden,
                                        max_sequence_length=seq, dtype=dtype)
    encoder = encoder_lib.Encoder(embeddings, hidden_size=hidden, num_layers=num_layers,
                                  num_heads=shape.heads, intermediate_size=shape.intermediate,
                                  dtype=dtype, attention_dropout=attention_dropout)
    rng = np.random.default_rng(0)
    mask = np.ones((batch, seq), "int32")
    mask[1, seq * 3 // 4:] = 0
    inputs = {"token_ids": tf.constant(rng.integers(1, 30, (batch, seq)).astype("int32")
                                       * mask),
              "segment_ids": tf.zeros((batch, seq), tf.int32),
              "padding_mask": tf.constant(mask)}
    encoder.build({k: v.shape for k, v in inputs.items()})
    dropout_lib.number_streams(encoder)
    return encoder, inputs


def _step(encoder, mode="none"):
    """The compiled forward/backward pass: (output, loss gradients of the variables)."""
    @tf.function(jit_compile=True)
    def step(inputs, seed):
        with context.entered(context.StepContext(seed=seed, remat=mode)):
            with tf.GradientTape() as tape:
                output = tf.cast(encoder(inputs, training=True), tf.float32)
                weights = tf.constant(np.random.default_rng(1).normal(size=output.shape),
                                      tf.float32)
                loss = tf.reduce_sum(output * weights)
        grads = tape.gradient(loss, encoder.trainable_variables)
        return output, [tf.convert_to_tensor(g) for g in grads]
    return step


SEED = tf.constant([1, 2], tf.int64)


@pytest.fixture
def keras_core(monkeypatch):
    """The attention core before this module: Keras' own (with the same HashDropout)."""
    def keras(self, query, key, value, attention_mask, training):
        return self.keras_attention_core(query, key, value, attention_mask=attention_mask,
                                         training=training)[0]

    def use_keras_core():
        monkeypatch.setattr(remat.SelectiveAttention, "core", keras)
    return use_keras_core


def _assert_keras_step(encoder, inputs, keras_core):
    """Our core's compiled step equals Keras' core's, to float rounding (the
    normalisation comes after the ·V here); (ours, Keras') outputs."""
    ours = _step(encoder)(inputs, SEED)
    keras_core()
    theirs = _step(encoder)(inputs, SEED)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)
    for mine, keras_grad in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(mine, keras_grad, rtol=1e-4, atol=1e-5)
    return ours[0], theirs[0]


def test_the_core_is_keras_attention_with_the_same_dropout_masks(keras_core):
    """At the default rate (0.1) in training: the same outputs and gradients."""
    encoder, inputs = _encoder()
    ours, theirs = _assert_keras_step(encoder, inputs, keras_core)
    # The masks are the same draws: another seed's output differs by much more.
    other = _step(encoder)(inputs, tf.constant([3, 4], tf.int64))[0]
    assert np.abs(other - theirs).max() > 100 * np.abs(ours - theirs).max()


def test_a_row_with_no_key_gets_a_zero_context_and_no_gradient():
    rng = np.random.default_rng(0)
    q, k, v = (tf.constant(rng.normal(size=(1, 3, 2, 4)), tf.float32) for _ in range(3))
    mask = tf.constant([[[True, True, False], [False, False, False], [True, False, True]]])
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        out = attention.core(q, k, v, mask, scale=0.5)
        loss = tf.reduce_sum(out * out)
    grads = tape.gradient(loss, [q, k, v])
    assert np.all(out[0, 1] == 0) and np.all(np.isfinite(out))
    assert all(np.all(np.isfinite(g)) for g in grads)
    assert np.all(grads[0][0, 1] == 0)  # the empty row's query
    assert np.all(grads[1][0, 2, :, :] != 0)  # key 2 is attended by row 2


def test_queries_and_keys_of_other_lengths_are_plain_attention():
    """Cross-attention shapes (3 queries, 5 keys; the einsums' letters must not swap T
    and S): the values and gradients of the softmax written out."""
    rng = np.random.default_rng(1)
    q = tf.constant(rng.normal(size=(2, 3, 2, 4)), tf.float32)
    k, v = (tf.constant(rng.normal(size=(2, 5, 2, 4)), tf.float32) for _ in range(2))
    mask = tf.constant(rng.random((2, 3, 5)) > 0.3)

    def plain(q, k, v):
        scores = tf.einsum("btnd,bsnd->bnts", q, k) * 0.5
        scores = tf.where(mask[:, None], scores, -1e9)
        return tf.einsum("bnts,bsnd->btnd", tf.nn.softmax(scores, axis=-1), v)

    results = []
    for function in (lambda q, k, v: attention.core(q, k, v, mask, scale=0.5), plain):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = function(q, k, v)
            loss = tf.reduce_sum(out * tf.range(1.0, 5.0))
        results.append([out, *tape.gradient(loss, [q, k, v])])
    assert results[0][0].shape == (2, 3, 2, 4)
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_zero_attention_dropout_is_keras_attention_without_dropout(keras_core):
    encoder, inputs = _encoder(attention_dropout=0.0)
    block = encoder.blocks[0]
    attention_layer = compat.encoder_block_parts(block).attention
    assert attention_layer.dropout == compat.attention_dropout(attention_layer).rate == 0.0
    assert compat.encoder_block_parts(block).attention_dropout.rate == 0.1  # the others'
    _assert_keras_step(encoder, inputs, keras_core)


def test_attention_dropout_alone():
    """No other dropout, the attention's on: it draws masks (unseeded here: from the
    layer's seed generator, which Keras makes only for a rate above 0)."""
    keras.utils.set_random_seed(0)
    embeddings = encoder_lib.Embeddings(vocabulary_size=30, embedding_size=16, dropout=0.0)
    encoder = encoder_lib.Encoder(embeddings, hidden_size=16, num_layers=1, num_heads=2,
                                  intermediate_size=24, dropout=0.0, attention_dropout=0.5)
    _, inputs = _encoder()
    encoder.build({k: v.shape for k, v in inputs.items()})
    parts = compat.encoder_block_parts(encoder.blocks[0])
    assert parts.attention_dropout.rate == parts.output_dropout.rate == 0.0
    assert compat.attention_dropout(parts.attention).rate == 0.5
    first, second = (encoder(inputs, training=True) for _ in range(2))
    assert np.abs(first - second).max() > 1e-3  # two draws
    np.testing.assert_array_equal(encoder(inputs), encoder(inputs))  # none in inference


def test_checkpoints_restore_whatever_the_attention_dropout(tmp_path):
    """The rate adds no variable: a checkpoint of an encoder of one rate (or of one
    made before the field existed: the same variables) restores into another."""
    before, _ = _encoder(num_layers=2)
    after, _ = _encoder(attention_dropout=0.0, num_layers=2)
    for variable in after.weights:
        variable.assign(tf.zeros_like(variable))
    path = tf.train.Checkpoint(encoder=before).save(str(tmp_path / "ckpt"))
    tf.train.Checkpoint(encoder=after).restore(path).assert_consumed()
    assert [v.shape for v in after.weights] == [v.shape for v in before.weights]
    for a, b in zip(after.weights, before.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    config = after.get_config()
    assert config["attention_dropout"] == 0.0
    del config["attention_dropout"]  # a config saved before the field: `dropout`'s rate
    assert encoder_lib.Encoder.from_config(config).attention_dropout == 0.1


def _passes(encoder, inputs, mode, shape=TINY):
    hlo = _step(encoder, mode).experimental_get_compiler_ir(inputs, SEED)(
        stage="optimized_hlo")
    return len(helpers.fusions_over(hlo, (shape.batch, shape.heads, shape.seq, shape.seq)))


@pytest.mark.parametrize("shape, dtype, mode, keras_count, count", [
    ("tiny", "float32", "none", 7, 5),
    ("tiny", "float32", "selective", 11, 8),
    ("tiny", "mixed_bfloat16", "none", 9, 6),
    ("base", "float32", "none", 9, 7),
    ("base", "float32", "selective", 14, 12),
    ("base", "mixed_bfloat16", "none", 12, 8),
    ("base", "mixed_bfloat16", "selective", 19, 14),
])
def test_fewer_passes_over_the_attention_tensors(keras_core, shape, dtype, mode,
                                                 keras_count, count):
    """XLA:CPU's compiled step of one block: the fusions that read or write a
    `[B, heads, S, S]` tensor. Keras' core: the mask's select and max, exp, sum, divide,
    dropout; backward Σ P·dP, the softmax's gradient. Ours: max, Σ exp, the dropped
    exponentials; backward the dropped probabilities, the scores' gradient (bfloat16:
    plus XLA:CPU's conversion of the scores, which its float32 matmul returns). At
    Base's shape XLA:CPU hands the row reductions (max, sum) to YNNPACK
    (`ynn_fusion`), which takes in no producer: the masked scores and the
    exponentials they reduce are written out first, in either core. A second block
    doubles each count (bfloat16, no recomputation: 16 against 24)."""
    shape = {"tiny": TINY, "base": BASE}[shape]
    encoder, inputs = _encoder(dtype=dtype, shape=shape)
    assert _passes(encoder, inputs, mode, shape) == count
    keras_core()
    assert _passes(encoder, inputs, mode, shape) == keras_count
