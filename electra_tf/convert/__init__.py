"""Checkpoint interchange: the original (TF1) ELECTRA, Hugging Face, keras-hub and ours.

Every conversion goes through one table (`table.Weights`: TF1 name → array, plus the
`ModelSpec` they imply). Each format is a `formats.Format` subclass with the same small
interface, registered by name in `FORMATS`:

    tf1 checkpoint ──┐                                   ┌─► electra_tf workdir (ckpt-0)
    HF directories ──┼─► Weights: {TF1 name: array} ────┼─► HF directories
    electra_tf run ──┘            + ModelSpec            ├─► keras-hub preset
                                                         └─► tf1 checkpoint

    read(path, num_heads=None, generator_num_heads=None) → Weights   (the formats read)
    write(weights, output, vocab_file=None, **options) → what it wrote (the formats
        written; options: hf `lower_case`, electra_tf `config`)

    tf1.py TF1, hf.py HuggingFace, workdir.py ElectraTF (name electra_tf), keras_hub.py
    KerasHub (written only); files.py: what the writers share; table.py: the table.

A new format is a module with a `Format` subclass and a line in `FORMATS`.

>>> FORMATS_IN, FORMATS_OUT
(('tf1', 'hf', 'electra_tf'), ('electra_tf', 'hf', 'keras_hub', 'tf1'))
>>> read("onnx", "model.onnx")
Traceback (most recent call last):
...
electra_tf.convert.table.ConversionError: --from=onnx: choose one of tf1, hf, electra_tf
"""

import tensorflow as tf

from electra_tf import registry
from electra_tf.convert import hf
from electra_tf.convert import keras_hub
from electra_tf.convert import table
from electra_tf.convert import tf1
from electra_tf.convert import workdir

FORMATS = registry.Registry("--from/--to", [tf1.TF1, hf.HuggingFace, workdir.ElectraTF,
                                            keras_hub.KerasHub], error=table.ConversionError)
# In the order the tool's --from and --to list them.
FORMATS_IN = tuple(name for name, member in FORMATS.items() if member.reads)
FORMATS_OUT = tuple(sorted(name for name, member in FORMATS.items() if member.writes))


def read(fmt: str, path: str, num_heads: int | None = None,
         generator_num_heads: int | None = None) -> table.Weights:
    """The table of `path` in format `fmt` (one of FORMATS_IN). The numbers of heads are
    in no tensor's shape: for a TF1 checkpoint give them where the default (a preset's,
    else one per 64 units, the original's rule) is not the model's."""
    if fmt not in FORMATS_IN:
        raise table.ConversionError(f"--from={fmt}: choose one of {', '.join(FORMATS_IN)}")
    if not tf.io.gfile.exists(path) and not tf.io.gfile.exists(path + ".index"):
        raise table.ConversionError(f"{path}: not found")
    return FORMATS.create(fmt).read(path, num_heads, generator_num_heads)


def write(fmt: str, weights: table.Weights, output: str, vocab_file: str | None = None,
          **options):
    """Writes `weights` to the new directory `output` in format `fmt` (one of
    FORMATS_OUT); returns what the format's `write` returns (a path, or paths)."""
    if fmt not in FORMATS_OUT:
        raise table.ConversionError(f"--to={fmt}: choose one of {', '.join(FORMATS_OUT)}")
    return FORMATS.create(fmt).write(weights, output, vocab_file, **options)
