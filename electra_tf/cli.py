"""What every command-line tool shares: quiet TF start-up, one-line errors, exit code 2.

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
    """Calls `main(argv)`; a `UserError` prints `error: <message>` and exits with 2."""
    try:
        return main(argv)
    except errors.UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def app_run(main):
    """`absl.app.run(main)` with `run_main`'s handling of user errors."""
    from absl import app  # pylint: disable=g-import-not-at-top

    app.run(lambda argv: run_main(main, argv))
