"""pytest: the absl binaries each define `--config` and `--workdir` at import, so the
doctest collector (which imports every module of the package in one process) skips them;
they have no doctests, and their tests run them as subprocesses.

A test session's processes (xdist's workers and every process a test starts) share one
directory of XLA executables (`compat.XLA_PERSISTENT_CACHE`), named in TF_XLA_FLAGS here,
as pytest imports this file before any test module imports TensorFlow: a process that
compiles a program another compiled loads it (on a 2-core CPU, ~17 s of a 20-step tiny
run's ~50 s). A TF_XLA_FLAGS that already names one is kept (`.ci/run` names one for both
suites); naming none (`--tf_xla_persistent_cache_directory=`) turns the cache off."""

import os
import shutil
import tempfile

from electra_tf import compat

collect_ignore = ["electra_tf/train.py", "electra_tf/finetune.py"]

_flags = os.environ.get("TF_XLA_FLAGS", "")
if compat.XLA_PERSISTENT_CACHE in _flags:  # xdist's workers inherit the controller's
    _made = None
else:
    _made = tempfile.mkdtemp(prefix="electra_tf_xla_")
    os.environ["TF_XLA_FLAGS"] = " ".join(
        filter(None, (_flags, f"{compat.XLA_PERSISTENT_CACHE}={_made}")))


def pytest_unconfigure(config):  # pylint: disable=unused-argument
    if _made:
        shutil.rmtree(_made, ignore_errors=True)
