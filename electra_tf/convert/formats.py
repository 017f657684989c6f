"""What the converter asks of a checkpoint format: the base class of the format family.

A format is a `Format` subclass with a `name` (the value of `--from`/`--to`), listed in
`convert.FORMATS` and made as `Format(config)` (config None: a format reads nothing from
a run's config; what a write needs comes as `options`). It reads a checkpoint into the
one table every conversion goes through (`table.Weights`), writes the table out, or
both; which of the two it does is whether it implements the hook:

    class Mine(formats.Format):
        name = "mine"                                   # --from=mine / --to=mine
        def read(self, path, num_heads=None, generator_num_heads=None):
            ...                                         # → table.Weights
        def write(self, weights, output, vocab_file=None, **options):
            ...                                         # → what it wrote

>>> class ReadOnly(Format):
...     name = "read_only"
...     def read(self, path, num_heads=None, generator_num_heads=None):
...         return path
>>> ReadOnly.reads, ReadOnly.writes, ReadOnly().read("ckpt")
(True, False, 'ckpt')
"""

from electra_tf.convert import table


class Format:
    """One checkpoint format. A member sets `name` and implements `read`, `write` or
    both (the hooks below raise `NotImplementedError`); `reads` and `writes` say which,
    set for each subclass from whether it overrides the hook."""

    name: str = ""          # --from / --to
    reads: bool = False     # implements `read` (set per subclass)
    writes: bool = False    # implements `write` (set per subclass)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.reads = cls.read is not Format.read
        cls.writes = cls.write is not Format.write

    def __init__(self, config=None):
        self.config = config

    def read(self, path: str, num_heads: int | None = None,
             generator_num_heads: int | None = None) -> table.Weights:
        """Member (formats read): the table of the checkpoint at `path` (it exists).
        The numbers of heads are in no tensor's shape: where the format does not say
        them, `num_heads` and `generator_num_heads` do (None: the format's default)."""
        raise NotImplementedError(f"{self.name}: not read")

    def write(self, weights: table.Weights, output: str, vocab_file: str | None = None,
              **options):
        """Member (formats written): writes `weights` to the new directory `output`,
        whole or not at all (`files.new_directory`), with `vocab_file` where the format
        holds a vocabulary; returns what it wrote (a path, or paths). `options`: what
        the format alone takes (hf's `lower_case`, electra_tf's `config`)."""
        raise NotImplementedError(f"{self.name}: not written")
