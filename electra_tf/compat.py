"""Every reach into a library's internals, in one place.

Private hooks and attributes of Keras, keras-hub, TensorFlow and ml_collections, raw TF ops
that the public API does not wrap, settings TF reads from the environment, glibc's
allocator calls, the name of Apache Beam's worker thread: each is one small function,
class or constant here, with the reason we need it. tests/test_compat.py checks that each
still exists with the signature used here and that our code still goes through it, so
that a library upgrade which renames one fails that test by name instead of changing the
arithmetic in silence (Keras summing gradients a second time, a feed-forward that no
longer recomputes).

Nothing here imports a library at the module's top: `cli.prepare_process()` reaches it
before TensorFlow may be imported. Nothing here imports electra_tf either.

    >>> sorted(tf_environment({"TF_CPP_MIN_LOG_LEVEL": "0"}))
    ['TF_ONEDNN_USE_SYSTEM_ALLOCATOR', 'TF_XLA_FLAGS']
"""

import collections
import contextlib
import ctypes
import functools
import re
import sys

# ---------------------------------------------------------------- TF settings read at start
# Read when TF's C++ library loads: they must be in the environment before `import
# tensorflow` (cli.prepare_process). A value the user set is kept.
TF_ENVIRONMENT = {
    # TF's C++ start-up chatter (no CUDA here, oneDNN notes) hides a tool's own output.
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # Undocumented: where TF runs oneDNN, its allocator pools large buffers for the life of
    # the process; with this they come from malloc and go back (BENCHMARKS.md, "Memory").
    "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1",
}
# TF's internal XLA-bridge flag: its constant folding before XLA compiles holds every
# folded constant on the host at once (BENCHMARKS.md, "Memory"); XLA folds them itself. TF
# aborts at start on a TF_XLA_FLAGS entry it does not know.
XLA_NO_CONSTANT_FOLDING = "--tf_xla_disable_constant_folding=true"
# TF's XLA-bridge flag (=DIR): JIT-compiled executables are saved in DIR and a process
# that compiles the same program (signature, HLO, device) loads one instead. Its key holds
# neither XLA_FLAGS nor the compiling machine; a damaged entry fails the compilation. The
# test suite shares one directory between its processes (conftest.py); binaries never set it.
XLA_PERSISTENT_CACHE = "--tf_xla_persistent_cache_directory"


def tf_environment(environ) -> dict:
    """The variables to add to `environ` before TF is imported (the user's are kept)."""
    updates = {name: value for name, value in TF_ENVIRONMENT.items() if name not in environ}
    xla_flags = environ.get("TF_XLA_FLAGS", "")
    if "tf_xla_disable_constant_folding" not in xla_flags:
        updates["TF_XLA_FLAGS"] = " ".join(filter(None, (xla_flags, XLA_NO_CONSTANT_FOLDING)))
    return updates


# --------------------------------------------------------------------- glibc's allocator
M_ARENA_MAX = -8  # glibc's malloc.h: mallopt's parameter for the number of arenas
HUGETLB_TUNABLE = "glibc.malloc.hugetlb"  # glibc >= 2.35 reads it from GLIBC_TUNABLES


@functools.cache
def glibc():
    """glibc through ctypes, for `malloc_trim` and `mallopt` (Python wraps neither), or
    None where the C library is not glibc (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def glibc_version() -> tuple[int, ...]:
    """(major, minor) of the running glibc; () where there is none."""
    libc = glibc()
    if libc is None or not hasattr(libc, "gnu_get_libc_version"):
        return ()
    libc.gnu_get_libc_version.restype = ctypes.c_char_p
    return tuple(int(part) for part in re.findall(rb"\d+", libc.gnu_get_libc_version())[:2])


# ----------------------------------------------------------------------------- ml_collections
def config_file_error(value) -> BaseException | None:
    """The error of a `config_flags` flag whose file did not load, else None.
    ml_collections keeps such a flag's value as a private `_ErrorConfig` that raises only
    when read: `cli.parse_flags` says it in one line at once instead."""
    if type(value).__name__ != "_ErrorConfig":
        return None
    return object.__getattribute__(value, "_error")


# ---------------------------------------------------------------- Keras' optimizer (TF backend)
# keras/src/backend/tensorflow/optimizer.py: apply_gradients → `_apply_weight_decay(vars)` →
# `_all_reduce_sum_gradients(grads_and_vars)` → a merge call of
# `_distributed_tf_update_step(distribution, grads_and_vars, lr)` → `update_step` per variable.
class GradientsSummedByCaller:
    """A Keras optimizer mixin (first in the bases): the train step all-reduces the
    gradients itself, so that `global_clipnorm` clips the whole global batch's gradient.
    If Keras renamed this hook, the gradients would be summed a second time, silently."""

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


class AroundVariableUpdates:
    """A Keras optimizer mixin: `variable_updates()`, a context manager of the subclass,
    is entered around Keras' loop of `update_step` over the variables (once per step,
    under a strategy too: Keras' private `_distributed_tf_update_step`)."""

    def variable_updates(self):
        return contextlib.nullcontext()

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        with self.variable_updates():
            return super()._distributed_tf_update_step(distribution, grads_and_vars,
                                                       learning_rate)


class OwnWeightDecay:
    """A Keras optimizer mixin: the subclass's `apply_weight_decay(variables)` replaces
    Keras' private `_apply_weight_decay` (called once per step, before the updates)."""

    def apply_weight_decay(self, variables):
        return super()._apply_weight_decay(variables)

    def _apply_weight_decay(self, variables):
        return self.apply_weight_decay(variables)


def variable_index(optimizer, variable) -> int:
    """Where `variable` is among those `optimizer` was built for (its slots' order)."""
    return optimizer._get_variable_index(variable)  # pylint: disable=protected-access


def adam_slots(optimizer, variable) -> tuple:
    """Keras Adam's (first moment, second moment) of `variable`, as the `tf.Variable`s
    that TF's fused `ResourceApplyAdam` updates in place."""
    index = variable_index(optimizer, variable)
    return (optimizer._momentums[index].value,  # pylint: disable=protected-access
            optimizer._velocities[index].value)  # pylint: disable=protected-access


def decays(optimizer, variable) -> bool:
    """Whether weight decay applies to `variable` under `exclude_from_weight_decay`."""
    return optimizer._use_weight_decay(variable)  # pylint: disable=protected-access


def optimizer_strategy(optimizer):
    """The `tf.distribute` strategy Keras' optimizer was built under."""
    return optimizer._distribution_strategy  # pylint: disable=protected-access


def merge_call(fn, strategy, *args):
    """`fn(distribution, *args)` once across replicas (in a replica context, through a
    merge call; directly otherwise), as Keras' own updates are applied."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.__internal__.distribute.interim.maybe_merge_call(fn, strategy, *args)


def resource_apply_adam(variable, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon,
                        grad):
    """TF's fused Adam kernel on `tf.Variable`s (no public wrapper; Keras 3 builds the
    update from ~51 ops a variable instead)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=m.handle, v=v.handle, beta1_power=beta1_power,
        beta2_power=beta2_power, lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon, grad=grad)


# ------------------------------------------------------------------------------ Keras layers
def sublayers(layer, include_self: bool = True) -> list:
    """Every layer inside `layer` (recursively), in Keras' tracking order: Keras has
    no public walk over nested layers (`_flatten_layers`)."""
    return list(layer._flatten_layers(include_self=include_self))  # pylint: disable=protected-access


class AttentionCoreHook:
    """A `keras.layers.MultiHeadAttention` mixin: `attention_core(query, key, value,
    attention_mask, training, return_attention_scores, use_causal_mask)` of the subclass
    replaces the attention core (QKᵀ, softmax, dropout, ·V on projected [B, S, heads,
    head] tensors; Keras' private `_compute_attention`, which `call` runs between the Q/K/V
    and the output projections); `keras_attention_core` is Keras' own."""

    def attention_core(self, *args, **kwargs):
        return self.keras_attention_core(*args, **kwargs)

    def keras_attention_core(self, *args, **kwargs):
        return super()._compute_attention(*args, **kwargs)

    def _compute_attention(self, *args, **kwargs):
        return self.attention_core(*args, **kwargs)


def swap_class(layer, cls) -> None:
    """Makes the built library `layer` an instance of `cls`, in place. keras-hub's blocks
    build their own Dense, EinsumDense, MultiHeadAttention and Dropout layers, with no hook
    to build ours instead; our subclasses of them (`remat.ActivationFirstDense`,
    `SelectiveAttention`, `OutputProjection`, `dropout.HashDropout`) override how they
    compute. `cls.__init__` never runs: what `cls` reads must be the library class's own
    state (or what the caller sets after), which tests/test_compat.py checks."""
    if type(layer) not in cls.__mro__[1:]:
        raise TypeError(f"{layer.name}: {cls.__name__} does not extend its class. "
                        f"Received: `{type(layer).__name__}`")
    layer.__class__ = cls


def attention_dropout(attention):
    """The `Dropout` on a `MultiHeadAttention`'s attention probabilities (built with it)."""
    return attention._dropout_layer  # pylint: disable=protected-access


def set_attention_dropout(attention, rate: float) -> None:
    """Sets the dropout rate on a built `MultiHeadAttention`'s attention probabilities
    (keras-hub's blocks give it theirs: `config.model.attention_dropout` is its own).
    Keras' `Dropout` has a seed generator only if made with a rate above 0: a rate above
    0 here needs one made so."""
    attention._dropout = rate  # pylint: disable=protected-access
    attention._dropout_layer.rate = rate  # pylint: disable=protected-access


def attention_gated(attention) -> bool:
    """Whether a `MultiHeadAttention` multiplies its core's output by a gate (`use_gate`)."""
    return bool(getattr(attention, "_use_gate", False))


class SkippableInputCheck:
    """A Keras layer mixin: where the subclass's `checks_input()` is False, `__call__`
    does not check its input against the layer's `input_spec` (Keras' private
    `_assert_input_compatibility`)."""

    def checks_input(self) -> bool:
        return True

    def _assert_input_compatibility(self, arg_0):
        if self.checks_input():
            super()._assert_input_compatibility(arg_0)


# ---------------------------------------------------------------------------------- keras-hub
# keras-hub exposes no sublayers of its blocks and heads; its own checkpoint converters read
# the same private attributes.
EncoderBlockParts = collections.namedtuple("EncoderBlockParts", (
    "attention", "attention_layer_norm", "attention_dropout", "intermediate_dense",
    "output_dense", "output_layer_norm", "output_dropout"))

_ENCODER_BLOCK_ATTRIBUTES = EncoderBlockParts(
    "_self_attention_layer", "_self_attention_layer_norm", "_self_attention_dropout",
    "_feedforward_intermediate_dense", "_feedforward_output_dense", "_feedforward_layer_norm",
    "_feedforward_dropout")


def encoder_block_parts(block) -> EncoderBlockParts:
    """The sublayers of a built `keras_hub.layers.TransformerEncoder` (post-LayerNorm:
    attention → dropout → add & norm → intermediate Dense (activation) → output Dense →
    dropout → add & norm)."""
    return EncoderBlockParts(*(getattr(block, name) for name in _ENCODER_BLOCK_ATTRIBUTES))


MaskedLMHeadParts = collections.namedtuple("MaskedLMHeadParts", (
    "intermediate_dense", "intermediate_layer_norm", "kernel", "bias"))


def masked_lm_head_parts(head) -> MaskedLMHeadParts:
    """The sublayers and weights of a built `keras_hub.layers.MaskedLMHead`: Dense →
    LayerNorm → (the tied embeddings, or `kernel` where there are none) → + `bias`."""
    # pylint: disable=protected-access
    return MaskedLMHeadParts(head._intermediate_dense, head._intermediate_layer_norm,
                             getattr(head, "_kernel", None), head._bias)


def no_autocast():
    """The scope Keras' `Layer.__call__` enters for a layer that does not autocast
    (`autocast=False`, e.g. keras-hub's `MaskedLMHead`) inside a mixed-precision layer's
    call: float variables read as stored (float32), not cast to the compute dtype. Called
    alone, Keras would read them in the compute dtype (it enters an autocast scope for
    every layer whose compute and variable dtypes differ)."""
    from keras.src import backend  # pylint: disable=g-import-not-at-top
    return backend.AutocastScope(None)


# ---------------------------------------------------------------------------------- TensorFlow
def unfolded_shape(x):
    """`x`'s shape as a Shape op even where it is static (`tf.shape` then gives a constant):
    the constant folding TF's XLA bridge runs skips Shape ops, so what is computed from
    it (the dropout masks' element index) reaches XLA as an iota, not as host constants."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.raw_ops.Shape(input=x)


def tfrecords_from(filename, byte_offset, buffer_size: int = 256 << 10):
    """A dataset of the records of one TFRecord file from `byte_offset` on (one seek):
    `tf.data.TFRecordDataset` does not expose the kernel's `byte_offsets`. Make it inside
    a dataset function only: TF 2.21 leaves `byte_offsets` out when the dataset itself is
    written as a graph ("3 inputs specified of 4")."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.data.experimental.from_variant(
        tf.raw_ops.TFRecordDatasetV2(filenames=tf.reshape(filename, [1]), compression_type="",
                                     buffer_size=buffer_size,
                                     byte_offsets=tf.reshape(byte_offset, [1])),
        tf.TensorSpec([], tf.string))


def save_tensor_bundle(prefix: str, tensors: dict) -> None:
    """`prefix`.index/.data-* holding `tensors` {name: array} under their names: TF1's
    Saver's format, read by `tf.train.load_checkpoint` (no public writer of plain names)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tensors[name] for name in names])


@functools.cache
def _stack_trace_filter_class():
    try:
        from tensorflow.python.util import tf_stack  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    except ImportError:
        return None
    base = getattr(tf_stack, "StackTraceFilter", None)
    if base is None:
        return None

    class FilesFilter(base):

        def __init__(self, filenames):
            super().__init__()
            self._filenames = filenames

        def get_filtered_filenames(self):
            return self._filenames()

    return FilesFilter


def stack_trace_filter(filenames):
    """A context manager: the ops traced in it (in this thread) keep no frame of the
    files in `filenames()` in the Python stack TF keeps for each op. TF's
    `tf_stack.StackTraceFilter` (autograph's own hook, not public API); None where this TF
    has none."""
    cls = _stack_trace_filter_class()
    return None if cls is None else cls(filenames)


def gpu_memory_limit(device: str) -> int | None:
    """The bytes TF's allocator may use on the GPU `device` (e.g. "/job:localhost/
    replica:0/task:0/device:GPU:0"; nearly all of its memory), from TF's internal
    `device_lib` (the public API reports use, not size); None where it is not listed."""
    from tensorflow.python.client import device_lib  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    suffix = device.lower().split("device:")[-1]
    for local in device_lib.list_local_devices():
        if local.name.lower().endswith(suffix) and local.memory_limit:
            return int(local.memory_limit)
    return None


def step_trace(name: str, step: int):
    """A profiler TraceMe that TensorBoard's Profile tab (its step-time graph) and
    `profiling.summarize` read as one training step: `step_num` plus TF's private `_r=1`,
    the mark of a root event (`tf.profiler.experimental.Trace`'s keyword arguments are
    its TraceMe's metadata)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.profiler.experimental.Trace(name, step_num=step, _r=1)


def xspace():
    """A new XSpace, the protobuf of a profiler trace (`.xplane.pb`), from TF's internal
    copy of TSL's profiler protos (TF ships no public reader of its own traces)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    return xplane_pb2.XSpace()


def preemption_handler_saves(handler) -> bool:
    """Whether TF's `PreemptionCheckpointHandler` acts on this machine: not on a Google
    Cloud CPU or TPU VM, where it only logs that it does not support them and saves
    nothing (its private `_platform_device`, from `failure_handling_util.detect_platform`)."""
    from tensorflow.python.distribute.failure_handling import failure_handling_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    platform = failure_handling_util.PlatformDevice
    return handler._platform_device not in (platform.GCE_TPU, platform.GCE_CPU)  # pylint: disable=protected-access


def onednn_enabled() -> bool | None:
    """Whether this TF build runs oneDNN (TF's internal `IsMklEnabled`); None where that
    is gone."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())


# -------------------------------------------------------------------- Apache Beam's runner
# The name of the driver's thread that owns one of the portable runner's worker processes
# (`SubprocessSdkWorkerHandler.start_worker`; the in-process gRPC worker's thread has it
# too): the thread raises when its process exits non-zero, which `data/beam.py` holds with
# the workers' stderr.
BEAM_WORKER_THREAD = "run_worker"
