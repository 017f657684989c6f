"""The tf.distribute strategy named by `config.runtime`, and facts about it.

    auto          TPU if one is reachable, MultiWorkerMirrored if TF_CONFIG lists several
                  workers, Mirrored over several GPUs, else one device
    tpu           TPUStrategy via TPUClusterResolver(config.runtime.tpu)
    multi_worker  MultiWorkerMirroredStrategy from TF_CONFIG
    mirrored      MirroredStrategy over every GPU (or every logical CPU)
    one_device    the first GPU, else the CPU
"""

import json
import os
import socket
import urllib.parse

import tensorflow as tf
from absl import logging

from electra_tf import compat
from electra_tf import config_check
from electra_tf import errors

STRATEGIES = config_check.CHOICES["runtime.strategy"]
MIXED_PRECISION = config_check.CHOICES["train.mixed_precision"]


def check_strategy(runtime) -> None:
    """A one-line `UserError` unless `config.runtime.strategy` is one of `STRATEGIES`
    (`get_strategy` calls it; both loops' `validate` check the list in `config_check`)."""
    errors.check_choice("config.runtime.strategy", runtime.strategy, STRATEGIES)


def check_mixed_precision(mixed_precision: str) -> None:
    """A one-line `UserError` unless `config.train.mixed_precision` is one of
    `MIXED_PRECISION` (at the point of use; the pre-training `validate` checks the list in
    `config_check` first)."""
    errors.check_choice("config.train.mixed_precision", mixed_precision, MIXED_PRECISION)


def split_cpu(num_devices: int):
    """Makes the CPU appear as `num_devices` logical devices (before TF initialises)."""
    if num_devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)


def get_strategy(runtime) -> tf.distribute.Strategy:
    """The strategy for `config.runtime` (call first: multi-worker must start early)."""
    check_strategy(runtime)
    name = runtime.strategy
    if name == "auto":
        name = _detect(runtime)
        logging.info("config.runtime.strategy=auto chose %s", name)
    strategy = _make(name, runtime)
    api_names = {"multi_worker": "MultiWorkerMirroredStrategy", "tpu": "TPUStrategy",
                 "mirrored": "MirroredStrategy", "one_device": "OneDeviceStrategy"}
    logging.info("Training under tf.distribute.%s: %d replica(s) in sync", api_names[name],
                 strategy.num_replicas_in_sync)
    return strategy


def _make(name: str, runtime) -> tf.distribute.Strategy:
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    split_cpu(runtime.cpu_devices)
    if name == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=runtime.tpu)
        except (ValueError, OSError) as e:  # no TPU name / the name does not resolve
            raise errors.UserError(f"config.runtime.tpu={runtime.tpu!r}: no TPU found "
                                   f"({' '.join(str(e).split())})") from None
        _check_reachable(resolver.master(), runtime.tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    gpus = tf.config.list_logical_devices("GPU")
    if name == "mirrored":
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    return tf.distribute.OneDeviceStrategy((gpus or tf.config.list_logical_devices("CPU"))[0].name)


def _check_reachable(master: str, name: str, timeout_s: float = 30.0) -> None:
    """A remote TPU's grpc:// address must accept a connection: TF's own connect waits
    forever on one that does not. Local TPUs (TPU VMs: no address) are not checked."""
    address = urllib.parse.urlparse(master)
    if address.scheme != "grpc" or not address.hostname:
        return
    try:
        socket.create_connection((address.hostname, address.port or 8470),
                                 timeout=timeout_s).close()
    except OSError as e:
        raise errors.UserError(
            f"config.runtime.tpu={name!r}: cannot reach the TPU at {master} ({e}); is it "
            "running, and in this machine's network?") from None


def _detect(runtime) -> str:
    if runtime.tpu or os.environ.get("TPU_NAME") or os.path.exists("/dev/accel0"):
        return "tpu"
    workers = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}).get("worker", [])
    if len(workers) > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "one_device"


def local_batch_size(strategy, global_batch: int) -> int:
    """Rows per replica of `config.train.batch_size` (the global batch), which the
    replicas must divide."""
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise errors.UserError(
            f"config.train.batch_size={global_batch} is not divisible by the "
            f"{replicas} replicas of this {type(strategy).__name__}")
    return global_batch // replicas


def is_tpu(strategy) -> bool:
    return isinstance(strategy, tf.distribute.TPUStrategy)


def is_chief(strategy) -> bool:
    """True on the worker that writes checkpoints and summaries."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return True
    if resolver.task_type in (None, "chief"):
        return True
    # Worker 0 leads only in a cluster without a "chief" task (else two would write).
    return (resolver.task_type == "worker" and resolver.task_id == 0
            and "chief" not in resolver.cluster_spec().as_dict())


def worker_id(strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and resolver:
        return resolver.task_id or 0
    return 0


def input_pipelines(strategy) -> int:
    """The hosts that read input (`InputContext.num_input_pipelines`): a TPU's hosts,
    a multi-worker cluster's workers (its chief included), else one."""
    if is_tpu(strategy):
        return strategy.extended.num_hosts
    resolver = getattr(strategy, "cluster_resolver", None)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and resolver:
        spec = resolver.cluster_spec().as_dict()
        return max(1, len(spec.get("chief", [])) + len(spec.get("worker", [])))
    return 1


def device_kind(strategy) -> str:
    """'tpu', 'gpu' or 'cpu': where the replicas run."""
    if is_tpu(strategy):
        return "tpu"
    device = strategy.extended.worker_devices[0].lower()
    return "gpu" if "gpu" in device else "cpu"


# A TPU's memory per replica, which TF does not report: v3's 16 GiB per core (v4's
# 32 GiB per chip and v5e's 16 GiB per chip are no less).
TPU_MEMORY_BYTES = 16 * 2**30


def device_memory(strategy) -> int | None:
    """Bytes of memory of one replica's device: a GPU's as TF's allocator sees it, a
    TPU's by its generation (`TPU_MEMORY_BYTES`); None on CPUs (host memory, shared)."""
    kind = device_kind(strategy)
    if kind == "tpu":
        return TPU_MEMORY_BYTES
    if kind == "gpu":
        return compat.gpu_memory_limit(strategy.extended.worker_devices[0])
    return None


def dtype_policy(mixed_precision: str, strategy) -> str:
    """The Keras dtype policy name for `config.train.mixed_precision`; float16 on a TPU
    (which computes in bfloat16) is a one-line error. On a CPU float16 runs, slowly, as
    on a GPU: the tests of its loss scaling run there."""
    check_mixed_precision(mixed_precision)
    if mixed_precision == "float16" and device_kind(strategy) == "tpu":
        raise errors.UserError("config.train.mixed_precision='float16' on a TPU: TPUs "
                               "compute in bfloat16; choose bfloat16 (or auto)")
    if mixed_precision == "auto":
        kind = device_kind(strategy)
        if kind == "tpu":
            mixed_precision = "bfloat16"
        elif kind == "gpu":
            details = tf.config.experimental.get_device_details(
                tf.config.list_physical_devices("GPU")[0])
            mixed_precision = ("bfloat16" if details.get("compute_capability", (0, 0)) >= (8, 0)
                               else "float16")
        else:
            mixed_precision = "float32"  # CPUs without AMX run bfloat16 matmuls slower
    return "float32" if mixed_precision == "float32" else f"mixed_{mixed_precision}"
