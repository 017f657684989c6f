"""What every binary shares: `prepare_process()`, called first thing (before TensorFlow
is imported), and one-line errors (exit code 2 for bad input, 1 for a run stopped by a
fault). Importing this module changes nothing about the process.

>>> def main(argv):
...     raise errors.UserError("corpus.txt: line 3 is not UTF-8")
>>> try:
...     run_main(main, ["tool"])
... except SystemExit as e:
...     print(e.code)
2
"""

import importlib.util
import logging
import os
import sys

from absl import logging as absl_logging

from electra_tf import compat
from electra_tf import errors
from electra_tf.training import memory


def prepare_process() -> None:
    """Sets up a binary's process; call it first thing, before TensorFlow is imported
    (TF reads its settings from the environment when it loads). Values the user set stay.

    - Keras on TensorFlow, and TF's settings (`compat.tf_environment`: quiet C++ start-up,
      oneDNN's buffers from malloc, no constant folding before XLA).
    - The process restarts once with malloc's huge pages (`memory.restart_with_huge_pages`;
      not under a debugger, whose session a restart would lose).
    - Two malloc arenas instead of up to 8 per core (`memory.limit_arenas`): less freed
      memory kept apart, at the same speed (BENCHMARKS.md, "Memory").
    - The libraries' INFO lines kept out of the log our progress lines use.
    """
    if "tensorflow" in sys.modules:
        raise RuntimeError("cli.prepare_process() must run before TensorFlow is imported "
                           "(TF reads its settings from the environment when it loads)")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.update(compat.tf_environment(os.environ))
    if sys.gettrace() is None:
        memory.restart_with_huge_pages()
    memory.limit_arenas(2)
    for logger in (absl_logging.get_absl_logger(), logging.getLogger("tensorflow")):
        if not any(isinstance(f, _LibraryInfoFilter) for f in logger.filters):
            logger.addFilter(_LibraryInfoFilter())


def _installed_at(names) -> tuple[str, ...]:
    """The directories the packages `names` are installed in (found, not imported)."""
    directories = []
    for name in names:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            directories.append(os.path.join(os.path.realpath(location), ""))
    return tuple(directories)


class _LibraryInfoFilter(logging.Filter):
    """Drops the INFO lines of libraries whose INFO lines are their internals, not our
    progress (TF's checkpoint saver logs "Sharding callback duration: N microseconds"
    after every save through absl; TF's own logger "Assets written to: ..." on every
    SavedModel save). Their warnings and errors still show. Matched by where they are
    installed, so that our own files never are, wherever they live."""

    def __init__(self):
        super().__init__()
        self.quiet = _installed_at(
            ("tensorflow", "keras", "tf_keras", "tensorflow_datasets", "tensorflow_text"))

    def filter(self, record):
        return record.levelno >= logging.WARNING or not os.path.realpath(
            record.pathname).startswith(self.quiet)


def run_main(main, argv):
    """Calls `main(argv)`; a `UserError` prints `error: <message>` and exits with 2, a
    `RunError` the same with exit code 1. No binary takes positional arguments: one is
    refused so (most often a glob the shell expanded, whose other files would be left
    out)."""
    try:
        if len(argv) > 1:
            raise errors.UserError(
                f"unexpected argument(s): {' '.join(argv[1:])} (the binaries take flags "
                "only; quote a glob so that the shell leaves it whole: "
                "--input='corpus/*.txt')")
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
        error = compat.config_file_error(flags.FLAGS[name].value)  # raised when read
        if error is not None:
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
