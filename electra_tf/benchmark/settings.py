"""The benchmark's own settings, checked without TensorFlow: tools/benchmark.py checks
its flags with these before TF loads, and each mode's `run` with the same functions, for
a caller that is not the tool (one-line `UserError`s naming the tool's flags).

>>> check_training(batch_size=32, steps=10, warmup_steps=2, steps_per_loop=1)
>>> check_resume(steps=[0, 10], repeats=0)
Traceback (most recent call last):
...
electra_tf.errors.UserError: --resume_steps must be >= 0, --resume_repeats >= 1
"""

from electra_tf import errors


def check_training(*, batch_size: int, steps: int, warmup_steps: int, steps_per_loop: int,
                   input_batches: int = 1, peak_tflops: float | None = None) -> None:
    """Train mode's numbers."""
    if batch_size < 1 or steps < 1 or warmup_steps < 0 or steps_per_loop < 1:
        raise errors.UserError("--batch_size, --steps and --steps_per_loop must be "
                               "positive, --warmup_steps not negative")
    if input_batches < 1:
        raise errors.UserError("--input_batches must be positive")
    if peak_tflops is not None and peak_tflops <= 0:
        raise errors.UserError("--peak_tflops must be positive")


def check_resume(*, steps: list[int], repeats: int) -> None:
    """Resume mode's forged steps and repeats."""
    if not steps or min(steps) < 0 or repeats < 1:
        raise errors.UserError("--resume_steps must be >= 0, --resume_repeats >= 1")


def real_data_vocab(vocab_file: str | None, config) -> str:
    """The vocab of --real_data: --vocab_file, else the config's."""
    vocab_file = vocab_file or config.data.vocab_file
    if not vocab_file:
        raise errors.UserError("--real_data needs --vocab_file (the data's vocab.txt)")
    return vocab_file
