"""electra_tf/compat.py: every reach into a library's internals still exists, with the
signature we call it with, and our code still goes through it.

One test per entry (or per family of entries), named after it: a library upgrade that
renames a private hook fails here by name, instead of changing the arithmetic in silence
(Keras summing gradients twice, a block that no longer recomputes, stacks kept whole).
"""

import collections
import contextlib
import inspect
import json
import mmap
import os
import struct
import subprocess
import sys
import threading
import types

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import cli
from electra_tf import compat
from electra_tf.data import beam
from electra_tf.data import order
from electra_tf.model import context
from electra_tf.model import dropout as dropout_lib
from electra_tf.model import encoder as encoder_lib
from electra_tf.model import projection as projection_lib
from electra_tf.model import remat
from electra_tf.training import memory
from electra_tf.training import optimizer as optimizer_lib
from electra_tf.training import tracebacks
from tests import helpers

linux_glibc = pytest.mark.skipif(compat.glibc() is None, reason="glibc's malloc")


def params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def counting(monkeypatch, owner, name):
    """Replaces `owner.name` with a wrapper that counts its calls; the list of calls."""
    calls = []
    original = getattr(owner, name)
    if isinstance(owner, type) and not isinstance(inspect.getattr_static(owner, name),
                                                  (staticmethod, classmethod)):
        def wrapper(self, *args, **kwargs):
            calls.append(args)
            return original(self, *args, **kwargs)
    else:
        def wrapper(*args, **kwargs):
            calls.append(args)
            return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, wrapper)
    return calls


# ------------------------------------------------------------------- TF settings at start
_TOOL_WITH_TF = """
import json, os, runpy, sys

sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:  # --help's
    pass
# After the tool (its --help) ran: TF compiles under the tool's settings.
import tensorflow as tf
value = tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0))
names = ("TF_XLA_FLAGS", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "TF_CPP_MIN_LOG_LEVEL",
         "KERAS_BACKEND")
print(json.dumps({"env": {n: os.environ.get(n) for n in names},
                  "compiled": float(value)}), flush=True)
"""


def test_tf_environment_reaches_a_tool_and_tf_knows_the_xla_flag():
    """A tool (`cli.prepare_process()` first thing) starts TF with TF_XLA_FLAGS naming
    `compat.XLA_NO_CONSTANT_FOLDING`, and TF compiles under it: TF aborts at the first
    compilation on a TF_XLA_FLAGS entry it does not know."""
    env = {k: v for k, v in helpers.child_env().items()
           if k not in ("TF_XLA_FLAGS", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "KERAS_BACKEND")}
    # Its --help loads no TF (TF loads in `main`, once the flags are checked): the script
    # imports it after, in the environment `cli.prepare_process()` left.
    tool = os.path.join(helpers.ROOT, "tools", "inspect_data.py")
    result = subprocess.run([sys.executable, "-c", _TOOL_WITH_TF, tool], env=env,
                            cwd=helpers.ROOT, capture_output=True, text=True, timeout=300)
    assert "--num_examples" in result.stdout, result.stderr[-3000:]  # the tool's --help
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["compiled"] == 2.0
    assert report["env"] == {"TF_XLA_FLAGS": compat.XLA_NO_CONSTANT_FOLDING,
                             "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1",
                             "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}


def test_tf_environment_keeps_the_users_values():
    assert compat.tf_environment({"TF_XLA_FLAGS": "--tf_xla_disable_constant_folding=false",
                                  "TF_CPP_MIN_LOG_LEVEL": "0",
                                  "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "0"}) == {}
    assert compat.tf_environment({"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"})["TF_XLA_FLAGS"] == (
        "--tf_xla_auto_jit=2 " + compat.XLA_NO_CONSTANT_FOLDING)


def test_tf_reads_the_onednn_allocator_switch():
    """TF's C++ reads `TF_ONEDNN_USE_SYSTEM_ALLOCATOR` (no Python API): its name is in
    TF's framework library, or the switch silently does nothing."""
    path = os.path.join(tf.sysconfig.get_lib(), "libtensorflow_framework.so.2")
    if not os.path.exists(path):
        pytest.skip(f"no {path} in this TF build")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for name in compat.TF_ENVIRONMENT:
            if name != "TF_CPP_MIN_LOG_LEVEL":  # read by TF's logging, documented
                assert data.find(name.encode()) >= 0, name


# --------------------------------------------------------------------- glibc's allocator
@linux_glibc
def test_glibc_allocator_calls_and_memory_goes_through_them(monkeypatch):
    libc = compat.glibc()
    assert libc.mallopt(compat.M_ARENA_MAX, 2) == 1  # glibc took the setting
    assert compat.glibc_version() >= (2, 17)

    calls = []

    class Recorder:
        def malloc_trim(self, pad):
            calls.append(("malloc_trim", pad))
            return 1

        def mallopt(self, param, value):
            calls.append(("mallopt", param, value))
            return 1

    monkeypatch.setattr(compat, "glibc", Recorder)
    assert memory.release() and memory.limit_arenas(3)
    assert calls == [("malloc_trim", 0), ("mallopt", compat.M_ARENA_MAX, 3)]


# ----------------------------------------------------------------------------- ml_collections
def test_config_file_error_of_a_config_flag_that_did_not_load(monkeypatch, capsys):
    from absl import flags  # pylint: disable=g-import-not-at-top
    from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=flag_values)
    argv = ["tool", "--config=/no/such/config.py"]
    flag_values(argv)
    value = flag_values["config"].value
    assert type(value).__name__ == "_ErrorConfig"
    assert isinstance(compat.config_file_error(value), OSError)
    assert compat.config_file_error(object()) is None
    # cli.parse_flags goes through it: the error in one line, exit code 2.
    calls = counting(monkeypatch, compat, "config_file_error")
    monkeypatch.setattr(flags, "FLAGS", flags.FlagValues())
    config_flags.DEFINE_config_file("config", None, "", flag_values=flags.FLAGS)
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_flags(argv)
    assert exit_info.value.code == 2 and calls
    assert "cannot read the config file" in capsys.readouterr().err


# ------------------------------------------------------------------- Keras' optimizer hooks
# (Keras class, private name, its parameters as compat calls or overrides it)
_KERAS_OPTIMIZER_PRIVATES = [
    (keras.optimizers.AdamW, "_all_reduce_sum_gradients", ["self", "grads_and_vars"]),
    (keras.optimizers.Lamb, "_all_reduce_sum_gradients", ["self", "grads_and_vars"]),
    (keras.optimizers.AdamW, "_distributed_tf_update_step",
     ["self", "distribution", "grads_and_vars", "learning_rate"]),
    (keras.optimizers.AdamW, "_apply_weight_decay", ["self", "variables"]),
    (keras.optimizers.AdamW, "_get_variable_index", ["self", "variable"]),
    (keras.optimizers.AdamW, "_use_weight_decay", ["self", "variable"]),
]


@pytest.mark.parametrize("cls, name, expected", _KERAS_OPTIMIZER_PRIVATES,
                         ids=[f"{c.__name__}.{n}" for c, n, _ in _KERAS_OPTIMIZER_PRIVATES])
def test_keras_optimizer_private_exists(cls, name, expected):
    assert params(getattr(cls, name)) == expected


def _optimizer(cls=None, **kwargs):
    """Our AdamW on a kernel and a bias (excluded from weight decay), built."""
    cls = cls or optimizer_lib.AdamW
    variables = [keras.Variable(np.ones([3, 2], np.float32), name="kernel"),
                 keras.Variable(np.ones([2], np.float32), name="bias")]
    optimizer = cls(learning_rate=0.1, weight_decay=0.5, **kwargs)
    optimizer.exclude_from_weight_decay(var_list=[variables[1]])
    optimizer.build(variables)
    return optimizer, variables


def _grads(variables):
    return [tf.fill(v.shape, 0.5) for v in variables]


@pytest.mark.parametrize("cls", [optimizer_lib.AdamW, optimizer_lib.Lamb])
@pytest.mark.parametrize("compiled", [False, True])
def test_gradients_are_summed_once_per_step_by_the_caller(monkeypatch, cls, compiled):
    """Keras calls `_all_reduce_sum_gradients` once per apply, and it is ours (the
    identity): were it renamed, Keras' own would sum the pre-summed gradients again."""
    calls = counting(monkeypatch, compat.GradientsSummedByCaller, "_all_reduce_sum_gradients")
    optimizer, variables = _optimizer(cls)

    def step(grads):
        optimizer.apply_gradients(zip(grads, variables))
    (tf.function(step) if compiled else step)(_grads(variables))
    assert len(calls) == 1
    grads_and_vars = list(zip(_grads(variables), variables))
    assert optimizer._all_reduce_sum_gradients(grads_and_vars) == grads_and_vars  # pylint: disable=protected-access


def test_adamw_updates_inside_its_scope_with_the_fused_kernel(monkeypatch):
    """`variable_updates()` is entered once per step around Keras' loop of `update_step`,
    which runs TF's fused kernel (`compat.resource_apply_adam`) once per variable on
    Keras' slots (`compat.adam_slots`)."""
    scopes = counting(monkeypatch, optimizer_lib.AdamW, "variable_updates")
    kernels = counting(monkeypatch, compat, "resource_apply_adam")
    inside = []
    update_step = optimizer_lib.AdamW.update_step

    def recording(self, gradient, variable, learning_rate):
        inside.append(self._shared.values is not None)  # pylint: disable=protected-access
        return update_step(self, gradient, variable, learning_rate)
    monkeypatch.setattr(optimizer_lib.AdamW, "update_step", recording)
    optimizer, variables = _optimizer()
    optimizer.apply_gradients(zip(_grads(variables), variables))
    assert len(scopes) == 1 and inside == [True, True] and len(kernels) == 2
    m, v = compat.adam_slots(optimizer, variables[0].value)
    assert isinstance(m, tf.Variable) and m.shape == v.shape == (3, 2)
    assert float(tf.reduce_max(m)) > 0 and float(tf.reduce_max(v)) > 0  # the kernel's
    assert params(tf.raw_ops.ResourceApplyAdam)[:10] == [
        "var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon",
        "grad"]


def test_weight_decay_goes_through_our_hook_once_per_step(monkeypatch):
    hooks = counting(monkeypatch, optimizer_lib.AdamW, "apply_weight_decay")
    merges = counting(monkeypatch, compat, "merge_call")
    optimizer, variables = _optimizer()
    assert compat.decays(optimizer, variables[0]) and not compat.decays(optimizer,
                                                                        variables[1])
    assert [compat.variable_index(optimizer, v) for v in variables] == [0, 1]
    assert isinstance(compat.optimizer_strategy(optimizer), tf.distribute.Strategy)
    optimizer.apply_gradients(zip([tf.zeros(v.shape) for v in variables], variables))
    assert len(hooks) == 1 and len(merges) == 1
    # Zero gradients: only the decay moved the kernel (1 − lr·wd at step 0 of the
    # constant rate), and not the excluded bias.
    np.testing.assert_allclose(variables[0].numpy(), 1 - 0.1 * 0.5, rtol=1e-6)
    np.testing.assert_array_equal(variables[1].numpy(), 1.0)
    assert params(tf.__internal__.distribute.interim.maybe_merge_call) == [
        "fn", "strategy", "args", "kwargs"]


# ------------------------------------------------------------------------------ Keras layers
def test_sublayers_walks_nested_layers():
    assert params(keras.layers.Layer._flatten_layers) == [  # pylint: disable=protected-access
        "self", "include_self", "recursive"]
    inner = keras.Sequential([keras.layers.Dense(2), keras.layers.Dropout(0.1)])
    outer = keras.Sequential([inner, keras.layers.Dense(1)])
    outer.build((None, 3))
    found = compat.sublayers(outer)
    assert found[0] is outer and outer not in compat.sublayers(outer, include_self=False)
    assert inner in found and inner.layers[1] in found  # the nested Dropout


def test_attention_privates_exist():
    assert params(keras.layers.MultiHeadAttention._compute_attention) == [  # pylint: disable=protected-access
        "self", "query", "key", "value", "attention_mask", "training",
        "return_attention_scores", "use_causal_mask"]
    assert params(keras.layers.Layer._assert_input_compatibility) == ["self", "arg_0"]  # pylint: disable=protected-access
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=2, dropout=0.25)
    attention.build((1, 3, 4), (1, 3, 4))
    assert type(compat.attention_dropout(attention)) is keras.layers.Dropout  # noqa: E721
    assert compat.attention_dropout(attention).rate == attention.dropout == 0.25
    assert not compat.attention_gated(attention)
    assert compat.attention_gated(keras.layers.MultiHeadAttention(2, 2, use_gate=True))
    compat.set_attention_dropout(attention, 0.0)  # what Keras' core reads
    assert attention.dropout == compat.attention_dropout(attention).rate == 0.0


def test_our_encoder_sets_the_attention_dropout_through_compat(monkeypatch):
    calls = counting(monkeypatch, compat, "set_attention_dropout")
    encoder, _ = _tiny_encoder()
    assert [rate for _, rate in calls] == [0.1] * encoder.num_layers


def test_gpu_memory_limit_reads_tfs_device_list(monkeypatch):
    from tensorflow.python.client import device_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    listed = device_lib.list_local_devices()
    assert all(hasattr(d, "memory_limit") and hasattr(d, "name") for d in listed)
    fake = collections.namedtuple("Device", "name memory_limit")
    monkeypatch.setattr(device_lib, "list_local_devices", lambda: [
        fake("/device:CPU:0", 2**28), fake("/device:GPU:0", 80 * 2**30)])
    assert compat.gpu_memory_limit("/job:localhost/replica:0/task:0/device:GPU:0") == (
        80 * 2**30)
    assert compat.gpu_memory_limit("/job:localhost/replica:0/task:0/device:GPU:1") is None


# ---------------------------------------------------------------------------------- keras-hub
def test_encoder_block_parts_are_all_of_a_keras_hub_block():
    block = keras_hub.layers.TransformerEncoder(intermediate_dim=8, num_heads=2,
                                                activation="gelu")
    block.build((1, 3, 4))
    parts = compat.encoder_block_parts(block)
    assert [type(p).__name__ for p in parts] == [
        "MultiHeadAttention", "LayerNormalization", "Dropout", "Dense", "Dense",
        "LayerNormalization", "Dropout"]
    assert parts.intermediate_dense.units == 8 and parts.output_dense.units == 4
    assert parts.intermediate_dense.activation is keras.activations.gelu
    # Nothing else in the block: a new sublayer would be missed by remat and conversion.
    inside = compat.sublayers(block, include_self=False)
    assert {id(x) for x in inside} - {id(p) for p in parts} == {
        id(x) for x in compat.sublayers(parts.attention, include_self=False)}


def test_masked_lm_head_parts():
    embedding = keras_hub.layers.ReversibleEmbedding(10, 4)
    embedding.build((1, 3))
    for tied in (embedding, None):
        head = keras_hub.layers.MaskedLMHead(vocabulary_size=10, token_embedding=tied,
                                             activation=None)
        head(np.zeros((1, 3, 6), "float32"), mask_positions=np.array([[0, 2]]))
        parts = compat.masked_lm_head_parts(head)
        assert type(parts.intermediate_dense).__name__ == "Dense"
        assert type(parts.intermediate_layer_norm).__name__ == "LayerNormalization"
        assert tuple(parts.bias.shape) == (10,)
        assert (parts.kernel is None) == (tied is not None)


def test_our_masked_lm_head_goes_through_the_parts(monkeypatch):
    from electra_tf.model import heads  # pylint: disable=g-import-not-at-top
    calls = []
    real = compat.masked_lm_head_parts
    monkeypatch.setattr(compat, "masked_lm_head_parts",
                        lambda head: calls.append(head) or real(head))
    embeddings = encoder_lib.Embeddings(vocabulary_size=10, embedding_size=8)
    embeddings.build((1, 4))
    head = heads.masked_lm_head(embeddings)
    logits = head(np.zeros((1, 4, 16), "float32"), mask_positions=np.array([[1, 2]]))
    assert calls and all(c is head for c in calls) and logits.shape == (1, 2, 10)


def test_no_autocast_reads_variables_as_stored_and_our_head_uses_it(monkeypatch):
    """Under a bfloat16 policy a variable read inside `no_autocast` is float32, inside
    Keras' autocast scope bfloat16; our MaskedLMHead reads its bias inside it, so its
    logits are the same called alone or inside a mixed-precision layer's call."""
    from keras.src import backend  # pylint: disable=g-import-not-at-top
    from electra_tf.model import heads  # pylint: disable=g-import-not-at-top
    variable = keras.Variable(np.full((3,), 1 + 2**-12, "float32"))
    with backend.AutocastScope("bfloat16"):
        assert keras.ops.convert_to_tensor(variable).dtype == "bfloat16"
        with compat.no_autocast():
            assert keras.ops.convert_to_tensor(variable).dtype == "float32"
    embeddings = encoder_lib.Embeddings(vocabulary_size=10, embedding_size=8,
                                        dtype="mixed_bfloat16")
    embeddings.build((1, 4))
    head = heads.masked_lm_head(embeddings, dtype="mixed_bfloat16")
    inputs, positions = np.ones((1, 4, 16), "float32"), np.array([[1, 2]])
    head(inputs, mask_positions=positions)
    compat.masked_lm_head_parts(head).bias.assign(np.full((10,), 1 + 2**-12, "float32"))
    alone = head(inputs, mask_positions=positions).numpy()
    with backend.AutocastScope("bfloat16"):  # what a mixed model's call enters
        enclosed = head(inputs, mask_positions=positions).numpy()
    np.testing.assert_array_equal(alone, enclosed)
    calls = []
    real = compat.no_autocast
    monkeypatch.setattr(compat, "no_autocast", lambda: calls.append(1) or real())
    head(inputs, mask_positions=positions)
    assert calls


def _tiny_encoder():
    keras.utils.set_random_seed(0)
    embeddings = encoder_lib.Embeddings(vocabulary_size=12, embedding_size=8,
                                        max_sequence_length=6, dropout=0.1)
    encoder = encoder_lib.Encoder(embeddings, hidden_size=8, num_layers=2, num_heads=2,
                                  intermediate_size=16, dropout=0.1)
    inputs = {"token_ids": np.array([[1, 2, 3, 4, 5, 0]] * 2),
              "segment_ids": np.zeros((2, 6), "int32"),
              "padding_mask": np.array([[1, 1, 1, 1, 1, 0]] * 2)}
    encoder.build({k: v.shape for k, v in inputs.items()})
    return encoder, inputs


def test_remat_and_dropout_swaps_happen_on_a_model():
    """Encoder.build swaps the keras-hub blocks' classes (remat.prepare,
    dropout.use_hash_dropout) through the parts compat reads."""
    encoder, _ = _tiny_encoder()
    for block in encoder.blocks:
        parts = compat.encoder_block_parts(block)
        assert type(parts.output_dense) is remat.ActivationFirstDense  # noqa: E721
        assert parts.intermediate_dense.activation is keras.activations.linear
        assert type(parts.attention) is remat.SelectiveAttention  # noqa: E721
        assert type(parts.attention.output_dense) is remat.OutputProjection  # noqa: E721
        for dropout in (parts.attention_dropout, parts.output_dropout,
                        compat.attention_dropout(parts.attention)):
            assert type(dropout) is dropout_lib.HashDropout  # noqa: E721
    assert not [x for x in compat.sublayers(encoder) if type(x) is keras.layers.Dropout]  # noqa: E721


def test_swap_class_keeps_the_layer_and_our_swaps_go_through_it(monkeypatch):
    """`swap_class` changes a built layer's class and nothing else (the same object, its
    weights, its config), refuses a class that does not extend the layer's, and every
    class swap of the model's (remat.prepare, dropout.use_hash_dropout,
    projection.use_flat_projections) goes through it: three per block for recomputation,
    its three dropouts and its four projections (the output one swapped twice)."""
    dense = keras.layers.Dense(3)
    dense.build((None, 2))
    weights, config = [w.numpy() for w in dense.weights], dense.get_config()
    compat.swap_class(dense, remat.ActivationFirstDense)
    dense.input_activation = keras.activations.gelu
    assert type(dense) is remat.ActivationFirstDense  # noqa: E721
    assert [w.numpy().tolist() for w in dense.weights] == [w.tolist() for w in weights]
    assert {k: v for k, v in dense.get_config().items() if k in config} == config
    with pytest.raises(TypeError, match="HashDropout does not extend its class"):
        compat.swap_class(keras.layers.Dense(3), dropout_lib.HashDropout)
    calls = counting(monkeypatch, compat, "swap_class")
    encoder, _ = _tiny_encoder()
    swapped = collections.Counter(cls.__name__ for _, cls in calls)
    blocks = len(encoder.blocks)
    assert swapped == {"ActivationFirstDense": blocks, "SelectiveAttention": blocks,
                       "OutputProjection": blocks, "HashDropout": 3 * blocks,
                       "FlatEinsumDense": 4 * blocks}, swapped


def test_a_swapped_dropout_has_what_hash_dropout_reads():
    """`use_hash_dropout` swaps the class of Keras' Dropouts: HashDropout's __init__ never
    runs on them, so what it reads must be Keras' Dropout's own state (or a class
    default): the rate, the seed generator, no noise shape, and the stream number."""
    layer = keras.layers.Dropout(0.5, seed=1)
    assert dropout_lib.use_hash_dropout(layer) == 1
    assert (layer.rate, layer.noise_shape, layer.stream) == (0.5, None, None)
    assert isinstance(layer.seed_generator, keras.random.SeedGenerator)
    out = layer(np.ones((1000,), "float32"), training=True).numpy()
    assert 0.4 < (out > 0).mean() < 0.6
    with pytest.raises(ValueError, match="needs a stream number"):
        with context.entered(context.StepContext(seed=[1, 2])):
            layer(np.ones((4,), "float32"), training=True)


def test_selective_recomputation_runs_through_keras_attention(monkeypatch):
    """In training in a seeded step context with `remat="selective"`, Keras calls
    our attention core (`compat.AttentionCoreHook`), which projects inside the
    recomputation and hands the result to the output projection, whose input check
    Keras skips (`compat.SkippableInputCheck`); the feed-forward recomputes too."""
    encoder, inputs = _tiny_encoder()
    cores = counting(monkeypatch, remat.SelectiveAttention, "attention_core")
    checks = counting(monkeypatch, remat.OutputProjection, "checks_input")
    handed = counting(monkeypatch, remat.OutputProjection, "pass_through")
    recomputed = counting(monkeypatch, tf, "recompute_grad")
    dropout_lib.number_streams(encoder)
    with context.entered(context.StepContext(seed=[1, 2], remat="selective")):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(encoder(inputs, training=True))
    grads = tape.gradient(loss, encoder.trainable_variables)
    assert all(g is not None for g in grads)
    assert len(cores) == len(handed) == len(checks) == 2  # one per block
    assert len(recomputed) == 2 * 2  # attention core and feed-forward, per block


def test_keras_einsum_dense_broadcasts_its_kernel_and_our_projections_do_not():
    """Why `model/projection.py` exists: Keras' TensorFlow backend runs EinsumDense's
    `abc,cde->abde` as a matmul that broadcasts the kernel over the batch, so that TF
    differentiates the kernel per example (a BatchMatMul in the gradient) and sums. When
    this fails, Keras has changed its einsum: FlatEinsumDense may be unneeded."""
    x = tf.ones((2, 3, 4))

    def gradient_op_types(layer):
        @tf.function
        def grad(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(layer(x))
            return tape.gradient(loss, layer.kernel)
        graph = grad.get_concrete_function(x).graph
        return {op.type for op in graph.get_operations() if "gradient_tape" in op.name}
    layer = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 5))
    layer.build(x.shape)
    assert "BatchMatMulV2" in gradient_op_types(layer)
    projection_lib.use_flat_projections(layer)
    assert not {"BatchMatMulV2", "BatchMatMulV3"} & gradient_op_types(layer)


# ---------------------------------------------------------------------------------- TensorFlow
def test_unfolded_shape_is_a_shape_op_and_hash_dropout_uses_it(monkeypatch):
    assert params(tf.raw_ops.Shape)[:1] == ["input"]
    calls = counting(monkeypatch, compat, "unfolded_shape")
    layer = dropout_lib.HashDropout(0.5, seed=1)
    graph = tf.function(lambda x: layer(x, training=True)).get_concrete_function(
        tf.TensorSpec([4, 3], tf.float32)).graph
    assert len(calls) == 1
    assert "Shape" in {op.type for op in graph.get_operations()}


def _write_records(path, records):
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    offsets, position = [], 0
    with open(path, "rb") as f:
        data = f.read()
    while position < len(data):
        offsets.append(position)
        position += 12 + struct.unpack("<Q", data[position:position + 8])[0] + 4
    return offsets


def test_tfrecords_from_a_byte_offset_and_order_reads_through_it(tmp_path, monkeypatch):
    assert params(tf.raw_ops.TFRecordDatasetV2)[:4] == [
        "filenames", "compression_type", "buffer_size", "byte_offsets"]
    path = str(tmp_path / "data.tfrecord")
    records = [f"record {i}".encode() * (i + 1) for i in range(5)]
    offsets = _write_records(path, records)
    files = tf.data.Dataset.from_tensor_slices(([path], np.array([offsets[2]], np.int64)))
    read = files.flat_map(compat.tfrecords_from)
    assert [r.numpy() for r in read] == records[2:]
    calls = counting(monkeypatch, compat, "tfrecords_from")
    stream = order.records(order.chunks_of([path], log=lambda _: None), seed=0,
                           block_size=2)
    assert {r.numpy() for r in stream.take(5)} == set(records)
    assert calls


def test_save_tensor_bundle_is_read_as_a_checkpoint(tmp_path):
    assert params(tf.raw_ops.SaveV2)[:4] == [
        "prefix", "tensor_names", "shape_and_slices", "tensors"]
    prefix = str(tmp_path / "model.ckpt")
    tensors = {"layer_0/kernel": np.arange(6, dtype="float32").reshape(2, 3),
               "bias": np.ones(3, "float32")}
    compat.save_tensor_bundle(prefix, tensors)
    reader = tf.train.load_checkpoint(prefix)
    for name, value in tensors.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)


def test_stack_trace_filter_is_tfs_hook_and_tracebacks_use_it(monkeypatch):
    """TF still has `tf_stack.StackTraceFilter` (else `short_tracebacks` would quietly
    keep whole stacks), calls our file list when entered, and the filter drops the
    files' frames from the ops traced under it."""
    from tensorflow.python.eager.polymorphic_function import polymorphic_function  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    asked = []

    def files():  # a library file, as short_tracebacks filters
        asked.append(True)
        return {polymorphic_function.__file__}

    def mul_frames():
        graph = tf.function(lambda x: x * 2.0).get_concrete_function(
            tf.TensorSpec([], tf.float32)).graph
        op = [op for op in graph.get_operations() if op.type == "Mul"][0]
        return {frame.filename for frame in op.traceback}
    assert polymorphic_function.__file__ in mul_frames()
    stack_filter = compat.stack_trace_filter(files)
    assert stack_filter is not None
    with stack_filter:
        assert polymorphic_function.__file__ not in mul_frames()
    assert asked
    assert not isinstance(tracebacks.short_tracebacks(), contextlib.nullcontext)
    calls = counting(monkeypatch, compat, "stack_trace_filter")
    tracebacks.short_tracebacks()
    assert len(calls) == 1


def test_preemption_handler_saves_reads_the_handlers_platform():
    from tensorflow.python.distribute.failure_handling import failure_handling_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    platform = failure_handling_util.PlatformDevice

    class Handler:  # what PreemptionCheckpointHandler.__init__ sets
        _platform_device = platform.GCE_CPU
    assert not compat.preemption_handler_saves(Handler())
    Handler._platform_device = platform.INTERNAL_CPU
    assert compat.preemption_handler_saves(Handler())
    source = inspect.getsource(tf.distribute.experimental.PreemptionCheckpointHandler)
    assert "self._platform_device = failure_handling_util.detect_platform()" in source


def test_onednn_enabled_is_known():
    assert compat.onednn_enabled() in (True, False)


def test_step_traces_are_what_the_summary_counts_and_profiling_goes_through_it(
        monkeypatch, tmp_path):
    from electra_tf import profiling  # pylint: disable=g-import-not-at-top
    calls = counting(monkeypatch, compat, "step_trace")
    tf.profiler.experimental.start(str(tmp_path))
    for step in range(2):
        with compat.step_trace(profiling.STEP_EVENT, step):
            tf.constant(1.0) + 1.0
    tf.profiler.experimental.stop()
    assert profiling.summarize(profiling.newest_trace(str(tmp_path)))["steps"] == 2

    class Trainer:  # what run_traced reads and calls
        step = tf.Variable(0, dtype=tf.int64)

        def run_loop(self, iterator, n):
            self.step.assign_add(n)
    profiling.run_traced(Trainer(), None, 3)
    assert len(calls) == 2 + 3


def test_xspace_parses_a_trace_and_the_summary_reads_through_it(monkeypatch, tmp_path):
    from electra_tf import profiling  # pylint: disable=g-import-not-at-top
    space = compat.xspace()
    plane = space.planes.add(name="/host:CPU")
    plane.event_metadata[1].name = profiling.STEP_EVENT
    plane.lines.add(timestamp_ns=1).events.add(metadata_id=1, offset_ps=0,
                                               duration_ps=10**9)
    path = tmp_path / "trace.xplane.pb"
    path.write_bytes(space.SerializeToString())
    calls = counting(monkeypatch, compat, "xspace")
    assert profiling.summarize(str(path))["steps"] == 1 and len(calls) == 1


def test_conversion_goes_through_the_parts(monkeypatch):
    """The weight table reads blocks and the generator head through compat."""
    from electra_tf.convert import table  # pylint: disable=g-import-not-at-top
    from electra_tf.model import sizes  # pylint: disable=g-import-not-at-top
    tiny = sizes.SIZES["tiny"]
    model = table.build_pretrainer(table.ModelSpec(vocab_size=30, shape=sizes.ModelShape(
        tiny, sizes.generator_size(tiny, 0.5))))
    calls = collections.Counter()
    for name in ("encoder_block_parts", "masked_lm_head_parts"):
        real = getattr(compat, name)
        monkeypatch.setattr(compat, name,
                            lambda x, real=real, name=name: calls.update([name]) or real(x))
    slots = table.pretrainer_slots(model)
    blocks = tiny.num_layers * 2  # the discriminator's and the generator's
    assert calls == {"encoder_block_parts": blocks, "masked_lm_head_parts": 1}
    assert any(s.name.startswith("generator_predictions/") for s in slots)


# ------------------------------------------------------------------- Apache Beam's runner
def test_beams_worker_thread_raises_as_its_process_fails_and_is_held():
    """Beam's own handler of a worker process (its command here exits 134, as an aborting
    worker does) starts a thread named `compat.BEAM_WORKER_THREAD`, which raises when the
    process ends; `data/beam.py` holds that exception instead of printing it, and passes
    any other thread's on."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers  # pylint: disable=g-import-not-at-top
    from google.protobuf import struct_pb2  # pylint: disable=g-import-not-at-top

    handler = object.__new__(worker_handlers.SubprocessSdkWorkerHandler)  # no gRPC server
    handler._worker_command_line = b"exit 134"
    handler.control_address, handler.worker_id = "localhost:1", None
    handler.provision_info = types.SimpleNamespace(
        provision_info=types.SimpleNamespace(pipeline_options=struct_pb2.Struct()))
    passed_on = []
    previous, threading.excepthook = threading.excepthook, passed_on.append
    try:
        with beam._worker_thread_errors_held() as held:
            handler.start_worker()
            assert handler.worker_thread.name == compat.BEAM_WORKER_THREAD
            other = threading.Thread(target=lambda: 1 / 0, name="other")
            other.start()
            other.join()
        assert handler.worker_thread.is_alive() is False  # waited for
    finally:
        handler.worker_thread.join()  # not to raise into a later test on a failed assert
        threading.excepthook = previous
    assert [(args.thread.name, str(args.exc_value)) for args in held] == [
        (compat.BEAM_WORKER_THREAD, "Worker subprocess exited with return code 134")]
    assert [args.exc_type for args in passed_on] == [ZeroDivisionError]
