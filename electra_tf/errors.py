"""The errors a command-line tool reports in one line instead of a traceback.

`UserError`: the user's input is bad (exit code 2). `RunError`: a run stopped for a
reason the message explains, such as non-finite values or a lost worker (exit code 1).
Command-line tools turn both into `error: <message>` (`electra_tf.cli`); anything else
is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """Bad input: a file, a line, a flag or a config field. The message names it."""


class RunError(RuntimeError):
    """A run stopped by a fault outside the code: the message names it and says what
    was kept (the last good checkpoint) and how to go on."""
