"""On the device machine (tools/device/setup.sh): TF sees the GPU; a bf16 matmul (cuBLAS)
is right, and how fast TF's own kernel runs it."""
import time

import numpy as np
import tensorflow as tf

t0 = time.time()
print("tf", tf.__version__, "built with", tf.sysconfig.get_build_info().get("cuda_version"),
      "cudnn", tf.sysconfig.get_build_info().get("cudnn_version"), flush=True)
gpus = tf.config.list_physical_devices("GPU")
print("GPUs", gpus, flush=True)
assert gpus, "no GPU"
n = 8192
a = tf.random.normal([n, n], dtype=tf.bfloat16)
b = tf.random.normal([n, n], dtype=tf.bfloat16)
c = tf.matmul(a, b)
ref = np.matmul(a[:64].numpy().astype(np.float32), b.numpy().astype(np.float32))
err = float(np.max(np.abs(c[:64].numpy().astype(np.float32) - ref)) / np.max(np.abs(ref)))
print("matmul rel err", err, flush=True)
for _ in range(3):
    c = tf.matmul(a, b)
_ = c.numpy()[0, 0]
t = time.perf_counter()
for _ in range(20):
    c = tf.matmul(a, b)
_ = c.numpy()[0, 0]
dt = (time.perf_counter() - t) / 20
print(f"bf16 matmul {2 * n**3 / dt / 1e12:.0f} TFLOP/s (TF kernel, cuBLAS)", flush=True)

print("probe total", round(time.time() - t0, 1), "s")
