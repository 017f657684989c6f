"""Fine-tuning's learning rate and layer-wise decay, from the pre-trained model's shape.

The original ELECTRA picks them by model size, the same for every task (its
configure_finetuning.py: learning_rate 1e-4, 5e-5 for Large; layerwise_lr_decay 0.8, 0.9
for Large). The paper's Table 7 lists 3e-4 for Small; the released code, whose GLUE
results the paper reports, keeps 1e-4 unless told otherwise, and so do we. `tiny` is this
project's test size: at 1e-4 its few narrow layers barely move in a few hundred steps (a
separable toy task stays at chance), at 1e-3 they learn it.

`for_shape` gives a preset's values for a preset's discriminator, and for a custom shape
interpolates between the presets: the learning rate geometrically in the hidden size
(the width sets how far one Adam step moves the output), the decay linearly in the depth
(the decay compounds over the layers), each clamped to the presets' range.

>>> from electra_tf.model import sizes
>>> for_shape(sizes.SIZES["large"])
Defaults(learning_rate=5e-05, layerwise_lr_decay=0.9, source='the large preset')
>>> d = for_shape(sizes.EncoderSize(hidden_size=128, num_layers=6, num_heads=2,
...                                 intermediate_size=512, embedding_size=128))
>>> round(d.learning_rate, 6), d.layerwise_lr_decay
(0.000316, 0.8)
>>> d.source
'a custom shape (hidden 128, 6 layers): between the presets'
>>> for_shape(sizes.EncoderSize(1024, 18, 16, 4096, 1024)).layerwise_lr_decay
0.85
"""

import dataclasses
import math
import types

import numpy as np

from electra_tf.model import sizes

LEARNING_RATE = types.MappingProxyType(
    {"tiny": 1e-3, "small": 1e-4, "base": 1e-4, "large": 5e-5})
LAYERWISE_LR_DECAY = types.MappingProxyType(
    {"tiny": 0.8, "small": 0.8, "base": 0.8, "large": 0.9})


@dataclasses.dataclass(frozen=True)
class Defaults:
    learning_rate: float
    layerwise_lr_decay: float
    source: str  # where they come from, for the log


def for_size(size: str) -> Defaults:
    """A preset's values (`configs/finetune.py:TASK,SIZE`)."""
    return Defaults(LEARNING_RATE[size], LAYERWISE_LR_DECAY[size], f"the {size} preset")


def for_shape(discriminator: sizes.EncoderSize) -> Defaults:
    """The values for a pre-trained discriminator of this shape (see the module docstring)."""
    preset = next((n for n, s in sizes.SIZES.items() if s == discriminator), None)
    if preset in LEARNING_RATE:
        return for_size(preset)
    known = {n: s for n, s in sizes.SIZES.items() if n in LEARNING_RATE}  # a new preset
    widths = dict(sorted((s.hidden_size, LEARNING_RATE[n]) for n, s in known.items()))
    rate = math.exp(np.interp(math.log(discriminator.hidden_size), np.log(list(widths)),
                              np.log(list(widths.values()))))
    depths = dict(sorted((s.num_layers, LAYERWISE_LR_DECAY[n]) for n, s in known.items()))
    decay = float(np.interp(discriminator.num_layers, list(depths), list(depths.values())))
    return Defaults(float(f"{rate:.3g}"), round(decay, 4),
                    f"a custom shape (hidden {discriminator.hidden_size}, "
                    f"{discriminator.num_layers} layers): between the presets")
