"""pytest: the absl binaries each define `--config` and `--workdir` at import, so the
doctest collector (which imports every module of the package in one process) skips them;
they have no doctests, and their tests run them as subprocesses."""

collect_ignore = ["electra_tf/train.py", "electra_tf/finetune.py"]
