"""tools/device/compare.py's line per point (the device scripts themselves run on a lent
GPU machine, and on a CPU through tools/device/rehearse.sh: neither in CI)."""

import importlib.util
import json
import os

import pytest

from tests import helpers

_SPEC = importlib.util.spec_from_file_location(
    "compare", os.path.join(helpers.ROOT, "tools", "device", "compare.py"))
compare = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compare)


def test_a_point_is_size_seq_batch_and_may_name_one_side():
    assert compare.parse_point("base-128-256") == ("base", 128, 256, "both")
    assert compare.parse_point("base-128-256:peer") == ("base", 128, 256, "peer")
    for bad in ("base128", "base-128-256:", "base-128-256:both", "base-128-256:theirs"):
        with pytest.raises(SystemExit, match=f"point '{bad}': give SIZE-SEQ-BATCH"):
            compare.parse_point(bad)


def test_one_line_per_point_with_both_figures_and_their_ratios():
    ours = {"size": "base", "seq_len": 128, "batch_size": 256, "device": "NVIDIA H200",
            "seq_per_sec": 2000.0, "step_time_median_s": 0.128, "mfu": 0.2,
            "model_flops_per_seq": 10**11, "mfu_peak_flops": 10**15,
            "gpu_peak_memory_mib": 9000, "peak_rss_mib": 8000, "remat": "none",
            "remat_reason": "auto: ...", "dtype_policy": "mixed_bfloat16"}
    peer = {"seq_per_sec": 2500.0, "step_ms": 102.4, "gpu_peak_memory_mib": 12000,
            "peak_rss_mib": 3000, "device": "NVIDIA H200"}
    line = compare.combine("base-128-256", ours, peer, (70.2, 40.7))
    assert line["ratio"] == 0.8 and line["memory_ratio"] == 0.75  # GPU memory on a GPU
    assert line["peer"]["mfu"] == 0.25  # 2500 seq/s x our 1e11 FLOPs over the same peak
    assert line["ours"]["step_ms"] == 128.0 and line["ours"]["remat"] == "none"
    assert (line["ours"]["wall_s"], line["peer"]["wall_s"]) == (70, 41)
    del ours["gpu_peak_memory_mib"], peer["gpu_peak_memory_mib"]
    cpu = compare.combine("base-128-256", ours, peer, (1, 1))
    assert cpu["ours"]["peak_rss_mib"] == 8000 and cpu["memory_ratio"] == 2.667


def test_a_traced_point_must_be_one_of_the_points(monkeypatch, tmp_path):
    monkeypatch.setattr("sys.argv", ["compare.py", "--trace=base-512-64",
                                     f"--output={tmp_path}/c.jsonl", "base-128-256"])
    with pytest.raises(SystemExit, match="--trace=base-512-64: not one of the points"):
        compare.main()
    monkeypatch.setattr("sys.argv", ["compare.py", "--trace=base-128-256",
                                     f"--output={tmp_path}/c.jsonl", "base-128-256:peer"])
    with pytest.raises(SystemExit, match="--trace=base-128-256: not one of the points "
                                         r"where ours runs \[\]"):
        compare.main()  # the peer's run is never traced
    assert not (tmp_path / "c.jsonl").exists()  # refused before anything ran


def test_a_point_starts_only_when_both_runs_fit():
    # On a GPU ours needs 210 s (compiling ~165 s) and the peer 150: with less than both
    # the point is skipped, not started and killed while compiling.
    assert compare.first_cap("cuda", 350) is None
    assert compare.first_cap("cuda", 400) == 250  # the peer's 150 kept back
    assert compare.first_cap("cuda", 1000) == compare.MAX_SECONDS


def test_a_skipped_point_runs_nothing_and_says_why(monkeypatch, tmp_path, capsys):
    def run_json(*args, **kwargs):
        raise AssertionError("a skipped point ran a process")
    monkeypatch.setattr(compare, "run_json", run_json)
    monkeypatch.setattr("sys.argv", ["compare.py", "--seconds=300",
                                     f"--output={tmp_path}/c.jsonl",
                                     f"--log={tmp_path}/log.txt", "small-128-512"])
    assert compare.main() == 0
    line = json.loads((tmp_path / "c.jsonl").read_text())
    assert line["point"] == "small-128-512"
    assert line["skipped"].endswith("s left, it needs 360")
    assert json.loads(capsys.readouterr().out) == line


def test_one_side_runs_alone_where_a_point_does_not_fit_whole(monkeypatch, tmp_path,
                                                               capsys):
    # 250 s left: too little for both runs (360), enough for ours (210) or the peer's
    # (150) alone, each then capped by what is left, not by the other's need.
    assert compare.first_cap("cuda", 250) is None
    assert compare.first_cap("cuda", 250, "ours") == 250
    assert compare.first_cap("cuda", 140, "peer") is None
    ran = []

    def run_json(command, seconds, log, env=None):
        ran.append((os.path.basename(command[1]), seconds, command[-1]))
        return {"seq_per_sec": 9000.0, "size": "small"}, 170.4, ""
    monkeypatch.setattr(compare, "run_json", run_json)
    for side, script in (("ours", "benchmark.py"), ("peer", "hf_electra_bench.py")):
        ran.clear()
        monkeypatch.setattr("sys.argv", [
            "compare.py", "--seconds=250", "--trace_dir=/t",
            *(["--trace=small-128-512"] if side == "ours" else []),
            f"--output={tmp_path}/{side}.jsonl", f"--log={tmp_path}/log.txt",
            f"small-128-512:{side}"])
        assert compare.main() == 0
        assert [name for name, *_ in ran] == [script]
        assert 249 <= ran[0][1] <= 250  # what is left, none kept back for the other
        if side == "ours":  # --trace names the point without its side
            assert ran[0][2] == "--profile_dir=/t/profile/small-128-512"
        line = json.loads((tmp_path / f"{side}.jsonl").read_text())
        assert line == {"point": "small-128-512", "side": side, "wall_s": 170,
                        side: {"seq_per_sec": 9000.0, "size": "small"}}
        assert json.loads(capsys.readouterr().out) == line
    monkeypatch.setattr("sys.argv", ["compare.py", "--seconds=100",
                                     f"--output={tmp_path}/skip.jsonl",
                                     f"--log={tmp_path}/log.txt", "small-128-512:peer"])
    assert compare.main() == 0
    skipped = json.loads((tmp_path / "skip.jsonl").read_text())
    assert skipped["side"] == "peer" and skipped["skipped"].endswith("s left, it needs 150")
