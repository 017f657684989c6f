"""Checkpoint interchange: the original (TF1) ELECTRA, Hugging Face, keras-hub and ours.

Every conversion goes through one table, `Weights`: the model's tensors under the
original ELECTRA's TF1 variable names, in the original's layouts, plus the `ModelSpec`
(vocabulary and encoder sizes) they imply. Each format is a reader and/or a writer:

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
  and which holds a copy of the shared embeddings; `output_bias` is `generator_lm_head.bias`.

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
MAX_POSITIONS = 512  # the position table of ours, the original's and HF's (512 rows)
HF_WEIGHTS = "model.safetensors"
# In HF files but not weights: buffers (older transformers saved them), and the output
# embeddings, tied to the word embeddings (checked equal when present).
_HF_NOT_WEIGHTS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids",
                   "generator_lm_head.weight")


class ConversionError(errors.UserError):
    """A checkpoint that cannot be converted: the message names the file and the tensor."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What a checkpoint holds: the vocabulary and the encoder sizes."""

    vocab_size: int
    discriminator: sizes.EncoderSize
    generator: sizes.EncoderSize | None   # None: a discriminator alone
    tie_embeddings: bool = True           # the generator uses the discriminator's embeddings


@dataclasses.dataclass
class Weights:
    """The interchange table: TF1 name → float32 array in the TF1 layout."""

    spec: ModelSpec
    tensors: dict[str, np.ndarray]
    source: str                           # where they came from, for messages
    vocab_file: str | None = None         # the vocab found beside the input, if any
    ignored: tuple[str, ...] = ()         # tensors of the input that are not weights

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


def pretrainer_slots(model: pretrainer.ElectraPretrainer) -> list[Slot]:
    """Every variable of `model` with its TF1 name, in the original's order."""
    slots = _discriminator_slots(model.embeddings, model.discriminator,
                                 model.discriminator_head)
    if not model.tie_embeddings:
        slots += _ours_embedding_slots("generator/embeddings", model.generator.embeddings)
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
    """Our pre-trainer for `spec`, float32, with every variable created."""
    model = pretrainer.ElectraPretrainer(
        spec.vocab_size, spec.discriminator, spec.generator,
        tie_embeddings=spec.tie_embeddings, max_sequence_length=MAX_POSITIONS,
        dtype="float32")
    return model.build_for(seq_length=8, num_predictions=1)


def expected_slots(spec: ModelSpec) -> list[Slot]:
    """The tensors a checkpoint of `spec` holds: names and shapes, on our variables."""
    if spec.generator is not None:
        return pretrainer_slots(build_pretrainer(spec))
    # A discriminator alone (e.g. one HF ElectraForPreTraining): its three layers.
    size = spec.discriminator
    embeddings = encoder.Embeddings(spec.vocab_size, size.embedding_size,
                                    max_sequence_length=MAX_POSITIONS, dtype="float32")
    discriminator = encoder.Encoder(embeddings, size.hidden_size, size.num_layers,
                                    size.num_heads, size.intermediate_size, dtype="float32")
    head = heads.ReplacedTokenHead(size.hidden_size, dtype="float32")
    head(discriminator(_dummy_inputs()))
    return _discriminator_slots(embeddings, discriminator, head)


def _dummy_inputs(batch=1, length=8):
    ids = np.zeros((batch, length), "int32")
    return {"token_ids": ids, "segment_ids": ids, "padding_mask": np.ones_like(ids)}


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


# ---------------------------------------------------------------------------- sizes
def describe(size: sizes.EncoderSize) -> str:
    """`size` in words, for messages."""
    return (f"hidden {size.hidden_size}, {size.num_layers} layers, {size.num_heads} heads, "
            f"FFN {size.intermediate_size}, embeddings {size.embedding_size}")


def named_size(size: sizes.EncoderSize) -> str | None:
    """The name of `size` in `sizes.SIZES`, or None."""
    return next((name for name, s in sizes.SIZES.items() if s == size), None)


def _size_from_dims(source, hidden, layers, intermediate, embedding, size_name):
    """The discriminator for these dimensions: the `--size` given, else the table row with
    them (the number of heads is in no tensor's shape)."""
    if size_name:
        return sizes.get_size(size_name)
    for size in sizes.SIZES.values():
        if (size.hidden_size, size.num_layers, size.intermediate_size,
                size.embedding_size) == (hidden, layers, intermediate, embedding):
            return size
    raise ConversionError(
        f"{source}: a discriminator of hidden size {hidden}, {layers} layers, FFN "
        f"{intermediate}, embeddings {embedding} is none of the sizes "
        f"{', '.join(sizes.SIZES)} (model/sizes.py); add it there or give --size")


def _generator_from_dims(source, discriminator, hidden, layers):
    """The generator of `hidden` units and `layers` layers, by the original's rule
    (heads hidden // 64, FFN 4 × hidden), which is also ours (`sizes.generator_size`)."""
    try:
        return sizes.generator_size(discriminator, hidden / discriminator.hidden_size,
                                    layers / discriminator.num_layers)
    except errors.UserError as e:
        raise ConversionError(f"{source}: generator of {hidden} units, {layers} layers: "
                              f"{e}") from None


def config_overrides(spec: ModelSpec) -> dict:
    """`config.model` fields of a run that builds `spec` (for `--to=electra_tf`)."""
    size = named_size(spec.discriminator)
    if size is None:
        raise ConversionError(f"the discriminator ({describe(spec.discriminator)}) is none "
                              f"of the sizes {', '.join(sizes.SIZES)}; add it to "
                              "model/sizes.py")
    if spec.generator is None:
        raise ConversionError("pre-training needs the generator too; the input holds a "
                              "discriminator only")
    overrides = {"size": size, "tie_embeddings": spec.tie_embeddings,
                 "generator_hidden_fraction":
                     spec.generator.hidden_size / spec.discriminator.hidden_size,
                 "generator_layer_fraction":
                     spec.generator.num_layers / spec.discriminator.num_layers}
    derived = sizes.generator_size(spec.discriminator, overrides["generator_hidden_fraction"],
                                   overrides["generator_layer_fraction"])
    if derived != spec.generator:
        raise ConversionError(f"the generator ({describe(spec.generator)}) does not follow "
                              f"model/sizes.generator_size, which gives {describe(derived)}")
    return overrides


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


def read_tf1(path: str, size_name: str | None = None) -> Weights:
    """The original ELECTRA's pre-training checkpoint (`electra/`, `generator/`,
    `*_predictions/`); optimizer slots and `global_step` are ignored."""
    prefix = _tf1_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    word = "electra/embeddings/word_embeddings"
    if word not in shapes:
        raise ConversionError(f"{prefix}: no tensor {word}; not an ELECTRA checkpoint")
    vocab_size, embedding = shapes[word]
    discriminator = _size_from_dims(prefix, *_encoder_dims(shapes, "electra", prefix),
                                    embedding, size_name)
    generator = None
    if "generator/encoder/layer_0/attention/self/query/kernel" in shapes:
        hidden, layers, _ = _encoder_dims(shapes, "generator", prefix)
        generator = _generator_from_dims(prefix, discriminator, hidden, layers)
    spec = ModelSpec(vocab_size, discriminator, generator,
                     tie_embeddings="generator/embeddings/word_embeddings" not in shapes)

    def read(name, shape):
        if name not in shapes:
            raise ConversionError(f"{prefix}: no tensor {name}")
        _check_shape(prefix, name, shapes[name], shape)
        return np.asarray(reader.get_tensor(name), "float32")

    tensors = {slot.name: read(slot.name, slot.shape) for slot in expected_slots(spec)}
    vocab = os.path.join(os.path.dirname(prefix), "vocab.txt")
    return Weights(spec, tensors, prefix, vocab if os.path.exists(vocab) else None,
                   tuple(sorted(set(shapes) - set(tensors))))


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


def _hf_part(name: str, tie_embeddings: bool) -> tuple[str, ...]:
    """The HF models a TF1 tensor belongs to: the shared embeddings are in both."""
    if name.startswith("electra/embeddings/") and tie_embeddings:
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
        "max_position_embeddings": MAX_POSITIONS,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
        "pad_token_id": pad_id,
        "tie_word_embeddings": True,                # generator_lm_head = word embeddings
    }


def save_hf(weights: Weights, output: str, vocab_file: str | None = None) -> list[str]:
    """`output/discriminator/` (ElectraForPreTraining) and, with a generator,
    `output/generator/` (ElectraForMaskedLM): config.json, model.safetensors, vocab.txt."""
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
                if part in _hf_part(name, spec.tie_embeddings):
                    key, transpose = hf_name(name)
                    arrays[key] = np.ascontiguousarray(array.T if transpose else array)
            # transformers refuses safetensors files without format metadata.
            safetensors_np.save_file(arrays, os.path.join(directory, HF_WEIGHTS),
                                     metadata={"format": "pt"})
            _write_json(_hf_config(spec, part, pad_id), os.path.join(directory, "config.json"))
            _copy_vocab(vocab_file, spec, directory)
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


def read_hf(path: str, size_name: str | None = None) -> Weights:
    """Hugging Face ELECTRA: `path/discriminator` (+ `path/generator`) or one
    ElectraForPreTraining directory; config.json and model.safetensors in each."""
    directories = _hf_directories(path)
    configs = {part: _hf_read_config(d) for part, d in directories.items()}
    disc = configs["discriminator"]
    source = os.path.join(directories["discriminator"], "config.json")
    if "ElectraForMaskedLM" in disc.get("architectures", []):
        raise ConversionError(f"{source}: an ElectraForMaskedLM (a generator); give the "
                              "directory holding discriminator/ and generator/")
    hidden = disc["hidden_size"]
    embedding = disc.get("embedding_size", hidden)
    discriminator = sizes.EncoderSize(hidden, disc["num_hidden_layers"],
                                      disc["num_attention_heads"], disc["intermediate_size"],
                                      embedding)
    if size_name and sizes.get_size(size_name) != discriminator:
        raise ConversionError(f"{source}: the discriminator ({describe(discriminator)}) is "
                              f"not --size={size_name}")
    generator = None
    if "generator" in configs:
        gen = configs["generator"]
        gen_source = os.path.join(directories["generator"], "config.json")
        for key in ("vocab_size", "embedding_size"):
            if gen.get(key, gen["hidden_size"]) != disc.get(key, hidden):
                raise ConversionError(f"{gen_source}: {key} differs from the "
                                      "discriminator's; they cannot share embeddings")
        generator = sizes.EncoderSize(gen["hidden_size"], gen["num_hidden_layers"],
                                      gen["num_attention_heads"], gen["intermediate_size"],
                                      embedding)
    files = {part: _hf_load(d) for part, d in directories.items()}
    # Shared embeddings: the generator holds a copy. Different ones were not shared.
    tied = "generator" not in files or all(
        np.array_equal(files["discriminator"][1].get(key), array)
        for key, array in files["generator"][1].items() if key.startswith("electra.embeddings."))
    spec = ModelSpec(disc["vocab_size"], discriminator, generator, tie_embeddings=tied)

    used = {part: set() for part in files}

    def read(name, shape):
        key, transpose = hf_name(name)
        part = _hf_part(name, tied)[0]
        if part not in files:
            raise ConversionError(f"{path}: no generator/ directory (needed for {key})")
        file, arrays = files[part]
        if key not in arrays:
            raise ConversionError(f"{file}: no tensor {key} (TF1 {name})")
        _check_shape(file, key, arrays[key].shape, shape[::-1] if transpose else shape)
        for holder in _hf_part(name, tied):
            used.get(holder, set()).add(key)
        return np.asarray(arrays[key].T if transpose else arrays[key], "float32")

    tensors = {slot.name: read(slot.name, slot.shape) for slot in expected_slots(spec)}
    if "generator" in files:
        file, arrays = files["generator"]
        output = arrays.get("generator_lm_head.weight")
        words = tensors["electra/embeddings/word_embeddings" if tied
                        else "generator/embeddings/word_embeddings"]
        if output is not None and not np.array_equal(output, words):
            raise ConversionError(f"{file}: generator_lm_head.weight differs from the word "
                                  "embeddings; ours projects with the word embeddings")
    ignored = tuple(sorted(f"{part}/{key}" for part, (_, arrays) in files.items()
                           for key in arrays
                           if key not in used[part] and key not in _HF_NOT_WEIGHTS))
    vocab = os.path.join(directories["discriminator"], "vocab.txt")
    return Weights(spec, tensors, path, vocab if os.path.exists(vocab) else None, ignored)


# ---------------------------------------------------------------------------- electra_tf
def read_electra_tf(path: str, size_name: str | None = None) -> Weights:
    """A training run: its workdir (latest checkpoint) or one checkpoint prefix in
    WORKDIR/checkpoints; config.json and vocab.txt come from the workdir."""
    # The exporter's loader (the one way a run is read); imported here, as it brings tf.text.
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    if tf.io.gfile.isdir(path):
        workdir, checkpoint = path, None
    else:
        workdir, checkpoint = os.path.dirname(os.path.dirname(path)), path
    config, vocab, model, checkpoint = export.load_run(workdir, checkpoint)
    slots = pretrainer_slots(model)
    spec = ModelSpec(vocab.size, model.discriminator_size, model.generator_size,
                     model.tie_embeddings)
    if size_name and config.model.size != size_name:
        raise ConversionError(f"{workdir}/config.json: model.size is "
                              f"{config.model.size!r}, not --size={size_name}")
    return Weights(spec, {slot.name: slot.get() for slot in slots}, checkpoint, vocab.path)


def save_electra_tf(weights: Weights, output: str, config: dict, vocab_file: str) -> str:
    """A workdir that `python -m electra_tf.train --workdir=output` continues: config.json
    (`config` with the spec's `model` fields), vocab.txt, and checkpoints/ckpt-0 holding
    `step` (0) and `model` (no optimizer: it starts fresh). Returns the checkpoint path."""
    if not vocab_file:
        raise ConversionError("--to=electra_tf needs the vocabulary: give --vocab_file")
    config = json.loads(json.dumps(config))  # a copy
    config["model"].update(config_overrides(weights.spec))
    model = build_pretrainer(weights.spec)
    load_into(pretrainer_slots(model), weights)
    with _new_directory(output) as tmp:
        config["data"]["vocab_file"] = os.path.join(output, "vocab.txt")
        _copy_vocab(vocab_file, weights.spec, tmp)
        _write_json(config, os.path.join(tmp, "config.json"))
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
        dropout=0.1, max_sequence_length=MAX_POSITIONS, dtype="float32")
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
def read(fmt: str, path: str, size_name: str | None = None) -> Weights:
    """The table of `path` in format `fmt` (one of FORMATS_IN)."""
    readers = {"tf1": read_tf1, "hf": read_hf, "electra_tf": read_electra_tf}
    if fmt not in readers:
        raise ConversionError(f"--from={fmt}: choose one of {', '.join(readers)}")
    if not tf.io.gfile.exists(path) and not tf.io.gfile.exists(path + ".index"):
        raise ConversionError(f"{path}: not found")
    return readers[fmt](path, size_name)


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
