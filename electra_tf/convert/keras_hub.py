"""keras-hub presets: the discriminator as an `ElectraBackbone` (`KerasHub`, format name
`keras_hub`, written only).

keras-hub's ELECTRA is the discriminator's encoder alone (no heads, no generator), so
only `write` exists. `ElectraBackbone.from_preset(OUTPUT)` loads what it writes.
"""

import os
import tempfile

import keras_hub
import numpy as np
import tensorflow as tf

from electra_tf.convert import files
from electra_tf.convert import formats
from electra_tf.convert import table


def to_backbone(weights: table.Weights) -> keras_hub.models.ElectraBackbone:
    """The discriminator as a keras-hub `ElectraBackbone`. Its outputs differ from ours
    slightly: keras-hub's blocks use the tanh approximation of gelu. ELECTRA has no
    pooler: `pooled_dense` is zero, so `pooled_output` is 0 (not random)."""
    size = weights.spec.discriminator
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=weights.spec.vocab_size, num_layers=size.num_layers,
        num_heads=size.num_heads, hidden_dim=size.hidden_size,
        embedding_dim=size.embedding_size, intermediate_dim=size.intermediate_size,
        dropout=0.1, max_sequence_length=weights.spec.shape.max_positions, dtype="float32")
    table.load_into(table.backbone_slots(backbone), weights)
    for variable in backbone.pooled_dense.weights:
        variable.assign(np.zeros(variable.shape, "float32"))
    return backbone


class KerasHub(formats.Format):
    """keras-hub presets of the discriminator (written only)."""

    name = "keras_hub"

    def write(self, weights: table.Weights, output: str, vocab_file: str | None = None) -> str:
        """A keras-hub preset directory: `ElectraBackbone.from_preset(output)` loads it. The
        preset holds the backbone alone (keras-hub keeps tokenizers apart): no vocab."""
        del vocab_file
        backbone = to_backbone(weights)
        with files.new_directory(output) as tmp, tempfile.TemporaryDirectory() as local:
            # keras-hub writes the preset's JSON files with Python's `open()`: into a local
            # folder, then through gfile, as `output` may be a URL (gs://).
            backbone.save_to_preset(local)
            for folder, _, names in os.walk(local):
                inner = os.path.relpath(folder, local)
                into = tmp if inner == "." else os.path.join(tmp, inner)
                tf.io.gfile.makedirs(into)
                for name in names:
                    tf.io.gfile.copy(os.path.join(folder, name), os.path.join(into, name))
        return output
