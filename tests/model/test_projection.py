"""FlatEinsumDense: the attention's projections as 2-D matmuls, one GEMM per kernel
gradient, the same function as Keras' EinsumDense."""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import compat
from electra_tf.model import encoder as encoder_lib
from electra_tf.model import projection
from electra_tf.model import remat


@pytest.mark.parametrize("equation, split", [
    ("abc,cde->abde", (2, 1)),   # MultiHeadAttention's query, key, value
    ("abcd,cde->abe", (2, 2)),   # its output
    ("ab,bc->ac", (1, 1)),
    ("abc,cd->abd", (2, 1)),
    ("abc,dc->abd", None),       # a transposed kernel
    ("abc,cde->abed", None),     # the output's trailing dimensions reordered
    ("abcd,dce->abe", None),     # the contracted dimensions reordered
    ("abc,cd->bad", None),       # the kept dimensions reordered
    ("ab,ab->a", None),
    ("...b,bc->...c", None),
])
def test_flat_split(equation, split):
    assert projection.flat_split(equation) == split


def pair(equation, output_shape, bias_axes, input_shape, seed=0):
    """A Keras EinsumDense and a FlatEinsumDense with the same weights."""
    keras_layer = keras.layers.EinsumDense(equation, output_shape=output_shape,
                                           bias_axes=bias_axes, activation="gelu")
    keras_layer.build(input_shape)
    rng = np.random.default_rng(seed)
    for variable in keras_layer.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    flat = keras.layers.EinsumDense.from_config(keras_layer.get_config())
    flat.build(input_shape)
    flat.set_weights(keras_layer.get_weights())
    assert projection.use_flat_projections(flat) == 1
    return keras_layer, flat


@pytest.mark.parametrize("equation, output_shape, bias_axes, input_shape", [
    ("abc,cde->abde", (None, 3, 4), "de", (2, 5, 6)),
    ("abcd,cde->abe", (None, 6), "e", (2, 5, 3, 4)),
])
def test_same_values_and_gradients_as_keras(equation, output_shape, bias_axes, input_shape):
    keras_layer, flat = pair(equation, output_shape, bias_axes, input_shape)
    assert type(flat) is projection.FlatEinsumDense  # noqa: E721
    x = tf.constant(np.random.default_rng(1).normal(size=input_shape), tf.float32)

    def values_and_grads(layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * tf.sin(y))
        return [y, *tape.gradient(loss, [x, *layer.trainable_variables])]

    for ours, theirs in zip(values_and_grads(flat), values_and_grads(keras_layer)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec, static", [
    ([None, 5, 6], [None, 5, 3, 4]),        # the batch unknown: one -1 in the reshape
    ([None, None, 6], [None, None, 3, 4]),  # batch and length: the reshape by a Shape op
])
def test_unknown_leading_dimensions_keep_the_static_shape(spec, static):
    keras_layer, flat = pair("abc,cde->abde", (None, 3, 4), "de", (2, 5, 6))
    shapes = []

    @tf.function(input_signature=[tf.TensorSpec(spec, tf.float32)])
    def run(x):
        y = flat(x)
        shapes.append(y.shape.as_list())
        return y
    x = np.random.default_rng(5).normal(size=(7, 5, 6)).astype("float32")
    np.testing.assert_allclose(run(x), keras_layer(x), rtol=1e-5, atol=1e-5)
    assert shapes == [static]


def test_bfloat16_policy_same_as_keras():
    def build():
        layer = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 4),
                                         bias_axes="de", dtype="mixed_bfloat16")
        layer.build((2, 3, 8))
        return layer
    keras_layer, flat = build(), build()
    flat.set_weights(keras_layer.get_weights())
    projection.use_flat_projections(flat)
    x = tf.constant(np.random.default_rng(6).normal(size=(2, 3, 8)), tf.float32)
    assert flat.flat(x)

    def value_and_grad(layer):
        with tf.GradientTape() as tape:
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
        return y, tape.gradient(loss, layer.kernel)
    (y, grad), (y_keras, grad_keras) = value_and_grad(flat), value_and_grad(keras_layer)
    assert y.dtype == "bfloat16" and tuple(y.shape) == (2, 3, 2, 4)
    assert flat.kernel.dtype == "float32"
    np.testing.assert_array_equal(tf.cast(y, tf.float32), tf.cast(y_keras, tf.float32))
    # bfloat16 products summed in another order: within bfloat16's rounding.
    np.testing.assert_allclose(grad, grad_keras, rtol=2e-2, atol=2e-2)


def test_serialized_and_restored_as_our_class():
    _, flat = pair("abc,cde->abde", (None, 3, 4), "de", (2, 5, 6))
    config = keras.saving.serialize_keras_object(flat)
    assert config["registered_name"] == "electra_tf>FlatEinsumDense"
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is projection.FlatEinsumDense  # noqa: E721
    assert restored.get_config() == flat.get_config()


def test_quantizing_is_refused_as_keras_refuses_subclasses():
    _, flat = pair("abc,cde->abde", (None, 3, 4), "de", (2, 5, 6))
    with pytest.raises(NotImplementedError, match="does not have a `quantize` method"):
        flat.quantize("int8")
    assert flat.quantization_mode is None and flat.flat(tf.zeros((2, 5, 6)))


def test_lora_merged_kernel_and_other_equations():
    keras_layer, flat = pair("abc,cde->abde", (None, 3, 4), "de", (2, 5, 6))
    rng = np.random.default_rng(4)
    for layer in (keras_layer, flat):
        layer.enable_lora(2)
    for a, b in ((keras_layer.lora_kernel_a, flat.lora_kernel_a),
                 (keras_layer.lora_kernel_b, flat.lora_kernel_b)):
        values = rng.normal(size=a.shape).astype("float32")
        a.assign(values)
        b.assign(values)
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 5, 6)), tf.float32)
    np.testing.assert_allclose(flat(x), keras_layer(x), rtol=1e-5, atol=1e-5)

    def lora_grads(layer):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) ** 2)
        return tape.gradient(loss, [layer.lora_kernel_a, layer.lora_kernel_b])
    for ours, theirs in zip(lora_grads(flat), lora_grads(keras_layer)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    # An equation of another form is Keras' own einsum.
    other = keras.layers.EinsumDense("abc,dc->abd", output_shape=(None, 3))
    other.build((2, 5, 6))
    projection.use_flat_projections(other)
    assert not other.flat(tf.zeros((2, 5, 6)))
    np.testing.assert_allclose(other(x), np.einsum("abc,dc->abd", x, other.kernel.numpy()),
                               rtol=1e-5, atol=1e-5)


def gradient_ops(block, x):
    """The op types, by name, of the traced forward and backward pass of `block`."""
    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = block(x, training=True)
            loss = tf.reduce_sum(y * y)
        grads = tape.gradient(loss, block.trainable_variables)
        assert all(g is not None for g in grads)
        return grads
    graph = step.get_concrete_function(x).graph
    return {op.name: op.type for op in graph.get_operations()}


def test_a_block_s_kernel_gradients_are_one_gemm_each():
    """Keras' projections differentiate the kernel per example (a batch matmul) and sum
    over the batch; the flat ones with one 2-D matmul."""
    x = tf.constant(np.random.default_rng(3).normal(size=(4, 8, 16)), tf.float32)

    def batch_matmuls(block):
        return sorted(name for name, kind in gradient_ops(block, x).items()
                      if kind.startswith("BatchMatMul") and "gradient_tape" in name)

    plain = keras_hub.layers.TransformerEncoder(intermediate_dim=32, num_heads=2)
    plain.build(x.shape)
    # Keras' (tests/test_compat.py checks it too): the check can fail.
    assert batch_matmuls(plain)
    ours = keras_hub.layers.TransformerEncoder(intermediate_dim=32, num_heads=2)
    ours.build(x.shape)
    assert projection.use_flat_projections(ours) == 4
    remat.prepare(ours)
    assert batch_matmuls(ours) == []


def test_the_encoder_s_projections_are_flat():
    encoder = encoder_lib.Encoder(
        embeddings=encoder_lib.Embeddings(vocabulary_size=50, embedding_size=16,
                                          max_sequence_length=8),
        hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)
    encoder.build({"token_ids": (2, 8)})
    kinds = {type(layer) for layer in compat.sublayers(encoder)
             if isinstance(layer, keras.layers.EinsumDense)}
    assert kinds == {projection.FlatEinsumDense, remat.OutputProjection}
    assert issubclass(remat.OutputProjection, projection.FlatEinsumDense)
