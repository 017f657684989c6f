"""Our benchmark and the PyTorch peer, back to back at each point: one JSON line per point.

On a lent GPU machine after setup.sh (`source tools/device/env.sh` first), or on a CPU
(`--device=cpu`, the rehearsal). A point is SIZE-SEQ-BATCH (e.g. base-128-256). At each,
`tools/benchmark.py` runs, then the peer (../shared/peers/hf_electra_bench.py, outside the
project: pack.sh copies it beside this file, untracked, so that it travels) at the
same size, sequence length and batch, each in its own process under a time cap; then one
line: both figures, their ratio, each one's MFU (the peer's at our count of model FLOPs
per sequence and the same peak), each one's peak memory (the GPU allocator's high-water
mark on a GPU, the process's peak RSS on a CPU) and the device. Lines go to stdout and to
`--output`; a point that fails or is skipped for time gets a line that says so.

    bash tools/device/setup.sh && source tools/device/env.sh &&   # on the GPU machine
        python3 tools/device/compare.py --seconds=580 base-128-256
    python3 tools/device/compare.py --device=cpu --seconds=300 tiny-32-4

A point given as SIZE-SEQ-BATCH:ours or SIZE-SEQ-BATCH:peer runs one benchmark only, its
line holding that run's own JSON line: a point whose two runs do not both fit in what a
call has left runs ours in one call and the peer in the next, on the same warm machine.

`--trace=SIZE-SEQ-BATCH` (repeatable) also has ours write, at that point only, a profiler
trace to TRACE_DIR/profile/POINT and XLA's optimized HLO to TRACE_DIR/hlo/POINT (the
fusions' names, for tools/profile_summary.py's kernels); the peer runs as at any other
point.

The pack's rehearsal on a CPU (tools/device/rehearse.sh) runs it with nothing on the
path but the pack, the image's packages and the repository.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The peer's copy beside this file (pack.sh), else the one in ../shared/peers/.
PEER = next((p for p in (os.path.join(HERE, "hf_electra_bench.py"), os.path.join(
    ROOT, "..", "shared", "peers", "hf_electra_bench.py")) if os.path.exists(p)),
    os.path.join(HERE, "hf_electra_bench.py"))
# The seconds each run of a point needs at least, (ours, the peer's). On an H100 our
# process took 199 s at Base, seq 128 (165 s of it tracing and compiling), the peer's
# 145 s (docs/benchmark-log.md, "GPU"); a point that compiles longer (seq 512, Large)
# can still be cut. The CPU's pair is nominal (the rehearsal's tiny point). A point that
# cannot have both is skipped: started anyway, its second run is killed while compiling
# and the device time is lost (the H100 lease lost 180 s so).
NEEDS = {"cuda": (210, 150), "cpu": (30, 30)}
MAX_SECONDS = 300  # the most each of a point's two runs gets

# Timed steps (after warm-up steps) for each run; a GPU gets the H200 runs' bfloat16
# settings and the H100/H200 datasheet's dense bfloat16 peak (BENCHMARKS.md, "GPU").
OURS = {"cuda": ["--steps=20", "--steps_per_loop=10", "--warmup_steps=2",
                 "--matmul_size=8192", "--peak_tflops=989.4",
                 "--config.train.mixed_precision=bfloat16"],
        "cpu": ["--steps=3", "--steps_per_loop=1", "--warmup_steps=1",
                "--matmul_size=256"]}
# The peer's tiny is not ours (its Small-like 128 wide, generator a quarter): ours runs
# at its shape there. Small, Base and Large are the paper's in both.
SAME_SHAPE = {"tiny": ["--config.model.hidden_size=128", "--config.model.num_heads=2",
                       "--config.model.intermediate_size=512",
                       "--config.model.embedding_size=128",
                       "--config.model.generator_hidden_fraction=0.25"]}
PEER_FLAGS = {"cuda": ["--steps=20", "--warmup_steps=5"],
              "cpu": ["--steps=3", "--warmup_steps=1", "--nocompile"]}


def parse_point(text: str) -> tuple[str, int, int, str]:
    """(size, sequence length, batch, side) of SIZE-SEQ-BATCH[:ours|:peer]; side "both"
    where none is named."""
    point, colon, side = text.partition(":")
    try:
        size, seq, batch = point.split("-")
        if colon and side not in ("ours", "peer"):
            raise ValueError(side)
        return size, int(seq), int(batch), side or "both"
    except ValueError:
        raise SystemExit(f"point {text!r}: give SIZE-SEQ-BATCH, e.g. base-128-256, or with "
                         ":ours or :peer for one benchmark") from None


def need(device: str, side: str = "both") -> int:
    """The seconds a point needs at least on `device` for the runs of `side`."""
    ours_need, peer_need = NEEDS[device]
    return {"both": ours_need + peer_need, "ours": ours_need, "peer": peer_need}[side]


def first_cap(device: str, left: float, side: str = "both") -> float | None:
    """The first run's time cap at a point started with `left` seconds to go (ours, or
    the peer's under side="peer"): at most MAX_SECONDS, less the peer's need where the
    peer runs after it; None where the runs' `NEEDS` do not fit. The peer then gets what
    is left, at least its need."""
    if left < need(device, side):
        return None
    return min(MAX_SECONDS, left - (NEEDS[device][1] if side == "both" else 0))


def one_side(side: str, figures: dict, wall: float) -> dict:
    """The figures of a point where one benchmark ran (POINT:SIDE): its own JSON line
    whole (main puts the point and the side before them, as on each one-sided line)."""
    return {"wall_s": round(wall), side: figures}


def run_json(command: list[str], seconds: float, log,
             env=None) -> tuple[dict | None, float, str]:
    """(the last JSON line `command` printed or None, wall seconds, why it has none)."""
    start = time.time()
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=seconds,
                              check=False, env=env)
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout or ""
        log.write(output if isinstance(output, str) else output.decode(errors="replace"))
        return None, time.time() - start, f"killed after {seconds:.0f} s"
    log.write(done.stdout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = " | ".join(done.stdout.strip().splitlines()[-2:])
        return None, time.time() - start, f"exit {done.returncode}: {tail[-300:]}"
    return json.loads(lines[-1]), time.time() - start, ""


def combine(point: str, ours: dict, peer: dict, walls: tuple[float, float]) -> dict:
    gpu = ours.get("gpu_peak_memory_mib") is not None
    memory = "gpu_peak_memory_mib" if gpu else "peak_rss_mib"
    flops = ours["model_flops_per_seq"]
    peak = (ours["mfu_peak_flops"] or 0) * ours.get("mfu_accelerators", 1)  # same chips
    return {
        "point": point, "size": ours["size"], "seq_len": ours["seq_len"],
        "batch_size": ours["batch_size"], "device": ours.get("device"),
        "ratio": round(ours["seq_per_sec"] / peer["seq_per_sec"], 3),
        "memory_ratio": (round(ours[memory] / peer[memory], 3)
                         if ours.get(memory) and peer.get(memory) else None),
        "ours": {"seq_per_sec": ours["seq_per_sec"],
                 "step_ms": round(ours["step_time_median_s"] * 1e3, 1),
                 "mfu": ours["mfu"], memory: ours.get(memory),
                 "remat": ours.get("remat"), "remat_reason": ours.get("remat_reason"),
                 "dtype_policy": ours.get("dtype_policy"), "wall_s": round(walls[0])},
        "peer": {"seq_per_sec": peer["seq_per_sec"], "step_ms": peer.get("step_ms"),
                 "mfu": round(peer["seq_per_sec"] * flops / peak, 4) if peak else None,
                 memory: peer.get(memory), "device": peer.get("device"),
                 "wall_s": round(walls[1])},
    }


def run_ours(args, point: str, cap: float, log) -> tuple[dict | None, float, str]:
    """tools/benchmark.py at `point` (run_json's triple); traced where --trace names it."""
    size, seq, batch, _ = parse_point(point)
    trace, env = [], None
    if point in args.trace:
        trace = [f"--profile_dir={args.trace_dir}/profile/{point}"]
        env = dict(os.environ, XLA_FLAGS=(
            f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to="
            f"{args.trace_dir}/hlo/{point} --xla_dump_hlo_as_text").strip())
    return run_json(
        [sys.executable, "tools/benchmark.py", f"--config=configs/electra.py:{size}",
         f"--seq_len={seq}", f"--batch_size={batch}", *OURS[args.device],
         *SAME_SHAPE.get(size, []), *args.ours_flags, *trace], cap, log, env=env)


def peer_command(args, point: str) -> list[str]:
    """The peer's command line at `point`."""
    size, seq, batch, _ = parse_point(point)
    threads = [f"--threads={args.threads}"] if args.device == "cpu" else []
    return [args.peer_python, PEER, f"--device={args.device}", f"--size={size}",
            f"--seq_len={seq}", f"--batch_size={batch}", *PEER_FLAGS[args.device], *threads]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("points", nargs="+",
                        help="SIZE-SEQ-BATCH[:ours|:peer], e.g. base-128-256")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--seconds", type=float, default=500, help="for all the points")
    parser.add_argument("--threads", type=int, default=2, help="the peer's, on a CPU")
    parser.add_argument("--peer_python", default=sys.executable,
                        help="the peer's interpreter (PyTorch's; rehearse.sh's differs)")
    parser.add_argument("--ours_flags", action="append", default=[],
                        help="more flags of tools/benchmark.py, e.g. --profile")
    parser.add_argument("--trace", action="append", default=[],
                        help="SIZE-SEQ-BATCH: where ours also writes a profile and HLO")
    parser.add_argument("--trace_dir", default="/tmp/electra_trace")
    parser.add_argument("--output", default=os.path.join(os.environ.get("OUT", "/tmp"),
                                                         "compare.jsonl"))
    parser.add_argument("--log", default=os.path.join(os.environ.get("OUT", "/tmp"),
                                                      "compare_log.txt"))
    args = parser.parse_args()
    points = [parse_point(text) for text in args.points]  # each refused before any runs
    names = [f"{size}-{seq}-{batch}" for size, seq, batch, _ in points]
    ours_run = [name for name, (*_, side) in zip(names, points) if side != "peer"]
    for text in args.trace:
        if text not in ours_run:
            raise SystemExit(f"--trace={text}: not one of the points where ours runs "
                             f"{ours_run}")
    end = time.time() + args.seconds
    # The peer sees the image's packages only: TF's pack on the path (PYTHONPATH) holds
    # other versions of some of them (protobuf, optree).
    peer_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with open(args.output, "a", encoding="utf-8") as out, \
            open(args.log, "a", encoding="utf-8") as log:
        for text, (*_, side) in zip(names, points):
            left = end - time.time()
            cap = first_cap(args.device, left, side)
            if cap is None:
                result = {"point": text, "skipped": f"{left:.0f} s left, it needs "
                                                    f"{need(args.device, side)}"}
            else:
                ours = peer = None
                ours_wall = peer_wall = 0.0
                ours_error = peer_error = ""
                if side != "peer":
                    ours, ours_wall, ours_error = run_ours(args, text, cap, log)
                if side != "ours":
                    peer, peer_wall, peer_error = run_json(
                        peer_command(args, text),
                        min(MAX_SECONDS, max(NEEDS[args.device][1], end - time.time())),
                        log, env=peer_env)
                if ours and peer:
                    result = combine(text, ours, peer, (ours_wall, peer_wall))
                elif side != "both" and (ours or peer):
                    result = one_side(side, ours or peer, ours_wall + peer_wall)
                else:
                    result = {"point": text, "ours_error": ours_error or None,
                              "peer_error": peer_error or None,
                              "ours_seq_per_sec": ours and ours["seq_per_sec"],
                              "peer_seq_per_sec": peer and peer["seq_per_sec"]}
            if side != "both":
                result = {"point": text, "side": side, **result}
            line = json.dumps(result)
            print(line, flush=True)
            out.write(line + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
