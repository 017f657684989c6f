"""The errors a command-line tool reports in one line instead of a traceback.

`UserError`: the user's input is bad (exit code 2). `RunError`: a run stopped for a
reason the message explains, such as non-finite values or a lost worker (exit code 1).
Command-line tools turn both into `error: <message>` (`electra_tf.cli`); anything else
is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """Bad input: a file, a line, a flag or a config field. The message names it."""


def check_choice(key: str, value, choices, error: type[Exception] = UserError) -> None:
    """`error`, one line naming `key`, `value` and the `choices`, unless `value` is one
    of them: the message of every config key, flag or family member chosen by name.

    >>> check_choice("config.train.remat", "all", ("none", "selective"))
    Traceback (most recent call last):
    ...
    electra_tf.errors.UserError: config.train.remat='all': choose one of none, selective
    """
    if value not in choices:
        raise error(f"{key}={value!r}: choose one of {', '.join(choices)}")


class RunError(RuntimeError):
    """A run stopped by a fault outside the code: the message names it and says what
    was kept (the last good checkpoint) and how to go on."""
