"""Model shapes: `EncoderSize` for one encoder, `ModelShape` for a whole pre-trainer.

The four presets are the paper's discriminators (Table 6) plus `tiny`; they only fill
defaults (`electra_tf/model_config.py` builds a `ModelShape` from a config, where every
dimension can be overridden, by the same rules). A generator derived from a discriminator
(`generator_size`) has `hidden × fraction` units, one attention head per 64 units
(`heads_for`), FFN 4 × hidden (the discriminator's heads and FFN at its full width), and
the discriminator's embedding width (the embeddings are shared).

>>> small = SIZES["small"]
>>> generator_size(small, hidden_fraction=0.25)
EncoderSize(hidden_size=64, num_layers=12, num_heads=1, intermediate_size=256, embedding_size=128)
>>> generator_size(SIZES["base"], hidden_fraction=1 / 3).num_heads
4
>>> shape = ModelShape(small, generator_size(small, 0.25))
>>> shape.tie, shape.max_positions
('embeddings', 512)
>>> ModelShape.from_dict(shape.to_dict()) == shape
True
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


# How the generator shares weights with the discriminator (the paper's Section 3.2):
#   none:       its own embeddings, at its own width (the original's
#               `untied_generator_embeddings`); no weight shared
#   embeddings: one token/position/segment embedding table for both (the paper's choice)
#   all:        every encoder weight shared: the generator IS the discriminator's
#               encoder (same shape required); only the heads differ
#   gdes:       DeBERTaV3's gradient-disentangled sharing: the generator's embeddings
#               are shared; the discriminator reads the token table through a stop-
#               gradient plus its own zero-initialised delta, trained by RTD alone
#               (`encoder.DisentangledEmbeddings`)
TIES = ("none", "embeddings", "all", "gdes")


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Everything that fixes a pre-trainer's variables: the two encoders, the position
    table and the weight sharing. `check()` says what is inconsistent."""

    discriminator: EncoderSize
    generator: EncoderSize
    max_positions: int = 512  # rows of the position table (longest sequence)
    tie: str = "embeddings"   # one of TIES

    def check(self) -> "ModelShape":
        """Returns self; raises `ValueError` naming the field that cannot be built."""
        for part in ("discriminator", "generator"):
            size = getattr(self, part)
            for field in dataclasses.fields(size):
                if getattr(size, field.name) <= 0:
                    raise ValueError(f"{part}.{field.name} must be positive. Received: "
                                     f"{getattr(size, field.name)}")
            if size.hidden_size % size.num_heads:
                raise ValueError(f"{part}.hidden_size ({size.hidden_size}) is not a multiple "
                                 f"of {part}.num_heads ({size.num_heads})")
        if self.max_positions <= 0:
            raise ValueError(f"max_positions must be positive. Received: {self.max_positions}")
        errors.check_choice("tie", self.tie, TIES, ValueError)
        if self.tie == "all" and self.generator != self.discriminator:
            raise ValueError("tie='all' shares every encoder weight: the generator must have "
                             f"the discriminator's shape. Received: {self.generator} and "
                             f"{self.discriminator}")
        if (self.tie in ("embeddings", "gdes")
                and self.generator.embedding_size != self.discriminator.embedding_size):
            raise ValueError(f"tie={self.tie!r} shares the embedding table: the generator's "
                             "embedding_size must be the discriminator's. Received: "
                             f"{self.generator.embedding_size} and "
                             f"{self.discriminator.embedding_size}")
        return self

    @property
    def preset(self) -> str | None:
        """The name of the discriminator's preset in `SIZES`, or None (a custom shape)."""
        return next((name for name, s in SIZES.items() if s == self.discriminator), None)

    def describe(self) -> str:
        """In words, for messages and logs."""
        gen = "shared with the discriminator" if self.tie == "all" else describe(self.generator)
        return (f"discriminator: {describe(self.discriminator)}; generator: {gen}; "
                f"{self.max_positions} positions; tie={self.tie}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelShape":
        return cls(EncoderSize(**d["discriminator"]), EncoderSize(**d["generator"]),
                   d["max_positions"], d["tie"])


def describe(size: EncoderSize) -> str:
    """`size` in words, for messages."""
    return (f"hidden {size.hidden_size}, {size.num_layers} layers, {size.num_heads} heads, "
            f"FFN {size.intermediate_size}, embeddings {size.embedding_size}")


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


def heads_for(hidden_size: int) -> int:
    """The original's rule for a generator's heads: one per 64 units (at least one)."""
    return max(1, hidden_size // 64)


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
    if hidden == discriminator.hidden_size:
        heads = discriminator.num_heads  # the discriminator's own width: its own heads
    else:
        heads = heads_for(hidden)
    if hidden % heads:
        raise errors.UserError(
            f"config.model.generator_hidden_fraction: {hidden_fraction} gives a generator of "
            f"{hidden} hidden units, not a multiple of its {heads} attention heads (one per "
            "64 units); choose one giving e.g. a multiple of 64, or set "
            "config.model.generator_num_heads")
    return EncoderSize(
        hidden_size=hidden,
        num_layers=max(1, round(discriminator.num_layers * layer_fraction)),
        num_heads=heads,
        intermediate_size=(discriminator.intermediate_size
                           if hidden == discriminator.hidden_size else 4 * hidden),
        embedding_size=discriminator.embedding_size)
