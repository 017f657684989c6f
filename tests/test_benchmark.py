"""tools/benchmark.py --mode=train and the FLOP formula behind its MFU."""

import json
import os
import subprocess
import sys

from electra_tf.model import flops
from electra_tf.model import sizes
from configs import electra as electra_configs  # pylint: disable=g-bad-import-order

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_small_costs_about_9_gflop_per_training_sequence():
    small = sizes.SIZES["small"]
    generator = sizes.generator_size(small, 0.25)
    per_seq = flops.training_flops_per_sequence(small, generator, seq_len=128,
                                                num_predictions=19, vocab_size=30522)
    assert abs(per_seq - 9e9) / 9e9 < 0.15
    # The config path agrees (P = int((0.15 + 0.005) * 128) = 19).
    assert flops.for_config(electra_configs.get_config("small"), 30522) == per_seq


def test_flops_count_the_vocabulary_at_masked_positions_only():
    small = sizes.SIZES["small"]
    generator = sizes.generator_size(small, 0.25)
    base = flops.forward_flops_per_sequence(small, generator, 128, 19, 30522)
    more = flops.forward_flops_per_sequence(small, generator, 128, 20, 30522)
    assert more - base == 2 * 64 * 128 + 2 * 128 * 30522  # one more masked position
    assert flops.encoder_flops(sizes.SIZES["base"], 128) == 12 * (
        2 * 128 * (4 * 768 ** 2 + 2 * 768 * 3072) + 4 * 128 ** 2 * 768)  # E == H: no projection


def test_train_benchmark_prints_one_json_line_last():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "benchmark.py"),
         "--config=configs/electra.py:tiny", "--batch_size=4", "--seq_len=32", "--steps=2",
         "--warmup_steps=1", "--matmul_size=256",
         "--config.train.jit_compile=false"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("seq_per_sec", "tokens_per_sec", "step_time_median_s", "model_flops_per_seq",
                "achieved_flops", "matmul_peak_flops", "mfu", "peak_rss_mib", "device",
                "batch_size", "seq_len", "size", "steps", "jit_compile", "mixed_precision",
                "dtype_policy", "versions"):
        assert key in results, key
    assert results["size"] == "tiny" and results["batch_size"] == 4
    assert results["seq_len"] == 32 and results["steps"] == 2
    assert results["jit_compile"] is False  # --config.KEY=VALUE overrides reach the Trainer
    assert results["num_predictions"] == 4  # int(0.155 * 32)
    assert results["seq_per_sec"] > 0 and 0 < results["mfu"]
    assert results["model_flops_per_seq"] > 0 and results["peak_rss_mib"] > 0
    # The MFU is against the best of the libraries' measured peaks.
    peaks = results["matmul_peak_flops_by_library"]
    assert set(peaks) == {"tensorflow", "xla", "numpy_blas"}
    assert results["matmul_peak_flops"] == max(peaks.values())
    assert set(results["versions"]) >= {"tensorflow", "keras", "keras_hub",
                                         "tensorflow_text", "python"}
