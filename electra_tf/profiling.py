"""Where a profiled step's time goes: a summary of a TensorBoard profiler trace.

`tools/benchmark.py --profile` and `config.train.profile_steps` write traces
(`<dir>/plugins/profile/<run>/<host>.xplane.pb`) that TensorBoard's Profile tab shows.
This module reads the newest run's XSpace and answers the questions a benchmark table
needs, in numbers rather than in a trace viewer:

- the steps traced (the `train` TraceMe events the benchmark and the loop wrap each
  step in) and their wall time;
- on each GPU, the kernel time per step grouped by what the kernels do (matmuls, XLA
  fusions, TF kernels outside XLA, copies), the busiest kernels, and how much of the
  steps' wall time the GPU was busy at all (the union of its kernels' intervals over
  every stream): the rest is time the GPU waited for the host;
- on the host, the time per step of the TF ops the executor ran outside XLA, by op type,
  summed over threads (on a CPU they do the work; on a GPU they launch it);
- with XLA's dump of the compiled programs (`hlo_dir`: `--xla_dump_to=DIR
  --xla_dump_hlo_as_text`), each GPU kernel's time by the TF op its HLO instruction came
  from (`by_tf_op`): XLA names kernels after deduplicated fusions, which say little,
  while each kernel event carries its instruction (`hlo_op`) and the dump that
  instruction's TF op (`metadata={op_type=... op_name=...}`). Layer numbers and the
  scopes' `_1` suffixes are folded, so that the twelve layers' copies of an op add up.

    >>> category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64")
    'matmul'
    >>> category("loop_multiply_fusion_12")
    'xla_fusion'
"""

import collections
import os
import re

from absl import logging
import tensorflow as tf

from electra_tf import compat

STEP_EVENT = "train"  # the TraceMe name around each profiled step

# Kernel names, lower-cased, by what they do. The first match wins.
_CATEGORIES = (
    ("memcpy", ("memcpy", "memset")),
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "matmul", "sm90_", "sm80_",
                "ampere_", "dot_")),
    ("xla_fusion", ("fusion", "loop_", "input_", "wrapped_", "triton", "reduce",
                    "softmax", "convert", "transpose", "copy", "concatenate")),
    ("tf_kernel", ("eigen", "tensorflow::", "tensorflow_", "functor")),
)


def category(kernel: str) -> str:
    """What a GPU kernel does, by its name: matmul, xla_fusion, tf_kernel (TF's own
    kernels, outside XLA: the optimizer update, metrics), memcpy, or other."""
    name = kernel.lower()
    for label, needles in _CATEGORIES:
        if any(n in name for n in needles):
            return label
    return "other"


def run_traced(trainer, iterator, num_steps: int) -> None:
    """`num_steps` training steps launched one at a time, each inside a `STEP_EVENT`
    TraceMe (the step markers that `summarize` and the Profile tab's step-time graph
    read; the steps of one compiled loop would show as one)."""
    for _ in range(num_steps):
        step = int(trainer.step.numpy())
        with compat.step_trace(STEP_EVENT, step):
            trainer.run_loop(iterator, 1)
            int(trainer.step.numpy())  # waits for the step


class LoopProfiler:
    """config.train.profile_steps for the training loop: a TensorBoard profile of that
    many steps, the first after the first loop (its tracing and compilation are not what a
    profile is for), over as many loops as they take, written to `logdir` by the chief.
    Every worker runs those steps one at a time, as the others do (they step together).
    Each start of a run profiles: a resumed run adds a profile of its own. A stage that
    begins inside them (two_stage's switch) has its first, compiling, step traced too."""

    def __init__(self, steps: int, logdir: str, chief: bool):
        self.logdir, self.chief = logdir, chief
        self.asked = self.remaining = int(steps)
        self.loops, self.first, self.tracing = 0, None, False

    def run_loop(self, trainer, iterator, num_steps: int) -> None:
        """`num_steps` steps, as `trainer.run_loop`, the ones due traced one by one."""
        self.loops += 1
        traced = min(num_steps, self.remaining) if self.loops > 1 else 0
        if traced:
            if self.first is None:
                self.first = int(trainer.step.numpy()) + 1
                if self.chief:
                    tf.profiler.experimental.start(self.logdir)
                    self.tracing = True
            run_traced(trainer, iterator, traced)
            self.remaining -= traced
            if not self.remaining:
                self.stop(trainer)
        if num_steps > traced:
            trainer.run_loop(iterator, num_steps - traced)

    def stop(self, trainer) -> None:
        """Ends the profile (where the run stops before its steps were traced: with
        fewer); says where it went, or that the run ended before anything was traced."""
        if self.tracing:
            self.tracing = False
            try:  # called in the loop's `finally`: never in place of the run's own error
                tf.profiler.experimental.stop()
            except (tf.errors.OpError, RuntimeError) as e:
                logging.warning("The profile in %s could not be written: %s", self.logdir, e)
                return
            logging.info("Profiled steps %d-%d into %s (TensorBoard: Profile)", self.first,
                         int(trainer.step.numpy()), self.logdir)
        elif self.chief and self.asked and self.first is None and self.loops == 1:
            logging.warning("config.train.profile_steps=%d: the run ended within its first "
                            "loop (config.train.steps_per_loop): nothing was profiled",
                            self.asked)


def newest_trace(profile_dir: str) -> str:
    """The newest run's .xplane.pb under a profile directory (or the file itself)."""
    if profile_dir.endswith(".xplane.pb"):
        return profile_dir
    runs = sorted(tf.io.gfile.glob(os.path.join(profile_dir, "plugins", "profile", "*")))
    traces = sorted(tf.io.gfile.glob(os.path.join(runs[-1], "*.xplane.pb"))) if runs else []
    if not traces:
        raise FileNotFoundError(f"{profile_dir}: no plugins/profile/*/*.xplane.pb in it")
    return traces[0]


def _starts(line):
    """(event, start_ps) of a line's events, on the profile's clock."""
    base = line.timestamp_ns * 1000
    for event in line.events:
        yield event, base + event.offset_ps


def _events(plane, line):
    """(name, start_ps, end_ps) of a line's events, on the profile's clock."""
    for event, start in _starts(line):
        yield plane.event_metadata[event.metadata_id].name, start, start + event.duration_ps


def _union_ps(intervals, window) -> int:
    """Picoseconds inside `window` covered by at least one interval."""
    lo, hi = window
    clipped = sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi)
    total, end = 0, lo
    for s, e in clipped:
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def summarize(path: str, top: int = 12, hlo_dir: str | None = None) -> dict:
    """The summary of one .xplane.pb (see the module docstring); times in ms per step.
    With `hlo_dir` (XLA's dump of the profiled programs) also `by_tf_op`: {device:
    {"mapped_ms", "unmapped_ms", "ops": [(type, folded TF op name, ms, launches per
    step), ...] (the 3 · `top` busiest)}}."""
    tf_ops = None if hlo_dir is None else hlo_tf_ops(hlo_dir)
    space = compat.xspace()
    with tf.io.gfile.GFile(path, "rb") as f:  # a run's logs may be on gs://
        space.ParseFromString(f.read())
    host = next((p for p in space.planes if p.name == "/host:CPU"), None)
    steps = []
    host_ops = collections.Counter()
    if host is not None:
        for line in host.lines:
            for name, start, end in _events(host, line):
                if name == STEP_EVENT:
                    steps.append((start, end))
    steps.sort()
    if not steps:
        raise ValueError(f"{path}: no '{STEP_EVENT}' step events: profile with "
                         "tools/benchmark.py --profile or config.train.profile_steps")
    window = (steps[0][0], steps[-1][1])
    if host is not None:  # TF ops the executor ran itself (not XLA's), on any thread
        for line in host.lines:
            for name, start, end in _events(host, line):
                kind = name.split(":")[-1].strip()  # TF names op events "op_name:OpType"
                if (":" in name and "::" not in name and not kind.startswith("__inference")
                        and window[0] <= start < window[1]):  # not the function calls
                    host_ops[kind] += end - start
    n = len(steps)
    ms = lambda ps: round(ps / 1e9 / n, 3)  # noqa: E731: ps in the window → ms per step
    wall_ps = sum(e - s for s, e in steps)
    result = {"trace": path, "steps": n, "step_wall_ms": ms(wall_ps),
              "host_tf_ops_ms": {k: ms(v) for k, v in host_ops.most_common(top)},
              "devices": {}}
    if tf_ops is not None:
        result["by_tf_op"] = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        kernels, intervals = collections.Counter(), []
        op_ps, op_launches, unmapped_ps = collections.Counter(), collections.Counter(), 0
        for line in plane.lines:
            if not line.name.startswith("Stream"):  # kernels and copies are on streams
                continue
            for event, start in _starts(line):
                if not window[0] <= start < window[1]:
                    continue
                kernels[plane.event_metadata[event.metadata_id].name] += event.duration_ps
                intervals.append((start, start + event.duration_ps))
                if tf_ops is not None:
                    op = tf_ops.get((_stat(plane, event, "hlo_module"),
                                     _stat(plane, event, "hlo_op")))
                    if op is None:
                        unmapped_ps += event.duration_ps
                    else:
                        key = (op[0], fold_op_name(op[1]))
                        op_ps[key] += event.duration_ps
                        op_launches[key] += 1
        by_category = collections.Counter()
        for name, ps in kernels.items():
            by_category[category(name)] += ps
        busy = sum(_union_ps(intervals, step) for step in steps)
        total = sum(kernels.values())
        result["devices"][plane.name] = {
            "kernel_ms": ms(total),
            "busy_ms": ms(busy),
            "busy_fraction": round(busy / wall_ps, 4) if wall_ps else 0.0,
            "by_category_ms": {k: ms(v) for k, v in by_category.most_common()},
            "top_kernels_ms": {k[:120]: ms(v) for k, v in kernels.most_common(top)},
        }
        if tf_ops is not None:
            result["by_tf_op"][plane.name] = {
                "mapped_ms": ms(sum(op_ps.values())), "unmapped_ms": ms(unmapped_ps),
                "ops": [(kind, name, ms(ps), round(op_launches[kind, name] / n, 1))
                        for (kind, name), ps in op_ps.most_common(3 * top)]}
    return result


def _stat(plane, event, wanted: str):
    """The string value of `event`'s stat called `wanted` (XLA interns kernel events'
    `hlo_module` and `hlo_op` as references to stat metadata), or None."""
    for stat in event.stats:
        if plane.stat_metadata[stat.metadata_id].name == wanted:
            if stat.HasField("ref_value"):
                return plane.stat_metadata[stat.ref_value].name
            return stat.str_value
    return None


_HLO_METADATA = re.compile(
    r'^\s*(?:ROOT )?%(\S+) = .*?metadata=\{op_type="([^"]*)" op_name="([^"]*)"')
_MODULE_NAME = re.compile(r"^HloModule (\S+?),")


def hlo_tf_ops(hlo_dir: str) -> dict:
    """{(module, instruction): (op type, op name)} of every `*after_optimizations.txt`
    program in XLA's dump directory `hlo_dir`; FileNotFoundError where it has none."""
    ops = {}
    paths = tf.io.gfile.glob(os.path.join(hlo_dir, "*after_optimizations.txt"))
    if not paths:
        raise FileNotFoundError(f"{hlo_dir}: no *after_optimizations.txt programs in it "
                                "(XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text)")
    for path in paths:
        module = None
        with tf.io.gfile.GFile(path, "r") as f:
            for line in f:
                if module is None:
                    match = _MODULE_NAME.match(line)
                    module = match.group(1) if match else os.path.basename(path)
                    continue
                match = _HLO_METADATA.match(line)
                if match:
                    ops[module, match.group(1)] = match.group(2), match.group(3)
    return ops


def fold_op_name(name: str) -> str:
    """A TF op name with every scope's numeric suffixes (layer numbers, TF's and Keras'
    uniquifying `_1`s) folded, so that one op of every layer gets one name.

    >>> fold_op_name("gradient_tape/while/discriminator_1/transformer_layer_11_1/"
    ...              "self_attention_layer_1/query_1/MatMul/MatMul_1")
    'gradient_tape/while/discriminator/transformer_layer/self_attention_layer/query/MatMul/MatMul'
    """
    return re.sub(r"(_\d+)+(?=/|$)", "", name)


def to_markdown(summary: dict) -> str:
    """Tables of a summary, for BENCHMARKS.md or a terminal."""
    lines = [f"{summary['steps']} steps traced, {summary['step_wall_ms']:.1f} ms wall each "
             f"({summary['trace']})", ""]
    for device, d in summary["devices"].items():
        lines += [f"{device}: busy {d['busy_ms']:.1f} ms of each step "
                  f"({100 * d['busy_fraction']:.0f}%), kernels {d['kernel_ms']:.1f} ms", "",
                  "| kernels | ms per step | share of kernel time |", "|---|---|---|"]
        lines += [f"| {k} | {v:.2f} | {100 * v / max(d['kernel_ms'], 1e-9):.0f}% |"
                  for k, v in d["by_category_ms"].items()]
        lines += ["", "| kernel | ms per step |", "|---|---|"]
        lines += [f"| `{k}` | {v:.2f} |" for k, v in d["top_kernels_ms"].items()]
        lines.append("")
    if summary["host_tf_ops_ms"]:
        lines += ["| host TF op (outside XLA) | ms per step |", "|---|---|"]
        lines += [f"| {k} | {v:.2f} |" for k, v in summary["host_tf_ops_ms"].items()]
    for device, d in summary.get("by_tf_op", {}).items():
        lines += ["", f"{device}: kernels by TF op, {d['mapped_ms']:.1f} ms a step mapped "
                  f"through the HLO dump, {d['unmapped_ms']:.1f} ms not", "",
                  "| op type | TF op (layers folded) | ms per step | launches per step |",
                  "|---|---|---|---|"]
        lines += [f"| {kind} | `{name}` | {ms:.2f} | {count:g} |"
                  for kind, name, ms, count in d["ops"]]
    return "\n".join(lines)
