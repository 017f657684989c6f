"""pytest: the absl binaries each define `--config` and `--workdir` at import, so the
doctest collector (which imports every module of the package in one process) skips them;
they have no doctests, and their tests run them as subprocesses.

A test session's processes (xdist's workers and every process a test starts) share one
directory of XLA executables (`compat.XLA_PERSISTENT_CACHE`), made here, before any of them
imports TensorFlow: a tiny run's program compiles once a session, not once a process (on a
2-core CPU, ~20 s of a 20-step run's ~50 s). A TF_XLA_FLAGS that already names a directory
is kept (`.ci/run` names one for both suites)."""

import os
import shutil
import tempfile

from electra_tf import compat

collect_ignore = ["electra_tf/train.py", "electra_tf/finetune.py"]


def pytest_configure(config):
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if hasattr(config, "workerinput") or compat.XLA_PERSISTENT_CACHE in flags:
        return  # an xdist worker inherits the controller's environment
    directory = tempfile.mkdtemp(prefix="electra_tf_xla_")
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
    os.environ["TF_XLA_FLAGS"] = " ".join(
        filter(None, (flags, f"{compat.XLA_PERSISTENT_CACHE}={directory}")))
