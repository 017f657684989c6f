"""Checkpoint interchange: the original (TF1) ELECTRA, Hugging Face, keras-hub and ours.

Every conversion goes through one table, `Weights`: the model's tensors under the
original ELECTRA's TF1 variable names, in the original's layouts, plus the `ModelSpec`
(vocabulary and `ModelShape`: any widths, depths, position count and weight sharing)
they imply. Each format is a reader and/or a writer:

    tf1 checkpoint ──┐                                   ┌─► electra_tf workdir (ckpt-0)
    HF directories ──┼─► Weights: {TF1 name: array} ────┼─► HF directories
    electra_tf run ──┘            + ModelSpec            ├─► keras-hub preset
                                                         └─► tf1 checkpoint

How the layouts differ from the table (and nothing else does):
- ours and keras-hub (`Slot`): the attention kernels of keras' MultiHeadAttention are
  the original's matrices reshaped, never transposed: query/key/value `[H, H]` →
  `[H, heads, H/heads]` (biases `[H]` → `[heads, H/heads]`), output `[H, H]` →
  `[heads, H/heads, H]`.
- Hugging Face (`hf_name`): torch `Linear` weights are `[out, in]` (transposed);
  LayerNorm gamma/beta are `weight`/`bias`; `dense_1` is `dense_prediction`; the
  generator is a model of its own (`ElectraForMaskedLM`) whose encoder is `electra.`
  and which holds a copy of the shared embeddings (tie='all': of the whole encoder);
  `output_bias` is `generator_lm_head.bias`.
- the original (TF1): tie='none' keeps the generator's embeddings under
  `generator/embeddings`; tie='all' has no `generator/` scope at all (the generator reuses
  `electra/`), only `generator_predictions/`.

>>> hf_name("electra/encoder/layer_3/attention/output/LayerNorm/gamma")
('electra.encoder.layer.3.attention.output.LayerNorm.weight', False)
>>> hf_name("generator/embeddings_project/kernel")
('electra.embeddings_project.weight', True)
"""

import contextlib
import dataclasses
import json
import os
import re
import shutil

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from electra_tf import errors
from electra_tf.model import encoder
from electra_tf.model import heads
from electra_tf.model import pretrainer
from electra_tf.model import sizes
from electra_tf.text import tokenizer as tokenizer_lib

FORMATS_IN = ("tf1", "hf", "electra_tf")
FORMATS_OUT = ("electra_tf", "hf", "keras_hub", "tf1")
HF_WEIGHTS = "model.safetensors"
# In HF files but not weights: buffers (older transformers saved them), and the output
# embeddings, tied to the word embeddings (checked equal when present).
_HF_NOT_WEIGHTS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids",
                   "generator_lm_head.weight")


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
    """One keras-hub `TransformerEncoder` as the original's `layer_N` (private attributes:
    keras-hub exposes no others; its own checkpoint converters use the same ones)."""
    attention = block._self_attention_layer  # pylint: disable=protected-access
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
    # pylint: disable=protected-access
    slots += _layer_norm(f"{prefix}/attention/output/LayerNorm",
                         block._self_attention_layer_norm)
    slots += _dense(f"{prefix}/intermediate/dense", block._feedforward_intermediate_dense)
    slots += _dense(f"{prefix}/output/dense", block._feedforward_output_dense)
    slots += _layer_norm(f"{prefix}/output/LayerNorm", block._feedforward_layer_norm)
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
    mlm = model.generator_head  # keras-hub MaskedLMHead; the projection is the embeddings
    # pylint: disable=protected-access
    slots += _dense("generator_predictions/dense", mlm._intermediate_dense)
    slots += _layer_norm("generator_predictions/LayerNorm", mlm._intermediate_layer_norm)
    slots.append(_plain("generator_predictions/output_bias", mlm._bias))
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
        _check_shape(weights.source, slot.name, weights.tensors[slot.name].shape,
                     slot.shape)
        slot.set(weights.tensors[slot.name])


def _check_shape(source, name, shape, expected):
    if tuple(shape) != tuple(expected):
        raise ConversionError(f"{source}: {name} has shape {list(shape)}, expected "
                              f"{list(expected)} for this model")


# ---------------------------------------------------------------------------- shapes
def _discriminator_from_dims(hidden, layers, intermediate, embedding, num_heads, notes):
    """The discriminator of these dimensions. The number of heads is in no tensor's shape:
    `num_heads` if given, else a preset's with these dimensions, else the original's
    rule (one per 64 units), said in `notes`."""
    dims = (hidden, layers, intermediate, embedding)
    if num_heads:
        return sizes.EncoderSize(hidden, layers, num_heads, intermediate, embedding)
    for name, size in sizes.SIZES.items():
        if (size.hidden_size, size.num_layers, size.intermediate_size,
                size.embedding_size) == dims:
            return size
    heads = sizes.heads_for(hidden)
    notes.append(f"discriminator: {heads} attention heads assumed (hidden {hidden} / 64, "
                 "the original's rule; no tensor holds the number): give --num_heads if not")
    return sizes.EncoderSize(hidden, layers, heads, intermediate, embedding)


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


def _shape(source, discriminator, generator, positions, tie) -> sizes.ModelShape:
    try:
        return sizes.ModelShape(discriminator, generator, positions, tie).check()
    except ValueError as e:
        raise ConversionError(f"{source}: {e}") from None


# ---------------------------------------------------------------------------- tf1
def _tf1_prefix(path: str) -> str:
    """A checkpoint prefix: `path` itself, or the latest checkpoint in directory `path`."""
    if tf.io.gfile.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
        if prefix is None:
            raise ConversionError(f"{path}: no checkpoint in this directory (no "
                                  "'checkpoint' file); give the prefix, e.g. DIR/model.ckpt")
        return prefix
    if not tf.io.gfile.exists(path + ".index"):
        raise ConversionError(f"{path}: no such checkpoint ({path}.index not found)")
    return path


def _encoder_dims(shapes, scope, source):
    """(hidden, layers, intermediate) of the TF1 encoder under `scope`."""
    layers = 0
    while f"{scope}/encoder/layer_{layers}/attention/self/query/kernel" in shapes:
        layers += 1
    if not layers:
        raise ConversionError(f"{source}: no tensor {scope}/encoder/layer_0/attention/self/"
                              "query/kernel; not an ELECTRA pre-training checkpoint")
    hidden = shapes[f"{scope}/encoder/layer_0/attention/self/query/kernel"][-1]
    intermediate_name = f"{scope}/encoder/layer_0/intermediate/dense/kernel"
    if intermediate_name not in shapes:
        raise ConversionError(f"{source}: no tensor {intermediate_name}")
    return hidden, layers, shapes[intermediate_name][-1]


def read_tf1(path: str, num_heads: int | None = None,
             generator_num_heads: int | None = None) -> Weights:
    """The original ELECTRA's pre-training checkpoint (`electra/`, `generator/`,
    `*_predictions/`) of any shape; optimizer slots and `global_step` are ignored."""
    prefix = _tf1_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    word = "electra/embeddings/word_embeddings"
    if word not in shapes:
        raise ConversionError(f"{prefix}: no tensor {word}; not an ELECTRA checkpoint")
    vocab_size, embedding = shapes[word]
    positions = shapes.get("electra/embeddings/position_embeddings", [512])[0]
    notes = []
    discriminator = _discriminator_from_dims(*_encoder_dims(shapes, "electra", prefix),
                                             embedding, num_heads, notes)
    has_generator = "generator_predictions/output_bias" in shapes
    if "generator/encoder/layer_0/attention/self/query/kernel" in shapes:
        hidden, layers, intermediate = _encoder_dims(shapes, "generator", prefix)
        untied = shapes.get("generator/embeddings/word_embeddings")
        tie = "none" if untied else "embeddings"
        heads = generator_num_heads or (discriminator.num_heads
                                        if hidden == discriminator.hidden_size
                                        else sizes.heads_for(hidden))
        if not generator_num_heads:
            notes.append(f"generator: {heads} attention heads assumed (" + (
                "the discriminator's, at its width" if hidden == discriminator.hidden_size
                else f"hidden {hidden} / 64, the original's rule") + "; no tensor holds the "
                "number): give --generator_num_heads if not")
        generator = sizes.EncoderSize(hidden, layers, heads, intermediate,
                                      untied[1] if untied else embedding)
    elif has_generator:  # generator_predictions/ alone: the original's tied generator
        tie, generator = "all", discriminator
    else:
        tie, generator = "embeddings", fresh_generator(discriminator)
    spec = ModelSpec(vocab_size, _shape(prefix, discriminator, generator, positions, tie),
                     has_generator)

    def read(name, shape):
        if name not in shapes:
            raise ConversionError(f"{prefix}: no tensor {name}")
        _check_shape(prefix, name, shapes[name], shape)
        return np.asarray(reader.get_tensor(name), "float32")

    tensors = {slot.name: read(slot.name, slot.shape) for slot in expected_slots(spec)}
    vocab = os.path.join(os.path.dirname(prefix), "vocab.txt")
    return Weights(spec, tensors, prefix, vocab if os.path.exists(vocab) else None,
                   tuple(sorted(set(shapes) - set(tensors))), notes=tuple(notes))


def save_tf1(weights: Weights, output: str, vocab_file: str | None = None) -> str:
    """`output/model.ckpt` with the original's names (readable by its run_finetuning.py
    and by `read_tf1`), and vocab.txt. Returns the checkpoint prefix."""
    names = sorted(weights.tensors)
    with _new_directory(output) as tmp:
        # TF1's Saver writes this format: a tensor bundle keyed by variable name.
        tf.raw_ops.SaveV2(prefix=os.path.join(tmp, "model.ckpt"), tensor_names=names,
                          shape_and_slices=[""] * len(names),
                          tensors=[weights.tensors[name] for name in names])
        with open(os.path.join(tmp, "checkpoint"), "w", encoding="utf-8") as f:
            f.write('model_checkpoint_path: "model.ckpt"\n')  # for tf.train.latest_checkpoint
        _copy_vocab(vocab_file, weights.spec, tmp)
    return os.path.join(output, "model.ckpt")


# ---------------------------------------------------------------------------- Hugging Face
def hf_name(name: str) -> tuple[str, bool]:
    """The Hugging Face name of a TF1 tensor, and whether the array is transposed.

    The generator's tensors get the names they have in its own `ElectraForMaskedLM`:
    `generator/...` is `electra.…` there (the shared `electra/embeddings` keep theirs).
    """
    if name == "generator_predictions/output_bias":
        return "generator_lm_head.bias", False
    parts = name.split("/")
    if parts[0] == "generator":
        parts[0] = "electra"
    leaf = parts.pop()
    out = []
    for part in parts:
        match = re.fullmatch(r"layer_(\d+)", part)
        out += ["layer", match.group(1)] if match else [
            "dense_prediction" if part == "dense_1" else part]
    if leaf.endswith("_embeddings"):
        out += [leaf, "weight"]
    else:
        out.append({"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(leaf, leaf))
    return ".".join(out), leaf == "kernel"


def _hf_part(name: str, tie: str) -> tuple[str, ...]:
    """The HF models a TF1 tensor belongs to: what is shared is in both."""
    if name.startswith("electra/embeddings/") and tie != "none":
        return ("discriminator", "generator")
    if name.startswith("electra/") and tie == "all":
        return ("discriminator", "generator")
    if name.startswith(("electra/", "discriminator_predictions/")):
        return ("discriminator",)
    return ("generator",)


def _hf_config(spec: ModelSpec, part: str, pad_id: int) -> dict:
    size = spec.discriminator if part == "discriminator" else spec.generator
    return {
        "architectures": ["ElectraForPreTraining" if part == "discriminator"
                          else "ElectraForMaskedLM"],
        "model_type": "electra",
        "vocab_size": spec.vocab_size,
        "embedding_size": size.embedding_size,
        "hidden_size": size.hidden_size,
        "num_hidden_layers": size.num_layers,
        "num_attention_heads": size.num_heads,
        "intermediate_size": size.intermediate_size,
        "hidden_act": "gelu",                       # exact (erf), as ours and the original
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": spec.shape.max_positions,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
        "pad_token_id": pad_id,
        "tie_word_embeddings": True,                # generator_lm_head = word embeddings
    }


def _hf_tokenizer_config(spec: ModelSpec, lower_case: bool) -> dict:
    """What `AutoTokenizer.from_pretrained` reads: a WordPiece tokenizer normalising as our
    data was made (lower-case + NFD accent stripping, or neither), our special tokens."""
    return {
        "tokenizer_class": "ElectraTokenizer",
        "do_lower_case": lower_case,
        "strip_accents": None,          # follows do_lower_case, as FastBertNormalize does
        "tokenize_chinese_chars": True,
        "model_max_length": spec.shape.max_positions,
        **{f"{name}_token": f"[{name.upper()}]" for name in ("unk", "sep", "pad", "cls", "mask")},
    }


def save_hf(weights: Weights, output: str, vocab_file: str | None = None,
            lower_case: bool = True) -> list[str]:
    """`output/discriminator/` (ElectraForPreTraining) and, with a generator,
    `output/generator/` (ElectraForMaskedLM): config.json, model.safetensors, and with a
    vocab, vocab.txt and tokenizer_config.json (`lower_case`: the data's normalisation)."""
    from safetensors import numpy as safetensors_np  # pylint: disable=g-import-not-at-top
    spec = weights.spec
    parts = ["discriminator"] + (["generator"] if spec.generator is not None else [])
    pad_id = tokenizer_lib.Vocab.load(vocab_file).pad_id if vocab_file else 0
    with _new_directory(output) as tmp:
        for part in parts:
            directory = os.path.join(tmp, part)
            os.makedirs(directory)
            arrays = {}
            for name, array in weights.tensors.items():
                if part in _hf_part(name, spec.tie):
                    key, transpose = hf_name(name)
                    arrays[key] = np.ascontiguousarray(array.T if transpose else array)
            # transformers refuses safetensors files without format metadata.
            safetensors_np.save_file(arrays, os.path.join(directory, HF_WEIGHTS),
                                     metadata={"format": "pt"})
            _write_json(_hf_config(spec, part, pad_id), os.path.join(directory, "config.json"))
            if vocab_file:
                _copy_vocab(vocab_file, spec, directory)
                _write_json(_hf_tokenizer_config(spec, lower_case),
                            os.path.join(directory, "tokenizer_config.json"))
    return [os.path.join(output, part) for part in parts]


def _hf_directories(path: str) -> dict[str, str]:
    """{"discriminator": dir[, "generator": dir]}: `path` holds both (as `save_hf` writes
    them), or is one ElectraForPreTraining directory."""
    if tf.io.gfile.exists(os.path.join(path, "discriminator", "config.json")):
        found = {"discriminator": os.path.join(path, "discriminator")}
        if tf.io.gfile.exists(os.path.join(path, "generator", "config.json")):
            found["generator"] = os.path.join(path, "generator")
        return found
    if tf.io.gfile.exists(os.path.join(path, "config.json")):
        return {"discriminator": path}
    raise ConversionError(f"{path}: no config.json, nor discriminator/config.json; give a "
                          "Hugging Face ELECTRA directory")


def _hf_read_config(directory: str) -> dict:
    path = os.path.join(directory, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("model_type") != "electra":
        raise ConversionError(f"{path}: model_type is {config.get('model_type')!r}, not "
                              "'electra'")
    for key, value in (("hidden_act", "gelu"), ("position_embedding_type", "absolute"),
                       ("layer_norm_eps", 1e-12)):
        if config.get(key, value) != value:  # ours computes these one way only
            raise ConversionError(f"{path}: {key} is {config[key]!r}; only {value!r} "
                                  "converts exactly")
    return config


def _hf_load(directory: str) -> tuple[str, dict]:
    from safetensors import numpy as safetensors_np  # pylint: disable=g-import-not-at-top
    path = os.path.join(directory, HF_WEIGHTS)
    if not os.path.exists(path):
        raise ConversionError(f"{path}: not found (only safetensors files are read; save "
                              "a PyTorch model with save_pretrained(safe_serialization=True))")
    return path, safetensors_np.load_file(path)


def _hf_size(config: dict) -> sizes.EncoderSize:
    return sizes.EncoderSize(config["hidden_size"], config["num_hidden_layers"],
                             config["num_attention_heads"], config["intermediate_size"],
                             config.get("embedding_size", config["hidden_size"]))


def _hf_tie(files: dict, discriminator, generator) -> str:
    """What the generator shares, read off the tensors (HF stores copies): equal
    embeddings, and equal encoder weights too under tie='all'."""
    disc, gen = files["discriminator"][1], files["generator"][1]

    def same(prefix):
        keys = [k for k in gen if k.startswith(prefix) and k not in _HF_NOT_WEIGHTS]
        return bool(keys) and all(k in disc and disc[k].shape == gen[k].shape
                                  and np.array_equal(disc[k], gen[k]) for k in keys)

    if not same("electra.embeddings."):
        return "none"
    if generator == discriminator and same("electra.encoder."):
        return "all"
    return "embeddings"


def read_hf(path: str, num_heads: int | None = None,
            generator_num_heads: int | None = None) -> Weights:
    """Hugging Face ELECTRA of any shape: `path/discriminator` (+ `path/generator`) or
    one ElectraForPreTraining directory; config.json and model.safetensors in each."""
    del num_heads, generator_num_heads  # config.json says
    directories = _hf_directories(path)
    configs = {part: _hf_read_config(d) for part, d in directories.items()}
    disc = configs["discriminator"]
    source = os.path.join(directories["discriminator"], "config.json")
    if "ElectraForMaskedLM" in disc.get("architectures", []):
        raise ConversionError(f"{source}: an ElectraForMaskedLM (a generator); give the "
                              "directory holding discriminator/ and generator/")
    discriminator = _hf_size(disc)
    positions = disc.get("max_position_embeddings", 512)
    files = {part: _hf_load(d) for part, d in directories.items()}
    if "generator" in configs:
        gen = configs["generator"]
        gen_source = os.path.join(directories["generator"], "config.json")
        for key in ("vocab_size", "max_position_embeddings"):
            if gen.get(key) != disc.get(key):
                raise ConversionError(f"{gen_source}: {key} is {gen.get(key)}, the "
                                      f"discriminator's {disc.get(key)}; ours needs one")
        generator = _hf_size(gen)
        tie = _hf_tie(files, discriminator, generator)
    else:
        tie, generator = "embeddings", fresh_generator(discriminator)
    spec = ModelSpec(disc["vocab_size"],
                     _shape(source, discriminator, generator, positions, tie),
                     has_generator="generator" in configs)
    used = {part: set() for part in files}

    def read(name, shape):
        key, transpose = hf_name(name)
        part = _hf_part(name, tie)[0]
        if part not in files:
            raise ConversionError(f"{path}: no generator/ directory (needed for {key})")
        file, arrays = files[part]
        if key not in arrays:
            raise ConversionError(f"{file}: no tensor {key} (TF1 {name})")
        _check_shape(file, key, arrays[key].shape, shape[::-1] if transpose else shape)
        for holder in _hf_part(name, tie):
            used.get(holder, set()).add(key)
        return np.asarray(arrays[key].T if transpose else arrays[key], "float32")

    tensors = {slot.name: read(slot.name, slot.shape) for slot in expected_slots(spec)}
    if "generator" in files:
        file, arrays = files["generator"]
        output = arrays.get("generator_lm_head.weight")
        words = tensors["generator/embeddings/word_embeddings" if tie == "none"
                        else "electra/embeddings/word_embeddings"]
        if output is not None and not np.array_equal(output, words):
            raise ConversionError(f"{file}: generator_lm_head.weight differs from the word "
                                  "embeddings; ours projects with the word embeddings")
    ignored = tuple(sorted(f"{part}/{key}" for part, (_, arrays) in files.items()
                           for key in arrays
                           if key not in used[part] and key not in _HF_NOT_WEIGHTS))
    vocab = os.path.join(directories["discriminator"], "vocab.txt")
    return Weights(spec, tensors, path, vocab if os.path.exists(vocab) else None, ignored,
                   lower_case=_hf_lower_case(directories["discriminator"]))


def _hf_lower_case(directory: str) -> bool | None:
    """do_lower_case of the directory's tokenizer_config.json, if it says."""
    path = os.path.join(directory, "tokenizer_config.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        value = json.load(f).get("do_lower_case")
    return None if value is None else bool(value)


# ---------------------------------------------------------------------------- electra_tf
def read_electra_tf(path: str, num_heads: int | None = None,
                    generator_num_heads: int | None = None) -> Weights:
    """A training run: its workdir (latest checkpoint) or one checkpoint prefix in
    WORKDIR/checkpoints; config.json (the shape) and vocab.txt come from the workdir."""
    del num_heads, generator_num_heads  # config.json says
    # The exporter's loader (the one way a run is read); imported here, as it brings tf.text.
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    if tf.io.gfile.isdir(path):
        workdir, checkpoint = path, None
    else:
        workdir, checkpoint = os.path.dirname(os.path.dirname(path)), path
    config, vocab, model, checkpoint = export.load_run(workdir, checkpoint)
    if not model.objective.detects:
        raise errors.UserError(
            f"{workdir}: config.model.objective={model.objective.name!r} has no "
            "replaced-token head: the formats written here hold ELECTRA's generator and "
            "discriminator (objective electra or electra_15); export its encoder with "
            "tools/export_savedmodel.py")
    spec = ModelSpec(vocab.size, model.shape,
                     has_generator=not _fresh_generator(workdir, checkpoint))
    slots = pretrainer_slots(model, generator=spec.has_generator)
    tensors = {slot.name: slot.get() for slot in slots}
    if model.shape.tie == "gdes":
        # No format has a delta table: the discriminator's word embeddings are the sum
        # it reads (shared + delta) and the generator keeps the shared ones, i.e. the
        # layout of tie=none (at the shared width).
        tensors["electra/embeddings/word_embeddings"] = np.asarray(
            model.discriminator.embeddings.token_table(), "float32")
        spec = dataclasses.replace(spec, shape=dataclasses.replace(model.shape, tie="none"))
    return Weights(spec, tensors, checkpoint, vocab.path,
                   lower_case=export.lower_case_of(config, default=None))


CONVERTED = "converted.json"  # in a workdir written by `save_electra_tf`: what it came from


def _fresh_generator(workdir: str, checkpoint: str) -> bool:
    """Whether `checkpoint`'s generator was never trained: the workdir was converted from
    a discriminator alone, and this is still the converted ckpt-0."""
    path = os.path.join(workdir, CONVERTED)
    if os.path.basename(checkpoint) != "ckpt-0" or not tf.io.gfile.exists(path):
        return False
    with tf.io.gfile.GFile(path) as f:
        return json.load(f).get("generator") == "fresh"


def save_electra_tf(weights: Weights, output: str, config: dict, vocab_file: str) -> str:
    """A workdir that `python -m electra_tf.train --workdir=output` continues: config.json
    (`config` with the spec's shape as explicit `model` fields), vocab.txt,
    checkpoints/ckpt-0 holding `step` (0) and `model` (no optimizer: it starts fresh), and
    converted.json. A discriminator converted alone gets a generator of fresh weights
    (`fresh_generator`), which pre-training then trains from step 0; export and
    fine-tuning use the discriminator only. Returns the checkpoint path."""
    from electra_tf import model_config  # pylint: disable=g-import-not-at-top
    if not vocab_file:
        raise ConversionError("--to=electra_tf needs the vocabulary: give --vocab_file")
    config = json.loads(json.dumps(config))  # a copy
    config["model"].update(model_config.fields(weights.spec.shape))
    config["data"]["max_seq_length"] = min(config["data"]["max_seq_length"],
                                           weights.spec.shape.max_positions)
    model = build_pretrainer(weights.spec)
    load_into(pretrainer_slots(model, generator=weights.spec.has_generator), weights)
    with _new_directory(output) as tmp:
        config["data"]["vocab_file"] = os.path.join(output, "vocab.txt")
        _copy_vocab(vocab_file, weights.spec, tmp)
        _write_json(config, os.path.join(tmp, "config.json"))
        _write_json({"source": weights.source,
                     "generator": "converted" if weights.spec.has_generator else "fresh",
                     "lower_case": weights.lower_case},
                    os.path.join(tmp, CONVERTED))
        checkpoint = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64), model=model)
        manager = tf.train.CheckpointManager(checkpoint, os.path.join(tmp, "checkpoints"),
                                             max_to_keep=1)
        path = manager.save(checkpoint_number=0)
    return os.path.join(output, "checkpoints", os.path.basename(path))


# ---------------------------------------------------------------------------- keras-hub
def to_keras_hub(weights: Weights) -> keras_hub.models.ElectraBackbone:
    """The discriminator as a keras-hub `ElectraBackbone`. Its outputs differ from ours
    slightly: keras-hub's blocks use the tanh approximation of gelu. ELECTRA has no
    pooler: `pooled_dense` is zero, so `pooled_output` is 0 (not random)."""
    size = weights.spec.discriminator
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=weights.spec.vocab_size, num_layers=size.num_layers,
        num_heads=size.num_heads, hidden_dim=size.hidden_size,
        embedding_dim=size.embedding_size, intermediate_dim=size.intermediate_size,
        dropout=0.1, max_sequence_length=weights.spec.shape.max_positions, dtype="float32")
    load_into(backbone_slots(backbone), weights)
    for variable in backbone.pooled_dense.weights:
        variable.assign(np.zeros(variable.shape, "float32"))
    return backbone


def save_keras_hub(weights: Weights, output: str) -> str:
    """A keras-hub preset directory: `ElectraBackbone.from_preset(output)` loads it."""
    backbone = to_keras_hub(weights)
    with _new_directory(output) as tmp:
        backbone.save_to_preset(tmp)
    return output


# ---------------------------------------------------------------------------- helpers
def read(fmt: str, path: str, num_heads: int | None = None,
         generator_num_heads: int | None = None) -> Weights:
    """The table of `path` in format `fmt` (one of FORMATS_IN). The numbers of heads are
    in no tensor's shape: for a TF1 checkpoint give them where the default (a preset's,
    else one per 64 units, the original's rule) is not the model's."""
    readers = {"tf1": read_tf1, "hf": read_hf, "electra_tf": read_electra_tf}
    if fmt not in readers:
        raise ConversionError(f"--from={fmt}: choose one of {', '.join(readers)}")
    if not tf.io.gfile.exists(path) and not tf.io.gfile.exists(path + ".index"):
        raise ConversionError(f"{path}: not found")
    return readers[fmt](path, num_heads, generator_num_heads)


def _copy_vocab(vocab_file, spec, directory):
    if not vocab_file:
        return
    vocab = tokenizer_lib.Vocab.load(vocab_file)
    if vocab.size != spec.vocab_size:
        raise ConversionError(f"{vocab_file}: {vocab.size} tokens, but the checkpoint's "
                              f"embeddings have {spec.vocab_size} rows")
    shutil.copyfile(vocab_file, os.path.join(directory, "vocab.txt"))


def _write_json(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2) + "\n")


@contextlib.contextmanager
def _new_directory(path: str):
    """Yields a temporary directory that becomes `path` when the block succeeds (removed
    if it fails): a crash never leaves a half-written checkpoint at `path`."""
    if os.path.isdir(path) and os.listdir(path) or os.path.isfile(path):
        raise ConversionError(f"{path}: exists and is not empty; choose a new --output")
    tmp = path.rstrip("/") + ".tmp"
    if os.path.isfile(tmp) or os.path.islink(tmp):  # left by an earlier failed run
        os.remove(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.isdir(path):
        os.rmdir(path)  # empty
    os.rename(tmp, path)
