"""The interchange table: every weight under the original ELECTRA's TF1 name and layout.

Every conversion goes through `Weights`: the model's tensors under the original (TF1)
variable names, in the original's layouts, plus the `ModelSpec` (vocabulary and
`ModelShape`: any widths, depths, position count and weight sharing) they imply. A
format's reader fills it, a writer empties it (`electra_tf.convert`); `Slot` says which
of our (or keras-hub's) variables each name is.

How the layouts differ from the table (and nothing else does):
- ours and keras-hub (`Slot`): the attention kernels of keras' MultiHeadAttention are
  the original's matrices reshaped, never transposed: query/key/value `[H, H]` →
  `[H, heads, H/heads]` (biases `[H]` → `[heads, H/heads]`), output `[H, H]` →
  `[heads, H/heads, H]`.
- Hugging Face (`hf.hf_name`): torch `Linear` weights are `[out, in]` (transposed);
  LayerNorm gamma/beta are `weight`/`bias`; `dense_1` is `dense_prediction`; the
  generator is a model of its own (`ElectraForMaskedLM`) whose encoder is `electra.`
  and which holds a copy of the shared embeddings (tie='all': of the whole encoder);
  `output_bias` is `generator_lm_head.bias`.
- the original (TF1): tie='none' keeps the generator's embeddings under
  `generator/embeddings`; tie='all' has no `generator/` scope at all (the generator reuses
  `electra/`), only `generator_predictions/`.

>>> fresh_generator(sizes.SIZES["small"])  # a discriminator alone: what pre-training adds
EncoderSize(hidden_size=64, num_layers=12, num_heads=1, intermediate_size=256, embedding_size=128)
"""

import dataclasses

import keras
import keras_hub
import numpy as np

from electra_tf import compat
from electra_tf import errors
from electra_tf.model import encoder
from electra_tf.model import heads
from electra_tf.model import pretrainer
from electra_tf.model import sizes


class ConversionError(errors.UserError):
    """A checkpoint that cannot be converted: the message names the file and the tensor."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What a checkpoint holds: the vocabulary and the model's shape."""

    vocab_size: int
    shape: sizes.ModelShape
    # False: a discriminator alone; `shape.generator` is then the one pre-training adds
    # (fresh weights: `fresh_generator`).
    has_generator: bool = True

    @property
    def discriminator(self) -> sizes.EncoderSize:
        return self.shape.discriminator

    @property
    def generator(self) -> sizes.EncoderSize | None:
        return self.shape.generator if self.has_generator else None

    @property
    def tie(self) -> str:
        return self.shape.tie


@dataclasses.dataclass
class Weights:
    """The interchange table: TF1 name → float32 array in the TF1 layout."""

    spec: ModelSpec
    tensors: dict[str, np.ndarray]
    source: str                           # where they came from, for messages
    vocab_file: str | None = None         # the vocab found beside the input, if any
    ignored: tuple[str, ...] = ()         # tensors of the input that are not weights
    lower_case: bool | None = None        # the vocab's normalisation, where the input says
    notes: tuple[str, ...] = ()           # what was assumed (e.g. heads, in no tensor)

    @property
    def num_parameters(self) -> int:
        return sum(int(a.size) for a in self.tensors.values())



# ---------------------------------------------------------------------------- slots
@dataclasses.dataclass(frozen=True)
class Slot:
    """One Keras variable and its TF1 name and shape (the variable's, heads flattened)."""

    name: str
    variable: keras.Variable
    shape: tuple[int, ...]

    def get(self) -> np.ndarray:
        return np.asarray(keras.ops.convert_to_numpy(self.variable), "float32").reshape(
            self.shape)

    def set(self, array: np.ndarray):
        self.variable.assign(np.asarray(array, "float32").reshape(self.variable.shape))


def _plain(name, variable):
    return Slot(name, variable, tuple(variable.shape))


def _dense(name, layer):
    return [_plain(f"{name}/kernel", layer.kernel), _plain(f"{name}/bias", layer.bias)]


def _layer_norm(name, layer):
    return [_plain(f"{name}/gamma", layer.gamma), _plain(f"{name}/beta", layer.beta)]


def _embedding_slots(scope, token, position, segment, layer_norm):
    return [_plain(f"{scope}/word_embeddings", token.embeddings),
            _plain(f"{scope}/position_embeddings", position.position_embeddings),
            _plain(f"{scope}/token_type_embeddings", segment.embeddings),
            *_layer_norm(f"{scope}/LayerNorm", layer_norm)]


def _block_slots(prefix, block):
    """One keras-hub `TransformerEncoder` as the original's `layer_N` (its private
    sublayers, through compat: keras-hub exposes no others)."""
    parts = compat.encoder_block_parts(block)
    attention = parts.attention
    slots = []
    for name in ("query", "key", "value"):
        dense = getattr(attention, f"{name}_dense")
        hidden, num_heads, head_size = dense.kernel.shape            # [H, heads, H/heads]
        slots += [Slot(f"{prefix}/attention/self/{name}/kernel", dense.kernel,
                        (hidden, num_heads * head_size)),
                  Slot(f"{prefix}/attention/self/{name}/bias", dense.bias,
                        (num_heads * head_size,))]
    output = attention.output_dense
    num_heads, head_size, hidden = output.kernel.shape               # [heads, H/heads, H]
    slots += [Slot(f"{prefix}/attention/output/dense/kernel", output.kernel,
                    (num_heads * head_size, hidden)),
              _plain(f"{prefix}/attention/output/dense/bias", output.bias)]
    slots += _layer_norm(f"{prefix}/attention/output/LayerNorm", parts.attention_layer_norm)
    slots += _dense(f"{prefix}/intermediate/dense", parts.intermediate_dense)
    slots += _dense(f"{prefix}/output/dense", parts.output_dense)
    slots += _layer_norm(f"{prefix}/output/LayerNorm", parts.output_layer_norm)
    return slots


def _encoder_slots(scope, enc: encoder.Encoder):
    slots = _dense(f"{scope}/embeddings_project", enc.projection) if enc.projection else []
    for i, block in enumerate(enc.blocks):
        slots += _block_slots(f"{scope}/encoder/layer_{i}", block)
    return slots


def _ours_embedding_slots(scope, embeddings: encoder.Embeddings):
    return _embedding_slots(scope, embeddings.token_embedding, embeddings.position_embedding,
                            embeddings.segment_embedding, embeddings.layer_norm)


def _discriminator_slots(embeddings, discriminator, head: heads.ReplacedTokenHead):
    return [*_ours_embedding_slots("electra/embeddings", embeddings),
            *_encoder_slots("electra", discriminator),
            *_dense("discriminator_predictions/dense", head.dense),
            *_dense("discriminator_predictions/dense_1", head.logits)]


def pretrainer_slots(model: pretrainer.ElectraPretrainer,
                     generator: bool = True) -> list[Slot]:
    """Every variable of `model` with its TF1 name, in the original's order (the
    discriminator's alone with `generator=False`)."""
    slots = _discriminator_slots(model.embeddings, model.discriminator,
                                 model.discriminator_head)
    if not generator:
        return slots
    tie = model.shape.tie
    if tie in ("none", "gdes"):  # gdes: the generator's are the shared ones
        slots += _ours_embedding_slots("generator/embeddings", model.generator.embeddings)
    if tie != "all":  # under 'all' the generator's encoder is the discriminator's
        slots += _encoder_slots("generator", model.generator)
    # keras-hub's MaskedLMHead; the projection is the embeddings
    mlm = compat.masked_lm_head_parts(model.generator_head)
    slots += _dense("generator_predictions/dense", mlm.intermediate_dense)
    slots += _layer_norm("generator_predictions/LayerNorm", mlm.intermediate_layer_norm)
    slots.append(_plain("generator_predictions/output_bias", mlm.bias))
    return slots


def backbone_slots(backbone: keras_hub.models.ElectraBackbone) -> list[Slot]:
    """The variables of a keras-hub `ElectraBackbone` with TF1 names, but its pooler."""
    slots = _embedding_slots("electra/embeddings", backbone.token_embedding,
                             backbone.position_embedding, backbone.segment_embedding,
                             backbone.embeddings_layer_norm)
    if backbone.hidden_dim != backbone.embedding_dim:
        slots += _dense("electra/embeddings_project", backbone.embeddings_projection)
    for i, block in enumerate(backbone.transformer_layers):
        slots += _block_slots(f"electra/encoder/layer_{i}", block)
    return slots


def build_pretrainer(spec: ModelSpec) -> pretrainer.ElectraPretrainer:
    """Our pre-trainer for `spec`, float32, with every variable created (the same initial
    weights every time: a discriminator-only input's fresh generator is reproducible)."""
    keras.utils.set_random_seed(0)
    model = pretrainer.ElectraPretrainer(spec.vocab_size, spec.shape, dtype="float32")
    return model.build_for(seq_length=8, num_predictions=1)


def expected_slots(spec: ModelSpec) -> list[Slot]:
    """The tensors a checkpoint of `spec` holds: names and shapes, on our variables."""
    return pretrainer_slots(build_pretrainer(spec), generator=spec.has_generator)


def load_into(slots: list[Slot], weights: Weights):
    """Assigns the table to the slots; a missing or misshapen tensor is an error."""
    for slot in slots:
        if slot.name not in weights.tensors:
            raise ConversionError(f"{weights.source}: no tensor {slot.name}")
        check_shape(weights.source, slot.name, weights.tensors[slot.name].shape,
                    slot.shape)
        slot.set(weights.tensors[slot.name])


def check_shape(source, name, shape, expected):
    """A `ConversionError` naming `source` and the tensor unless `shape` is `expected`."""
    if tuple(shape) != tuple(expected):
        raise ConversionError(f"{source}: {name} has shape {list(shape)}, expected "
                              f"{list(expected)} for this model")


# ---------------------------------------------------------------------------- shapes
def fresh_generator(discriminator: sizes.EncoderSize) -> sizes.EncoderSize:
    """The generator pre-training adds to a discriminator converted alone: the preset's
    fraction (the paper's), else a quarter of the width (one head where the rule's heads
    do not divide it)."""
    preset = sizes.ModelShape(discriminator, discriminator).preset
    hidden = max(1, round(discriminator.hidden_size
                          * sizes.GENERATOR_HIDDEN_FRACTION.get(preset, 0.25)))
    heads = sizes.heads_for(hidden)
    return sizes.EncoderSize(hidden, discriminator.num_layers, heads if hidden % heads == 0
                             else 1, 4 * hidden, discriminator.embedding_size)


def model_shape(source, discriminator, generator, positions, tie) -> sizes.ModelShape:
    """The checked `ModelShape`; a `ConversionError` naming `source` if it cannot be."""
    try:
        return sizes.ModelShape(discriminator, generator, positions, tie).check()
    except ValueError as e:
        raise ConversionError(f"{source}: {e}") from None
