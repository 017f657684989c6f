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


ON_BAD = ("error", "skip")  # config.data.on_bad: what a task's reader does with a bad row
SKIP_HINT = " (config.data.on_bad=skip skips such rows)"  # ends on_bad=error's message


class BadRows:
    """What a fine-tuning task's reader does with the rows (GLUE rows, CoNLL sentences,
    SQuAD questions) it cannot use, by `config.data.on_bad`: "error" raises `error` at the
    first, naming it and the way past it; "skip" counts them and keeps the first's
    `where: problem` for the run's log (`skipped_note`).

    >>> rows = BadRows("skip")
    >>> rows.bad("dev.tsv:3", "empty sentence"); rows.bad("dev.tsv:9", "label 'x'")
    >>> skipped_note(rows.skipped, rows.first_skipped)
    '2 skipped; first: dev.tsv:3: empty sentence'
    >>> BadRows("error").bad("a.tsv:3", "empty")
    Traceback (most recent call last):
    ...
    electra_tf.errors.UserError: a.tsv:3: empty (config.data.on_bad=skip skips such rows)
    """

    def __init__(self, on_bad: str, error: type[Exception] = UserError):
        check_choice("config.data.on_bad", on_bad, ON_BAD, error)
        self.on_bad, self.error = on_bad, error
        self.skipped, self.first_skipped = 0, ""

    def bad(self, where: str, problem: str) -> None:
        message = f"{where}: {problem}"
        if self.on_bad == "error":
            raise self.error(message + SKIP_HINT)
        self.skipped += 1
        self.first_skipped = self.first_skipped or message


def skipped_note(skipped: int, first_skipped: str) -> str:
    """"N skipped" and, if any were, the first's `where: problem`."""
    return f"{skipped} skipped" + (f"; first: {first_skipped}" if skipped else "")


class RunError(RuntimeError):
    """A run stopped by a fault outside the code: the message names it and says what
    was kept (the last good checkpoint) and how to go on."""
