"""Opening a TFDS dataset that was prepared beforehand, for every task family's reader.

Fine-tuning never downloads: a TFDS builder is used only where it is prepared already
(in `data_dir`, or TFDS's default data dir), and otherwise the task's own `error` says
where it looked and what to give instead (`files`: the task's files for
--config.data.dir).
"""


def where(data_dir: str | None) -> str:
    """The data dir as an error names it."""
    return data_dir or "TFDS's default data dir"


def prepared_builder(name: str, data_dir: str | None, error: type[Exception], files: str):
    """The TFDS builder `name` prepared in `data_dir`; `error` (one line naming `name`)
    when TFDS cannot open it or it is not prepared."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        prepared = builder.is_prepared()
    except Exception as e:  # TFDS raises many types for "not there"
        raise error(f"{name}: cannot open it in {where(data_dir)}: "
                    f"{(str(e).splitlines() or [type(e).__name__])[0]}") from None
    if not prepared:
        raise error(f"{name} is not prepared in {where(data_dir)} (nothing is downloaded "
                    "here): prepare it with TFDS where there is network access, or give "
                    f"{files} with --config.data.dir")
    return builder
