"""The one base class of errors caused by a user's input rather than by a bug.

Command-line tools turn these into a one-line message and exit code 2 (`electra_tf.cli`);
anything else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """Bad input: a file, a line, a flag or a config field. The message names it."""
