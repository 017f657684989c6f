"""electra_tf/benchmark (its synthetic batches and memory probes), tools/benchmark.py
--mode=train (--profile, --compare_data) and --mode=resume, tools/benchmark_sweep.py,
and the FLOP formula behind the MFU."""

import glob
import json
import os

import pytest

from electra_tf import compat
from electra_tf import model_config
from electra_tf import profiling
from electra_tf.benchmark import host
from electra_tf.benchmark import synthetic
from electra_tf.model import flops
from electra_tf.model import objectives
from electra_tf.model import sizes
from electra_tf.training import memory
from configs import electra as electra_configs  # pylint: disable=g-bad-import-order
from tests import helpers

# A tiny model, one or two steps, a small matmul peak and no XLA: a few seconds of work.
TINY = ["--config=configs/electra.py:tiny", "--batch_size=4", "--seq_len=32",
        "--warmup_steps=1", "--matmul_size=256", "--config.train.jit_compile=false"]


run_tool = helpers.run_tool  # `python tools/<tool> ARGS` with this checkout's electra_tf


def last_json_line(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_synthetic_examples_have_the_pipelines_structure():
    batch = synthetic.synthetic_examples(3, 32, num_predictions=6, vocab_size=40)
    assert all(value.shape[0] == 3 for value in batch.values())
    ids, weights = batch["input_ids"], batch["masked_lm_weights"]
    assert (ids[:, 0] == 2).all() and (ids[:, -1] == 3).all() and ids.max() < 40
    assert (batch["segment_ids"][:, 16:] == 1).all() and (batch["input_mask"] == 1).all()
    # round(0.15 * 32) = 5 real predictions, the sixth padding, as the pipeline pads.
    assert (weights.sum(axis=1) == 5).all() and (weights[:, 5] == 0).all()
    positions = batch["masked_lm_positions"]
    real_ids = (batch["masked_lm_ids"] != 0) | (weights == 0)
    assert real_ids.all() and ((positions[:, :5] > 0) & (positions[:, :5] < 31)).all()
    masked = batch["masked_input_ids"]
    assert ((masked == ids) | (masked == 4)).all()


def test_memory_stages_record_resident_and_peak_in_order():
    stages = host.MemoryStages()
    stages.record("one")
    assert list(stages.stages) == ["imports", "one"]
    if host.status_mib("VmRSS") is not None:  # Linux's /proc
        assert all(now > 0 and peak > 0 for now, peak in stages.stages.values())
        assert stages.peak_mib == max(peak for _, peak in stages.stages.values())


def test_small_costs_about_9_gflop_per_training_sequence():
    small = sizes.SIZES["small"]
    generator = sizes.generator_size(small, 0.25)
    per_seq = flops.training_flops_per_sequence(small, generator, seq_len=128,
                                                num_predictions=19, vocab_size=30522)
    assert abs(per_seq - 9e9) / 9e9 < 0.15
    # The config's resolved shape gives the same count (P = int((0.15 + 0.005) * 128) = 19).
    shape = model_config.shape(electra_configs.get_config("small"))
    assert objectives.training_flops(shape, 128, 19, 30522) == per_seq


def test_flops_count_the_vocabulary_at_masked_positions_only():
    small = sizes.SIZES["small"]
    generator = sizes.generator_size(small, 0.25)
    base = flops.forward_flops_per_sequence(small, generator, 128, 19, 30522)
    more = flops.forward_flops_per_sequence(small, generator, 128, 20, 30522)
    assert more - base == 2 * 64 * 128 + 2 * 128 * 30522  # one more masked position
    assert flops.encoder_flops(sizes.SIZES["base"], 128) == 12 * (
        2 * 128 * (4 * 768 ** 2 + 2 * 768 * 3072) + 4 * 128 ** 2 * 768)  # E == H: no projection


def test_train_benchmark_prints_one_json_line_last_and_profiles(tmp_path):
    # A shape no preset has: the FLOPs follow it.
    results = last_json_line(run_tool("benchmark.py", *TINY, "--steps=2", "--profile",
                                      f"--workdir={tmp_path}", "--config.model.hidden_size=96",
                                      "--config.model.num_heads=3",
                                      "--config.train.accumulation_steps=2",
                                      "--config.train.remat=blocks",
                                      "--config.train.vocabulary_padding=tiles"))
    for key in ("seq_per_sec", "seq_per_sec_per_replica", "steps_per_sec", "tokens_per_sec",
                "step_time_median_s", "model_flops_per_seq", "achieved_flops",
                "matmul_peak_flops", "mfu", "peak_rss_mib", "rss_at_end_mib", "device",
                "batch_size", "seq_len", "size", "steps", "jit_compile", "mixed_precision",
                "dtype_policy", "versions", "shape", "xla_scope", "accumulation_steps",
                "remat"):
        assert key in results, key
    assert results["size"] == "tiny" and results["batch_size"] == 4
    assert results["seq_len"] == 32 and results["steps"] == 2
    assert results["jit_compile"] is False  # --config.KEY=VALUE overrides reach the Trainer
    assert results["xla_scope"] == "none"
    assert (results["accumulation_steps"], results["remat"]) == (2, "blocks")
    assert results["remat_reason"] == "as configured"  # auto's says what it chose and why
    assert (results["vocab_size"], results["vocab_size_padded"]) == (30522, 30592)
    assert results["vocabulary_padding_reason"] == "as configured"  # auto: by the device
    assert results["num_predictions"] == 4  # int(0.155 * 32)
    assert results["seq_per_sec"] > 0 and 0 < results["mfu"]
    assert results["model_flops_per_seq"] > 0 and results["peak_rss_mib"] > 0
    shape = sizes.ModelShape.from_dict(results["shape"])
    assert (shape.discriminator.hidden_size, shape.generator.hidden_size) == (96, 48)
    assert results["objective"] == "electra"
    assert results["model_flops_per_seq"] == objectives.training_flops(
        shape, 32, 4, results["vocab_size"])
    # The MFU is against the best of the libraries' measured peaks.
    peaks = results["matmul_peak_flops_by_library"]
    assert set(peaks) == {"tensorflow", "xla", "numpy_blas"}
    assert results["matmul_peak_flops"] == max(peaks.values())
    assert (results["matmul_dtype"], results["mfu_peak_source"]) == ("float32",
                                                                     "measured_matmul")
    assert results["mfu_peak_flops"] == results["matmul_peak_flops"]
    assert results["mfu"] == pytest.approx(
        results["achieved_flops"] / results["mfu_peak_flops"], abs=1e-4)
    assert results["mfu_accelerators"] == 1
    assert set(results["versions"]) >= {"tensorflow", "keras", "keras_hub",
                                         "tensorflow_text", "python"}
    # The tool restarted with malloc's huge pages where the kernel gives them on request.
    restarted = memory.huge_pages_environment(os.environ) or os.environ
    assert results["glibc_tunables"] == restarted.get("GLIBC_TUNABLES")
    # The tool asks oneDNN (where TF runs it) for malloc's memory, not its pool.
    assert results["onednn_system_allocator"] == os.environ.get(
        "TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")
    # Whether oneDNN ran: TF's choice for this CPU and TF_ENABLE_ONEDNN_OPTS, which the
    # child has as this process (no tool or test sets it; TF reads it once a process).
    assert results["onednn"] == compat.onednn_enabled()
    # Memory by stage: [resident after it, peak during it], in the order the stages ran;
    # the process's peak is the highest stage peak (what runs after the last stage,
    # building this JSON, may add a MiB or so to it).
    stages = results["memory_by_stage_mib"]
    assert list(stages) == ["imports", "strategy", "datasets", "trainer_built", "traced",
                            "warmup_compiled", "timed_steps", "profile", "matmul_peak"]
    assert all(now > 0 and peak > 0 for now, peak in stages.values())
    highest = max(peak for _, peak in stages.values())
    assert highest <= results["peak_rss_mib"] <= highest + 16
    # --profile: a trace of a few more steps, taken apart from the timed ones.
    assert results["profile_dir"] == str(tmp_path / "profile")
    traces = glob.glob(f"{tmp_path}/profile/plugins/profile/*/*.xplane.pb")
    assert len(traces) == 1 and os.path.getsize(traces[0]) > 0
    assert len(results["step_times_s"]) == 2
    # tools/profile_summary.py's reading of it: the 3 traced steps, and (no XLA here) the
    # model's matmuls among the host's TF ops; no GPU, so no device table.
    summary = profiling.summarize(profiling.newest_trace(str(tmp_path / "profile")), top=200)
    assert summary["steps"] == 3 and summary["step_wall_ms"] > 0
    assert any("MatMul" in op for op in summary["host_tf_ops_ms"]), summary["host_tf_ops_ms"]
    assert summary["devices"] == {}
    assert "3 steps traced" in profiling.to_markdown(summary)


@pytest.mark.slow  # the train benchmark's fast test covers its JSON
def test_compare_data_reports_input_synthetic_and_real_rates(tmp_path):
    helpers.write_corpus(str(tmp_path), num_documents=60)  # the cached corpus.txt: small
    results = last_json_line(run_tool(
        "benchmark.py", *TINY, "--steps=2", "--compare_data", "--vocab_size=200",
        "--input_batches=20", f"--workdir={tmp_path}"))
    for key in ("input_batches_per_sec", "input_to_step_ratio", "real_vs_synthetic",
                "seq_per_sec", "real_seq_per_sec"):
        assert results[key] > 0, key
    assert len(results["step_times_s"]) == len(results["real_step_times_s"]) == 2
    assert results["data"] == f"synthetic+real:{tmp_path}/data_32"
    # The synthetic batches use the learned vocabulary, and both sources one traced step.
    vocab_size = len((tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert results["vocab_size"] == vocab_size < 200
    assert results["train_loop_traces"] == 1
    # No trace unless asked for.
    assert results["profile_dir"] is None and not (tmp_path / "profile").exists()


@pytest.mark.slow  # the stream at a forged step has fast tests (tests/data/test_order.py)
def test_resume_benchmark_times_forged_steps_and_checks_the_stream(tmp_path):
    helpers.write_corpus(str(tmp_path), num_documents=60)
    results = last_json_line(run_tool(
        "benchmark.py", "--mode=resume", "--config=configs/electra.py:tiny", "--seq_len=32",
        "--batch_size=8", "--vocab_size=200", "--resume_steps=0,1000000000",
        "--resume_repeats=1", "--config.data.shuffle_buffer=512", f"--workdir={tmp_path}"))
    assert set(results["resume_seconds_at_step"]) == {"0", "1000000000"}
    assert all(t > 0 for t in results["resume_seconds_at_step"].values())
    assert results["continues_exactly"] is True
    assert results["records_before_last_step"] == 8 * 10**9
    assert results["replay_seconds_estimate"] > 0


@pytest.mark.slow  # a sweep of real benchmark processes
def test_sweep_writes_a_table_and_records_a_failed_point(tmp_path):
    out = tmp_path / "sweep"
    result = run_tool("benchmark_sweep.py", "--config=configs/electra.py:tiny",
                      "--seq_lens=32", "--batch_sizes=4,0", "--steps=1", "--warmup_steps=1",
                      "--benchmark_flag=--matmul_size=256",
                      "--benchmark_flag=--config.train.jit_compile=false", f"--out={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[2/2] seq 32, batch 0: FAILED" in result.stdout and "ETA" in result.stdout
    ok, failed = json.loads((tmp_path / "sweep.json").read_text())["points"]
    assert ok["status"] == "ok" and ok["batch_size"] == 4 and ok["seq_per_sec"] > 0
    assert failed["status"] == "failed" and "--batch_size" in failed["reason"]
    table = (tmp_path / "sweep.md").read_text()
    assert "| seq | batch | seq/s | steps/s | median step (s) | peak RSS (MiB) |" in table
    assert f"| 32 | 4 | {ok['seq_per_sec']:.2f} |" in table
    assert "| 32 | 0 | **failed**: exit 2: error: --batch_size" in table
    assert "benchmark_sweep.py --config=configs/electra.py:tiny" in table  # the command


@pytest.mark.slow
def test_sweep_mirrored_runs_one_device_then_mirrored_at_the_same_global_batch(tmp_path):
    # Batch 3: one_device runs; two replicas cannot split it, a strategy error that the
    # sweep records. (The mirrored run itself: the test below.)
    out = tmp_path / "mirrored"
    result = run_tool("benchmark_sweep.py", "--config=configs/electra.py:tiny", "--mirrored",
                      "--seq_lens=32", "--batch_sizes=3", "--steps=1", "--warmup_steps=1",
                      "--benchmark_flag=--matmul_size=256",
                      "--benchmark_flag=--config.train.jit_compile=false", f"--out={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    one, mirrored = json.loads((tmp_path / "mirrored.json").read_text())["points"]
    assert (one["runtime_strategy"], one["strategy"], one["status"]) == (
        "one_device", "OneDeviceStrategy", "ok")
    assert (mirrored["runtime_strategy"], mirrored["status"]) == ("mirrored", "failed")
    assert "batch_size=3 is not divisible by the 2 replicas" in mirrored["reason"]
    table = (tmp_path / "mirrored.md").read_text()
    assert "| seq | batch | strategy | replicas | seq/s | seq/s per replica |" in table
    assert "| 32 | 3 | one_device | 1 |" in table and "| 32 | 3 | mirrored |  | **failed**" in table


@pytest.mark.slow
def test_train_benchmark_under_mirrored_over_two_logical_cpus():
    # The CPU is split before anything initialises TF's devices (the matmul peak did).
    # --peak_tflops: the MFU against a stated peak (a GPU's datasheet figure) instead.
    results = last_json_line(run_tool("benchmark.py", *TINY, "--steps=1",
                                      "--config.runtime.strategy=mirrored",
                                      "--config.runtime.cpu_devices=2", "--peak_tflops=0.5",
                                      "--config.model.objective=mlm"))
    assert (results["mfu_peak_source"], results["mfu_peak_flops"]) == ("stated", 5e11)
    # The FLOPs are the objective's own: mlm has no generator.
    shape = sizes.ModelShape.from_dict(results["shape"])
    assert results["objective"] == "mlm"
    assert results["model_flops_per_seq"] == objectives.training_flops(
        shape, 32, results["num_predictions"], results["vocab_size"], "mlm")
    assert results["model_flops_per_seq"] < objectives.training_flops(
        shape, 32, results["num_predictions"], results["vocab_size"], "electra")
    # Two replicas on one CPU share its peak.
    assert results["mfu"] == pytest.approx(results["achieved_flops"] / 5e11, abs=1e-4)
    assert results["mfu_accelerators"] == 1
    assert (results["strategy"], results["replicas"]) == ("MirroredStrategy", 2)
    assert results["batch_size"] == 4  # global
    assert abs(results["seq_per_sec_per_replica"] - results["seq_per_sec"] / 2) < 0.002


def test_the_training_benchmark_validates_its_config_first(tmp_path):
    """The checks a training run makes (`loop.validate`), before any strategy or data."""
    from electra_tf import errors  # pylint: disable=g-import-not-at-top
    from electra_tf.benchmark import training  # pylint: disable=g-import-not-at-top
    config = electra_configs.get_config("tiny")
    config.train.remat = "all"
    with pytest.raises(errors.UserError, match=r"^config.train.remat='all': choose one of"):
        training.run(config, workdir=str(tmp_path / "bench"), seq_len=32)
    assert not os.path.exists(tmp_path / "bench")


def _xspace_with_gpu_kernels(path):
    """A trace of 2 steps whose GPU kernels name their HLO instructions, as XLA's
    profiler writes them (a `hlo_module` and an `hlo_op` stat on each kernel event)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
    space = xplane_pb2.XSpace()
    host = space.planes.add(name="/host:CPU")
    host.event_metadata[1].name = profiling.STEP_EVENT
    ms = 10**9  # events' offsets and durations are in picoseconds
    steps = host.lines.add(name="steps", timestamp_ns=0)
    for start in (0, 10):  # two steps of 10 ms
        steps.events.add(metadata_id=1, offset_ps=start * ms, duration_ps=10 * ms)
    gpu = space.planes.add(name="/device:GPU:0")
    gpu.stat_metadata[1].name = "hlo_module"
    gpu.stat_metadata[2].name = "hlo_op"
    gpu.stat_metadata[3].name = "m"          # interned string values, as XLA writes them
    gpu.stat_metadata[4].name = "fusion.1"
    gpu.stat_metadata[5].name = "fusion.2"
    gpu.event_metadata[1].name = "input_reduce_fusion_1"
    stream = gpu.lines.add(name="Stream #1(Compute)", timestamp_ns=0)
    # Layer 0's and layer 1's copies of one op in each step, and one kernel of an
    # instruction the dump does not have.
    for step in (0, 10):
        for offset, op, duration in ((1, 4, 3), (5, 5, 1), (7, None, 0.5)):
            event = stream.events.add(metadata_id=1, offset_ps=(step + offset) * ms,
                                      duration_ps=int(duration * ms))
            event.stats.add(metadata_id=1, ref_value=3)
            if op:
                event.stats.add(metadata_id=2, ref_value=op)
    with open(path, "wb") as f:
        f.write(space.SerializeToString())


def test_kernels_by_tf_op_through_the_hlo_dump(tmp_path):
    """profile_summary.py --hlo_dir: each kernel's time under the TF op of its HLO
    instruction, the layers' copies folded into one name."""
    trace = tmp_path / "t.xplane.pb"
    _xspace_with_gpu_kernels(str(trace))
    (tmp_path / "hlo").mkdir()
    (tmp_path / "hlo" / "module_1.m.sm_9.0a_gpu_after_optimizations.txt").write_text(
        "HloModule m, is_scheduled=true\n\n"
        '  %fusion.1 = f32[4]{0} fusion(%p), kind=kInput, metadata={op_type="Sum" '
        'op_name="gradient_tape/encoder/transformer_layer_0_1/query_1/MatMul/Sum_1"}\n'
        '  ROOT %fusion.2 = f32[4]{0} fusion(%q), kind=kInput, metadata={op_type="Sum" '
        'op_name="gradient_tape/encoder/transformer_layer_1/query/MatMul/Sum"}\n')
    summary = profiling.summarize(str(trace), hlo_dir=str(tmp_path / "hlo"))
    gpu = summary["by_tf_op"]["/device:GPU:0"]
    # Per step: 3 + 1 ms under one folded name, 2 launches; 0.5 ms not in the dump.
    assert gpu["ops"] == [("Sum", "gradient_tape/encoder/transformer_layer/query/MatMul/Sum",
                           4.0, 2.0)]
    assert (gpu["mapped_ms"], gpu["unmapped_ms"]) == (4.0, 0.5)
    assert "| Sum | `gradient_tape/encoder/transformer_layer/query/MatMul/Sum` |" in (
        profiling.to_markdown(summary))
