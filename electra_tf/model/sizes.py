"""Model sizes: one table for the discriminator, one rule for the generator.

The discriminator sizes are the paper's (Table 6). The generator is derived from the
discriminator (`generator_size`): the same embedding width (the embeddings are shared),
`hidden × fraction` hidden units, one attention head per 64 units, FFN 4 × hidden.

>>> small = SIZES["small"]
>>> generator_size(small, hidden_fraction=0.25)
EncoderSize(hidden_size=64, num_layers=12, num_heads=1, intermediate_size=256, embedding_size=128)
>>> generator_size(SIZES["base"], hidden_fraction=1 / 3).num_heads
4
"""

import dataclasses

from electra_tf import errors


@dataclasses.dataclass(frozen=True)
class EncoderSize:
    """The shape of one transformer encoder."""

    hidden_size: int          # H: width of the transformer blocks
    num_layers: int           # L: number of TransformerEncoder blocks
    num_heads: int            # attention heads (head size H / heads)
    intermediate_size: int    # FFN inner width
    embedding_size: int       # E: width of the token/position/segment embeddings


SIZES = {
    # For tests and the quickstart: trains in minutes on a laptop CPU.
    "tiny": EncoderSize(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256,
                        embedding_size=64),
    "small": EncoderSize(hidden_size=256, num_layers=12, num_heads=4, intermediate_size=1024,
                         embedding_size=128),
    "base": EncoderSize(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
                        embedding_size=768),
    "large": EncoderSize(hidden_size=1024, num_layers=24, num_heads=16,
                         intermediate_size=4096, embedding_size=1024),
}

# The paper's generator widths (Table 6): 1/4 for Small and Large, 1/3 for Base (the
# released Large generator has 256 units). Tiny uses 1/2 so that its generator keeps 32.
GENERATOR_HIDDEN_FRACTION = {"tiny": 0.5, "small": 0.25, "base": 1 / 3, "large": 0.25}


def get_size(name: str) -> EncoderSize:
    """The discriminator size called `name`; a `UserError` naming the choices otherwise."""
    if name not in SIZES:
        raise errors.UserError(f"config.model.size: unknown size {name!r}; "
                               f"choose one of {', '.join(SIZES)}")
    return SIZES[name]


def generator_size(discriminator: EncoderSize, hidden_fraction: float,
                   layer_fraction: float = 1.0) -> EncoderSize:
    """The generator for a discriminator: `hidden × hidden_fraction`, heads h // 64."""
    if not 0 < hidden_fraction <= 1:
        raise errors.UserError("config.model.generator_hidden_fraction must be in (0, 1]; "
                               f"got {hidden_fraction}")
    if not 0 < layer_fraction <= 1:
        raise errors.UserError("config.model.generator_layer_fraction must be in (0, 1]; "
                               f"got {layer_fraction}")
    hidden = max(1, round(discriminator.hidden_size * hidden_fraction))
    heads = max(1, hidden // 64)
    if hidden % heads:
        raise errors.UserError(
            f"config.model.generator_hidden_fraction: {hidden_fraction} gives a generator of "
            f"{hidden} hidden units, not a multiple of its {heads} attention heads (one per "
            "64 units); choose one giving e.g. a multiple of 64")
    return EncoderSize(
        hidden_size=hidden,
        num_layers=max(1, round(discriminator.num_layers * layer_fraction)),
        num_heads=heads,
        intermediate_size=4 * hidden,
        embedding_size=discriminator.embedding_size)
