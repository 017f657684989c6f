"""Probes of the process and the machine: what ran the benchmark (device, library
versions, the allocator's settings), its resident memory by stage, and the matmul peak
the MFU is taken against."""

import os
import platform
import resource
import sys
import time

import keras
import tensorflow as tf
import tensorflow_text as text

from electra_tf import compat


def device() -> str:
    """The CPU's model name and cores (those this process may run on), and any GPUs."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name}, {cores} CPU cores" + (f", GPUs: {', '.join(gpus)}" if gpus else "")


def versions() -> dict[str, str]:
    import keras_hub  # pylint: disable=g-import-not-at-top
    return {"tensorflow": tf.__version__, "keras": keras.__version__,
            "keras_hub": keras_hub.__version__, "tensorflow_text": text.__version__,
            "python": platform.python_version()}


def cpu_allocation() -> dict:
    """What shapes the allocator's speed and memory on a CPU: glibc's tunables (huge pages:
    training/memory.py restarts the tool with them), whether TF runs oneDNN (its own
    choice by CPU, or TF_ENABLE_ONEDNN_OPTS), and whether oneDNN's allocator pools the
    step's buffers or takes them from malloc (TF_ONEDNN_USE_SYSTEM_ALLOCATOR, set by
    cli.py)."""
    onednn = compat.onednn_enabled()  # not in TF's public API: None if it goes away
    return {"glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
            "tf_enable_onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "onednn": onednn,
            "onednn_system_allocator": os.environ.get("TF_ONEDNN_USE_SYSTEM_ALLOCATOR")}


# ---------------------------------------------------------------------------- memory
def status_mib(field: str) -> int | None:
    """A memory figure of /proc/self/status (VmRSS: resident now, VmHWM: its peak) in
    MiB, or None where /proc is missing (macOS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return None


def reset_peak_rss() -> None:
    """Restarts the kernel's resident-memory high-water mark (VmHWM) from the current
    RSS (Linux >= 4.0), so that the next reading is the peak of one stage alone; where
    it cannot, the next reading is the peak so far."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mib() -> int:
    """The peak RSS since the last restart (or since the process began): the kernel's
    VmHWM. Not getrusage's ru_maxrss, which also counts the image a process replaced
    by exec: a benchmark started from a large parent (pytest with TF loaded) would
    report the parent's size. ru_maxrss only where there is no /proc (macOS; bytes)."""
    peak = status_mib("VmHWM")
    if peak is None:
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = round(maxrss / (2**20 if sys.platform == "darwin" else 1024))
    return peak


class MemoryStages:
    """Where the memory goes: after each stage, the resident memory then and the peak
    during that stage alone (the kernel's high-water mark, restarted after each
    reading; where it cannot be restarted, the peak so far). `peak_mib` is the
    process's peak over all stages."""

    def __init__(self):
        self.stages = {}
        self.peak_mib = 0
        self.record("imports")  # the peak since the process started

    def record(self, stage: str) -> None:
        peak = peak_rss_mib()
        self.peak_mib = max(self.peak_mib, peak)
        self.stages[stage] = [status_mib("VmRSS"), peak]
        reset_peak_rss()


# ---------------------------------------------------------------------------- compute
def matmul_peak_flops(n: int, dtype: str = "float32", repeats: int = 5,
                      per_repeat: int = 4) -> dict[str, float]:
    """The best FLOP/s of an n×n @ n×n matmul (2·n³ FLOPs) in `dtype` in this process, by
    library: TF's kernel, TF under XLA (what the training step uses) and, for float32,
    NumPy's BLAS (a CPU's practical peak, e.g. OpenBLAS). The MFU is taken against the
    best. On a GPU, TF's float32 matmuls run as TF32 (TF's default on Ampere and newer)."""
    a = tf.random.normal([n, n], dtype=dtype)
    b = tf.random.normal([n, n], dtype=dtype)

    def chain(a, b):
        c = a
        for _ in range(per_repeat):  # a chain: nothing can be skipped or overlapped
            c = tf.matmul(c, b) * tf.cast(1e-3, dtype)
        return tf.reduce_sum(tf.cast(c, tf.float32))

    def best_time(run):
        run()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        return best

    flops = per_repeat * 2 * n ** 3
    out = {}
    for name, jit in (("tensorflow", False), ("xla", True)):
        fn = tf.function(chain, jit_compile=jit, autograph=False)
        out[name] = flops / best_time(lambda fn=fn: fn(a, b).numpy())
    if dtype != "float32":
        return out
    an, bn = a.numpy(), b.numpy()

    def blas():
        c = an
        for _ in range(per_repeat):
            c = (c @ bn) * 1e-3
        return c
    out["numpy_blas"] = flops / best_time(blas)
    return out
