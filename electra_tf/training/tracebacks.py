"""Shorter Python stacks on traced ops: less memory held after XLA's compilation.

TF keeps, for every graph op, the Python stack that created it (for error messages), and
XLA's compilation turns each compiled op's stack into strings that stay for the life of
the process, most of the frames TF's, Keras's and keras-hub's own (BENCHMARKS.md,
"Memory"). Ops traced inside `short_tracebacks()` drop the frames of those libraries'
files, and keep ours, the script's and TF's graph-building ones (about 20 an op, not 80).
TF's hook for this is not public API (`compat.stack_trace_filter`): where it goes away,
the stacks stay whole.

    >>> import tensorflow as tf
    >>> with short_tracebacks():
    ...     graph = tf.function(lambda x: x * 2.0).get_concrete_function(
    ...         tf.TensorSpec([], tf.float32)).graph
    >>> op = [op for op in graph.get_operations() if op.type == "Mul"][0]
    >>> any("/tensorflow/python/eager/" in frame.filename for frame in op.traceback)
    False
"""

import contextlib
import os
import sys

from electra_tf import compat

# The packages whose frames the ops lose. TF's graph-building files stay: TF drops the 3
# innermost frames of every op's stack (`stacklevel=3`, meant for those files), so without
# them it would drop 3 frames of the caller's instead, and an XLA-compiled op left with no
# frame at all crashes TF 2.21 (`FrozenStackTrace::LastUserFrame`, a segmentation fault).
_LIBRARIES = ("tensorflow", "keras", "keras_hub", "tensorflow_text", "absl", "optree")
_KEPT = os.path.join("tensorflow", "python", "framework") + os.sep


def _library_roots() -> tuple[str, ...]:
    roots = []
    for name in _LIBRARIES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            roots.append(os.path.dirname(path) + os.sep)
    return tuple(roots)


def _library_files() -> set[str]:
    roots = _library_roots()
    return {path for module in list(sys.modules.values())
            if (path := getattr(module, "__file__", None))
            and path.startswith(roots) and _KEPT not in path}


def short_tracebacks():
    """A context manager: the ops traced in it (in this thread) keep no frame of the
    libraries' files but TF's graph-building ones. It changes no result, only the stacks
    TF keeps for its error messages."""
    return compat.stack_trace_filter(_library_files) or contextlib.nullcontext()
