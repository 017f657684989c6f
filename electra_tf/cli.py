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

from electra_tf import errors  # pylint: disable=g-import-not-at-top,wrong-import-position


def run_main(main, argv):
    """Calls `main(argv)`; a `UserError` prints `error: <message>` and exits with 2, a
    `RunError` the same with exit code 1."""
    try:
        return main(argv)
    except errors.UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except errors.RunError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


def parse_flags(argv):
    """absl's flag parsing, with a bad flag (or `--config.KEY` override: ml_collections
    raises AttributeError/KeyError/TypeError for those) as `error: ...` and exit 2."""
    from absl import flags  # pylint: disable=g-import-not-at-top

    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
        message = str(e).replace("\\n", " ").replace("\\'", "'")
        if len(message) > 1 and message[0] == message[-1] and message[0] in "'\"":
            message = message[1:-1]  # ml_collections' errors are reprs of messages
        message = " ".join(message.split())
        if isinstance(e, (AttributeError, KeyError)):  # name the override it came from
            key = message.split("'")[1] if message.count("'") >= 2 else None
            culprit = [a for a in argv[1:] if key and a.split("=")[0].endswith("." + key)]
            if culprit:
                message = f"{culprit[0].split('=')[0]}: no such key: {message}"
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def app_run(main):
    """`absl.app.run(main)` with one-line errors for bad flags and user errors."""
    from absl import app  # pylint: disable=g-import-not-at-top

    app.run(lambda argv: run_main(main, argv), flags_parser=parse_flags)
