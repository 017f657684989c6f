"""training/tracebacks.py: ops traced in `short_tracebacks()` keep their callers' frames
and TF's graph-building ones, not the libraries' (less memory held after XLA's
compilation), and compile and compute as before."""

import keras
import numpy as np
import tensorflow as tf

from electra_tf.training import tracebacks


def _dense_graph(layer, jit_compile):
    fn = tf.function(lambda x: layer(x), jit_compile=jit_compile)
    return fn, fn.get_concrete_function(tf.TensorSpec([2, 3], tf.float32)).graph


def _files(graph, op_type):
    op = next(op for op in graph.get_operations() if op.type == op_type)
    return [frame.filename for frame in op.traceback]


def test_ops_keep_the_callers_frames_and_not_the_libraries():
    layer = keras.layers.Dense(4)
    layer.build((2, 3))
    _, whole = _dense_graph(layer, jit_compile=False)
    with tracebacks.short_tracebacks():
        fn, short = _dense_graph(layer, jit_compile=True)
    library = ("/keras/", "/tensorflow/python/eager/")
    assert any(part in f for f in _files(whole, "MatMul") for part in library)
    files = _files(short, "MatMul")
    assert __file__ in files  # the frames of the code that called Keras
    assert not any(part in f for f in files for part in library)
    assert len(files) < len(_files(whole, "MatMul")) - 10  # here 39 frames of 63
    # XLA reads each compiled op's last user frame (TF 2.21 crashes if none is left)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(fn(tf.constant(x)).numpy(), layer(x).numpy(), rtol=1e-6)


def test_the_filter_ends_with_its_block():
    layer = keras.layers.Dense(4)
    layer.build((2, 3))
    with tracebacks.short_tracebacks():
        pass
    _, after = _dense_graph(layer, jit_compile=False)
    assert any("/keras/" in f for f in _files(after, "MatMul"))
