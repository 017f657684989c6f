"""The attention's projections as one 2-D matmul each, whose kernel gradient is one GEMM.

Keras' `MultiHeadAttention` projects with `EinsumDense` (`abc,cde->abde` for the query,
key and value, `abcd,cde->abe` for the output). Keras' TensorFlow backend runs those
einsums as `tf.matmul` of the `[B, S, ...]` input with the kernel reshaped to 2-D, a
matmul that broadcasts the kernel over the batch. TF differentiates a broadcast operand
by computing its gradient once per example and summing over the batch afterwards: a
`[B, H, H]` tensor per projection, written and read back again, and a batch of small
GEMMs where one large one would do (about an eighth of Base's step on an H100:
BENCHMARKS.md, "GPU").

`FlatEinsumDense` computes the same function with the input's leading dimensions
folded into one: `[B·S, C] · [C, K]`, a plain 2-D matmul. Its kernel's gradient is then
`xᵀ · dy`, one GEMM that contracts the batch and the positions together. The variables,
their shapes and the layer's config are Keras' own, so checkpoints and exports are
unchanged; LoRA's merged kernel is used as Keras uses it. Equations of any other form
and inputs of another rank run Keras' `EinsumDense.call`. Keras quantizes only its own
`EinsumDense` class, so `quantize` refuses these layers (as it does `remat`'s): the
pre-training model is not quantized.

>>> import numpy as np
>>> layer = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 3),
...                                  bias_axes="de")
>>> layer.build((1, 4, 5))
>>> x = np.random.default_rng(0).normal(size=(1, 4, 5)).astype("float32")
>>> before = layer(x).numpy()
>>> use_flat_projections(layer)
1
>>> bool(np.allclose(layer(x).numpy(), before, atol=1e-6))
True
"""

import math
import re

import keras
import tensorflow as tf

from electra_tf import compat

_EQUATION = re.compile(r"^([a-z]+),([a-z]+)->([a-z]+)$")


def flat_split(equation: str) -> tuple[int, int] | None:
    """(leading dimensions kept from the input, dimensions contracted) where `equation`
    is `PC,CK->PK` (the input's trailing dimensions C contract the kernel's leading
    ones, in order; the output is the input's leading P, then the kernel's trailing K);
    None for any other equation.

    >>> flat_split("abc,cde->abde"), flat_split("abcd,cde->abe"), flat_split("abc,dc->abd")
    ((2, 1), (2, 2), None)
    """
    match = _EQUATION.match(equation.replace(" ", ""))
    if not match:
        return None
    inputs, kernel, output = match.groups()
    for contracted in range(1, min(len(inputs), len(kernel)) + 1):
        kept, shared = inputs[:-contracted], inputs[-contracted:]
        if kernel[:contracted] != shared:
            continue
        trailing = kernel[contracted:]
        letters = kept + shared + trailing
        if output == kept + trailing and kept and len(set(letters)) == len(letters):
            return len(kept), contracted
    return None


def flat_einsum(equation: str, inputs, kernel):
    """`einsum(equation, inputs, kernel)` for a `PC,CK->PK` equation (`flat_split`), as
    one 2-D matmul: `[prod P, prod C] · [prod C, prod K]`, reshaped back."""
    split = flat_split(equation)
    if split is None:
        raise ValueError(f"flat_einsum needs an equation of the form PC,CK->PK. "
                         f"Received: `{equation}`")
    kept, contracted = split
    kernel_shape = tuple(kernel.shape)
    contracted_size = math.prod(kernel_shape[:contracted])
    trailing = kernel_shape[contracted:]
    inputs = tf.convert_to_tensor(inputs)
    leading = inputs.shape[:kept].as_list()
    x = tf.reshape(inputs, [-1, contracted_size])
    y = tf.matmul(x, tf.reshape(kernel, [contracted_size, math.prod(trailing)]))
    if leading.count(None) <= 1:  # the static shape kept (the batch may be unknown)
        return tf.reshape(y, [-1 if d is None else d for d in leading] + list(trailing))
    return tf.reshape(y, tf.concat([tf.shape(inputs)[:kept], trailing], 0))


@keras.saving.register_keras_serializable(package="electra_tf")
class FlatEinsumDense(keras.layers.EinsumDense):
    """Keras' `EinsumDense` whose `PC,CK->PK` einsum runs as one 2-D matmul
    (`flat_einsum`; the module docstring says why). Anything else is Keras' own."""

    def flat(self, inputs) -> bool:
        """Whether `call` computes `inputs`' einsum as one 2-D matmul."""
        split = flat_split(self.equation)
        return (split is not None and not self.quantization_mode
                and inputs.shape.rank == sum(split))

    def project(self, inputs, kernel, *bias):
        """The einsum with `kernel`, plus `bias` if given (no activation)."""
        if self.flat(inputs):
            x = flat_einsum(self.equation, inputs, kernel)
        else:
            x = keras.ops.einsum(self.equation, inputs, kernel)
        return keras.ops.add(x, bias[0]) if bias else x

    def call(self, inputs, training=None):
        inputs = tf.convert_to_tensor(inputs)
        if not self.flat(inputs):
            return super().call(inputs, training=training)
        x = self.project(inputs, self.kernel, *(() if self.bias is None else (self.bias,)))
        return x if self.activation is None else self.activation(x)


def use_flat_projections(layer: keras.layers.Layer) -> int:
    """Turns every plain `keras.layers.EinsumDense` inside `layer` (itself included;
    e.g. a keras-hub `TransformerEncoder`'s query, key, value and output projections)
    into a `FlatEinsumDense`, in place; returns how many. Only the class changes."""
    count = 0
    for sub in compat.sublayers(layer):
        if type(sub) is keras.layers.EinsumDense:  # pylint: disable=unidiomatic-typecheck
            compat.swap_class(sub, FlatEinsumDense)
            count += 1
    return count
