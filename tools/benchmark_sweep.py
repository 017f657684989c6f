r"""Runs tools/benchmark.py over a grid, one fresh process per point; writes a table.

  python tools/benchmark_sweep.py --config=configs/electra.py:small \
      --seq_lens=128,256,512 --batch_sizes=8,32,128 --steps=5 --out=/tmp/sweep
  python tools/benchmark_sweep.py --mirrored --seq_lens=128 --batch_sizes=32,128 \
      --out=/tmp/mirrored      # one_device vs mirrored over --cpu_devices logical CPUs

Each point is its own process because peak RSS (`ru_maxrss`) is per process: points run
in one process would all report the largest one's. Each prints its figures as one JSON
line; this tool parses it and writes `<out>.md` (a Markdown table headed by the command,
the machine and the date) and `<out>.json` (every point's full figures), rewritten after
every point, so an interrupted sweep keeps what it measured. A point that fails (out of
memory, a batch the replicas cannot divide, a timeout) is recorded as failed, with the
reason, and the sweep goes on.

--mirrored runs each (seq, batch) twice at the same global batch: `strategy=one_device`
on the undivided CPU, then `strategy=mirrored` over `--cpu_devices` logical CPUs (which
share the same cores and thread pools), and reports seq/s per replica and the speed-up.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from absl import flags

from electra_tf import errors
from electra_tf import progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARK = os.path.join(ROOT, "tools", "benchmark.py")

_CONFIG = flags.DEFINE_string("config", "configs/electra.py:small",
                              "benchmark.py's --config (path relative to the repository).")
_SEQ_LENS = flags.DEFINE_list("seq_lens", ["128", "256", "512"], "Sequence lengths.")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", ["8", "32", "128"], "Global batch sizes.")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed steps per point.")
_WARMUP_STEPS = flags.DEFINE_integer("warmup_steps", 2, "Untimed steps per point.")
_MIRRORED = flags.DEFINE_bool("mirrored", False, "Compare strategy=one_device with "
                              "strategy=mirrored over --cpu_devices logical CPUs.")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", 2, "--mirrored: logical CPU devices.")
_BENCHMARK_FLAGS = flags.DEFINE_multi_string(
    "benchmark_flag", [], "A flag passed on to every benchmark.py run (repeatable), e.g. "
    "--benchmark_flag=--config.train.jit_compile=false.")
_TIMEOUT_S = flags.DEFINE_integer("timeout_s", 3600, "Seconds before a point counts as "
                                  "failed.")
_OUT = flags.DEFINE_string("out", "/tmp/electra_tf_benchmark/sweep",
                           "Writes <out>.md and <out>.json.")


def _ints(flag) -> list[int]:
    try:
        values = [int(value) for value in flag.value]
    except ValueError:
        values = []
    if not values:
        raise errors.UserError(f"--{flag.name}: integers, comma-separated. Received: "
                               f"`{','.join(flag.value)}`")
    return values


def points() -> list[dict]:
    """The grid, smallest sequences first (the points likeliest to fail come last)."""
    strategies = ["one_device", "mirrored"] if _MIRRORED.value else [None]
    return [{"seq_len": seq, "batch_size": batch, "runtime_strategy": strategy}
            for seq in _ints(_SEQ_LENS) for batch in _ints(_BATCH_SIZES)
            for strategy in strategies]


def benchmark_command(point: dict) -> list[str]:
    command = [sys.executable, BENCHMARK, f"--config={_CONFIG.value}",
               f"--seq_len={point['seq_len']}", f"--batch_size={point['batch_size']}",
               f"--steps={_STEPS.value}", f"--warmup_steps={_WARMUP_STEPS.value}"]
    if point["runtime_strategy"]:
        command.append(f"--config.runtime.strategy={point['runtime_strategy']}")
    if point["runtime_strategy"] == "mirrored":
        command.append(f"--config.runtime.cpu_devices={_CPU_DEVICES.value}")
    return command + _BENCHMARK_FLAGS.value


def run_point(point: dict) -> dict:
    """`point` plus benchmark.py's figures (`strategy` is the class that ran), or
    status "failed" and the reason."""
    env = dict(os.environ)
    # This checkout's electra_tf, whether or not (or wherever) it is installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    try:
        result = subprocess.run(benchmark_command(point), capture_output=True, text=True,
                                timeout=_TIMEOUT_S.value, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {**point, "status": "failed", "reason": f"timed out after {_TIMEOUT_S.value} s"}
    figures = _last_json_line(result.stdout)
    if result.returncode == 0 and figures is not None:
        return {**figures, **point, "status": "ok"}
    return {**point, "status": "failed", "reason": _failure_reason(result)}


def _last_json_line(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def _failure_reason(result: subprocess.CompletedProcess) -> str:
    if result.returncode < 0:
        name = signal.Signals(-result.returncode).name
        hint = " (out of memory?)" if -result.returncode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    # The tool's own one-line error, else the last line naming an exception (a TF
    # error's last line is often just `[Op:...]`), else the last line.
    reason = next((line for line in reversed(lines) if line.startswith("error:")), None)
    reason = reason or next((line for line in reversed(lines)
                             if re.match(r"^[\w.]*(Error|Exception|Exhausted)\b", line)),
                            lines[-1] if lines else "no output")
    if result.returncode == 0:
        reason = "no JSON line in the output"
    return f"exit {result.returncode}: {reason[:300]}"


# ---------------------------------------------------------------------------- table
def _cell(row: dict, key: str, digits: int) -> str:
    value = row.get(key)
    return "" if value is None else f"{value:.{digits}f}"


def markdown_table(rows: list[dict], mirrored: bool) -> str:
    head = ["seq", "batch"] + (["strategy", "replicas"] if mirrored else []) + [
        "seq/s"] + (["seq/s per replica"] if mirrored else []) + [
        "steps/s", "median step (s)", "peak RSS (MiB)", "RSS at end (MiB)", "MFU"] + (
        ["vs one_device"] if mirrored else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    baseline = {}
    for row in rows:
        cells = [str(row["seq_len"]), str(row["batch_size"])]
        if mirrored:
            cells += [row["runtime_strategy"], str(row.get("replicas", ""))]
        if row["status"] != "ok":
            cells.append(f"**failed**: {row['reason']}".replace("|", "\\|"))
            lines.append("| " + " | ".join(cells + [""] * (len(head) - len(cells))) + " |")
            continue
        cells.append(_cell(row, "seq_per_sec", 2))
        if mirrored:
            cells.append(_cell(row, "seq_per_sec_per_replica", 2))
        cells += [_cell(row, "steps_per_sec", 3), _cell(row, "step_time_median_s", 3),
                  str(row["peak_rss_mib"]), str(row.get("rss_at_end_mib") or ""),
                  "" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"]
        if mirrored:
            key = (row["seq_len"], row["batch_size"])
            if row["runtime_strategy"] == "one_device":
                baseline[key] = row["seq_per_sec"]
            cells.append(f"×{row['seq_per_sec'] / baseline[key]:.2f}" if key in baseline
                         else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(rows: list[dict], command: str, date: str) -> tuple[str, dict]:
    """(the Markdown, the JSON) of the points so far."""
    done = [row for row in rows if row["status"] == "ok"]
    device = done[0]["device"] if done else "unknown (no point succeeded)"
    versions = done[0]["versions"] if done else {}
    machine = f"{device}; " + ", ".join(f"{k} {v}" for k, v in versions.items())
    markdown = (f"`{command}`\n\n{machine}; {date}\n\n"
                f"{markdown_table(rows, _MIRRORED.value)}\n")
    return markdown, {"command": command, "date": date, "device": device,
                      "versions": versions, "points": rows}


def main(argv):
    del argv
    if _STEPS.value < 1 or _TIMEOUT_S.value < 1:
        raise errors.UserError("--steps and --timeout_s must be positive")
    grid = points()
    command = shlex.join(["python", "tools/benchmark_sweep.py", *sys.argv[1:]])
    date = datetime.date.today().isoformat()
    os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
    rows, start = [], time.monotonic()
    for index, point in enumerate(grid, 1):
        name = f"seq {point['seq_len']}, batch {point['batch_size']}" + (
            f", {point['runtime_strategy']}" if point["runtime_strategy"] else "")
        print(f"[{index}/{len(grid)}] {name} ...", flush=True)
        point_start = time.monotonic()
        row = run_point(point)
        row["wall_s"] = round(time.monotonic() - point_start, 1)
        rows.append(row)
        elapsed = time.monotonic() - start
        eta = elapsed / index * (len(grid) - index)  # rough: points differ in cost
        outcome = (f"{row['seq_per_sec']:.2f} seq/s, peak RSS {row['peak_rss_mib']} MiB"
                   if row["status"] == "ok" else f"FAILED: {row['reason']}")
        print(f"[{index}/{len(grid)}] {name}: {outcome} (took "
              f"{progress.format_duration(row['wall_s'])}; elapsed "
              f"{progress.format_duration(elapsed)}, ETA {progress.format_duration(eta)})",
              flush=True)
        markdown, results = report(rows, command, date)
        with open(_OUT.value + ".md", "w", encoding="utf-8") as f:
            f.write(markdown)
        with open(_OUT.value + ".json", "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    print(f"\n{markdown}\nwritten: {_OUT.value}.md, {_OUT.value}.json")


if __name__ == "__main__":
    cli.app_run(main)
