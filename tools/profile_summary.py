r"""Where a profiled step's time goes, from a TensorBoard profiler trace.

  python tools/profile_summary.py --profile_dir=/tmp/electra_tf_benchmark/profile
  python tools/profile_summary.py --profile_dir=WORKDIR/logs/train [--top=20]
  python tools/profile_summary.py --profile_dir=DIR --hlo_dir=XLA_DUMP_DIR   # on a GPU

Reads the newest trace under the directory (`tools/benchmark.py --profile` or
`config.train.profile_steps`) and prints, per traced step: the wall time, each GPU's
kernel time by kind (matmul, XLA fusions, TF kernels outside XLA, copies) with the
busiest kernels and the share of the step the GPU was busy, and the host's TF ops
outside XLA (electra_tf/profiling.py). With --hlo_dir (the run's XLA_FLAGS had
`--xla_dump_to=XLA_DUMP_DIR --xla_dump_hlo_as_text`), each GPU's kernel time by the TF op
that made it, layers folded. Markdown tables, then one JSON line last.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from electra_tf import cli  # noqa: E402
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import json

from absl import flags

from electra_tf import errors
from electra_tf import profiling

_PROFILE_DIR = flags.DEFINE_string("profile_dir", None, "A profile directory (with "
                                   "plugins/profile/<run>/) or one .xplane.pb file.")
_TOP = flags.DEFINE_integer("top", 12, "How many kernels and host ops to list.")
_HLO_DIR = flags.DEFINE_string("hlo_dir", None, "XLA's dump of the profiled run's "
                               "programs: the GPU's kernel time by TF op, too.")


def main(argv):
    del argv
    if not _PROFILE_DIR.value:
        raise errors.UserError("--profile_dir is required")
    try:
        summary = profiling.summarize(profiling.newest_trace(_PROFILE_DIR.value), _TOP.value,
                                      _HLO_DIR.value)
    except (FileNotFoundError, ValueError) as e:
        raise errors.UserError(str(e)) from None
    print(profiling.to_markdown(summary))
    print(json.dumps(summary))


if __name__ == "__main__":
    cli.app_run(main)
