"""What every command-line tool shares: quiet TF start-up, one-line errors (exit code 2
for bad input, 1 for a run stopped by a fault).

>>> def main(argv):
...     raise errors.UserError("corpus.txt: line 3 is not UTF-8")
>>> try:
...     run_main(main, ["tool"])
... except SystemExit as e:
...     print(e.code)
2
"""

import os
import sys

# TF's C++ start-up chatter (no CUDA here, oneDNN notes) hides the tool's own output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Where TF turns oneDNN on (by itself on CPUs with AVX512_VNNI, AVX512_BF16 or AMX), its
# allocator pools every large buffer for the life of the process: the step's working set
# stays resident between steps, 1 GiB more for Small at batch 32. With this, those buffers
# come from malloc and go back after each step, at the same speed (BENCHMARKS.md,
# "Memory"). Read when TF starts; a value the user set is kept.
os.environ.setdefault("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")
# Before XLA compiles a function, TF's bridge runs TF's constant folding on its graph,
# which evaluates every constant subgraph on the host and holds the results at once: it
# took the compiling benchmark of Small (selective recomputation) to 4025 MiB, 3242 with
# the dropout masks' index out of its reach (model/dropout.py), and to 3006 MiB, the
# steps' own peak, without it (BENCHMARKS.md, "Memory"). XLA folds constants itself; a
# value the user set is kept.
if "tf_xla_disable_constant_folding" not in os.environ.get("TF_XLA_FLAGS", ""):
    os.environ["TF_XLA_FLAGS"] = " ".join(filter(None, (
        os.environ.get("TF_XLA_FLAGS", ""), "--tf_xla_disable_constant_folding=true")))

from electra_tf.training import memory  # pylint: disable=g-import-not-at-top,wrong-import-position


def _is_our_tool(main_module) -> bool:
    """Whether `__main__` is one of this project's tools (`python tools/X.py` from a
    checkout, `python -m electra_tf.train`), not a test runner, a debugger or a user's
    program that imports electra_tf."""
    if sys.gettrace() is not None:  # pdb, debugpy: a restart would lose the session
        return False
    spec = getattr(main_module, "__spec__", None)
    if spec is not None and (spec.name or "").startswith("electra_tf."):
        return True
    path = getattr(main_module, "__file__", None)
    if not path:
        return False
    folder = os.path.dirname(os.path.realpath(path))
    return (os.path.basename(folder) == "tools"
            and os.path.isdir(os.path.join(os.path.dirname(folder), "electra_tf")))


# A tool restarts itself once, before TF is imported, with malloc asking for huge pages
# (training/memory.py: the step's buffers come without ~0.5M page faults a step).
if _is_our_tool(sys.modules.get("__main__")):
    memory.restart_with_huge_pages()

# Two malloc arenas instead of up to 8 per core: less freed memory kept apart, at the same
# speed (BENCHMARKS.md, "Memory"); before TF starts its threads.
memory.limit_arenas(2)

import importlib.util  # pylint: disable=g-import-not-at-top,wrong-import-position
import logging  # pylint: disable=g-import-not-at-top,wrong-import-position

from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
from electra_tf import errors  # pylint: disable=g-import-not-at-top,wrong-import-position


def _installed_at(names) -> tuple[str, ...]:
    """The directories the packages `names` are installed in (found, not imported)."""
    directories = []
    for name in names:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            directories.append(os.path.join(os.path.realpath(location), ""))
    return tuple(directories)


# Libraries whose INFO lines are their internals, not our progress (TF's checkpoint saver
# logs "Sharding callback duration: N microseconds" after every save through absl, the
# logger our own progress lines use). Their warnings and errors still show. Matched by
# where they are installed, so that our own files never are, wherever they live.
_QUIET_INFO = _installed_at(
    ("tensorflow", "keras", "tf_keras", "tensorflow_datasets", "tensorflow_text"))


class _LibraryInfoFilter(logging.Filter):
    def filter(self, record):
        return record.levelno >= logging.WARNING or not os.path.realpath(
            record.pathname).startswith(_QUIET_INFO)


absl_logging.get_absl_logger().addFilter(_LibraryInfoFilter())
# TF's own Python logger too ("Assets written to: ..." on every SavedModel save).
logging.getLogger("tensorflow").addFilter(_LibraryInfoFilter())


def run_main(main, argv):
    """Calls `main(argv)`; a `UserError` prints `error: <message>` and exits with 2, a
    `RunError` the same with exit code 1."""
    try:
        return main(argv)
    except errors.UserError as e:
        _exit_with(e)
    except errors.RunError as e:
        _exit_with(e, code=1)


def parse_flags(argv):
    """absl's flag parsing, with a bad flag (or `--config.KEY` override: ml_collections
    raises AttributeError/KeyError/TypeError for those) as `error: ...` and exit 2."""
    from absl import flags  # pylint: disable=g-import-not-at-top

    try:
        parsed = flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError, OSError) as e:
        _exit_with(_unreadable_config_file(e, argv) or _config_file_error(e)
                   or _override_error(e, argv))
    except (SyntaxError, NameError, ImportError) as e:  # a config file's own code
        _exit_with(f"{_config_arg(argv)}: {type(e).__name__}: {' '.join(str(e).split())}")
    for name in flags.FLAGS:
        value = flags.FLAGS[name].value
        if type(value).__name__ == "_ErrorConfig":  # read when used: read it now
            error = object.__getattribute__(value, "_error")
            _exit_with(_unreadable_config_file(error, argv)
                       or f"{_config_arg(argv)}: {' '.join(str(error).split())}")
    return parsed


def _config_arg(argv) -> str:
    """The last `--config=FILE[:ARG]` argument (the binaries' config file flag)."""
    given = [a for a in argv[1:] if a.startswith("--config=")]
    return given[-1] if given else "--config"


def _unreadable_config_file(e, argv) -> str | None:
    """ml_collections keeps a config file it cannot read as a config that raises
    `IOError` when used, or as soon as an override sets a field of it."""
    if not isinstance(e, OSError):  # flag parsing raises OSError for config files only
        return None
    # "Configuration is not available because of an earlier failure to load: <why>",
    # the reason on the last line (the paths tried above it).
    reason = str(e).strip().splitlines()[-1].split("earlier failure to load:")[-1].strip()
    return f"{_config_arg(argv)}: cannot read the config file ({reason})"


def _exit_with(message, code: int = 2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def _config_file_error(e) -> str | None:
    """`--config=FILE:ARG: <reason>` for an error that a config file's `get_config`
    raised. ml_collections re-raises it with the traceback as its message (and absl
    prefixes the flag): the reason is the first error of the chain."""
    marker = ": Error whilst parsing config file"
    if marker not in str(e):
        return None
    flag = str(e).split(marker)[0].removeprefix("flag ")
    first = e
    while first.__context__ is not None:
        first = first.__context__
    return f"{flag}: {' '.join(str(first).split())}"


def _override_error(e, argv) -> str:
    """A bad flag or `--config.KEY=VALUE` override, in one line."""
    message = str(e).replace("\\n", " ").replace("\\'", "'")
    if len(message) > 1 and message[0] == message[-1] and message[0] in "'\"":
        message = message[1:-1]  # ml_collections' errors are reprs of messages
    message = " ".join(message.split())
    if isinstance(e, (AttributeError, KeyError)):  # name the override it came from
        key = message.split("'")[1] if message.count("'") >= 2 else None
        culprit = [a for a in argv[1:] if key and a.split("=")[0].endswith("." + key)]
        if culprit:
            message = f"{culprit[0].split('=')[0]}: no such key: {message}"
    return message


def app_run(main):
    """`absl.app.run(main)` with one-line errors for bad flags and user errors."""
    from absl import app  # pylint: disable=g-import-not-at-top

    app.run(lambda argv: run_main(main, argv), flags_parser=parse_flags)
