"""Hugging Face ELECTRA directories: config.json and model.safetensors (transformers);
`HuggingFace`, format name `hf`.

`write` makes `discriminator/` (ElectraForPreTraining) and, with a generator,
`generator/` (ElectraForMaskedLM), each with vocab.txt and tokenizer_config.json so that
`AutoTokenizer` normalises as our data; `read` takes such a pair, or one
ElectraForPreTraining directory (a discriminator alone), of any shape: config.json says
the dimensions, the tensors say the weight sharing (HF stores copies: equal embedding,
and encoder, tensors mean tie=embeddings, and all). The names and transposes are
`hf_name`'s; only safetensors files are read (bfloat16 ones widen to float32,
exactly).

>>> hf_name("electra/encoder/layer_3/attention/output/LayerNorm/gamma")
('electra.encoder.layer.3.attention.output.LayerNorm.weight', False)
>>> hf_name("generator/embeddings_project/kernel")
('electra.embeddings_project.weight', True)
"""

import json
import os
import re

import numpy as np
import tensorflow as tf

from electra_tf import workdir as workdir_lib
from electra_tf.convert import files
from electra_tf.convert import formats
from electra_tf.convert import table
from electra_tf.model import sizes
from electra_tf.text import tokenizer as tokenizer_lib

WEIGHTS_FILE = "model.safetensors"
# In HF files but not weights: buffers (older transformers saved them), and the output
# embeddings, tied to the word embeddings (checked equal when present).
_NOT_WEIGHTS = ("electra.embeddings.position_ids", "electra.embeddings.token_type_ids",
                "generator_lm_head.weight")


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


def _part(name: str, tie: str) -> tuple[str, ...]:
    """The HF models a TF1 tensor belongs to: what is shared is in both."""
    if name.startswith("electra/embeddings/") and tie != "none":
        return ("discriminator", "generator")
    if name.startswith("electra/") and tie == "all":
        return ("discriminator", "generator")
    if name.startswith(("electra/", "discriminator_predictions/")):
        return ("discriminator",)
    return ("generator",)


def _config(spec: table.ModelSpec, part: str, pad_id: int) -> dict:
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


def _tokenizer_config(spec: table.ModelSpec, lower_case: bool) -> dict:
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


def _directories(path: str) -> dict[str, str]:
    """{"discriminator": dir[, "generator": dir]}: `path` holds both (as `write` writes
    them), or is one ElectraForPreTraining directory."""
    if tf.io.gfile.exists(os.path.join(path, "discriminator", "config.json")):
        found = {"discriminator": os.path.join(path, "discriminator")}
        if tf.io.gfile.exists(os.path.join(path, "generator", "config.json")):
            found["generator"] = os.path.join(path, "generator")
        return found
    if tf.io.gfile.exists(os.path.join(path, "config.json")):
        return {"discriminator": path}
    raise table.ConversionError(f"{path}: no config.json, nor discriminator/config.json; "
                                "give a Hugging Face ELECTRA directory")


# What transformers' ElectraConfig takes for a key config.json leaves out (ELECTRA-small's
# discriminator): a directory reads here as `from_pretrained` reads it, and a default that
# does not fit the weights is a named tensor's shape error.
_DEFAULTS = {"vocab_size": 30522, "embedding_size": 128, "hidden_size": 256,
             "num_hidden_layers": 12, "num_attention_heads": 4, "intermediate_size": 1024,
             "max_position_embeddings": 512}
_EXACT = {"hidden_act": "gelu", "position_embedding_type": "absolute",
          "layer_norm_eps": 1e-12}  # ours computes these one way only (also the defaults)


def _read_config(directory: str) -> dict:
    """config.json with transformers' defaults filled in; a `ConversionError` naming the
    file and the key for what ours cannot build."""
    path = os.path.join(directory, "config.json")
    config = workdir_lib.read_json(directory, "config.json")  # there (`_directories`)
    if config.get("model_type") != "electra":
        raise table.ConversionError(f"{path}: model_type is {config.get('model_type')!r}, "
                                    "not 'electra'")
    config = {**_DEFAULTS, **_EXACT, **config}
    for key in _DEFAULTS:
        value = config[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise table.ConversionError(f"{path}: {key} is {value!r}; it must be a positive "
                                        "integer")
    for key, value in _EXACT.items():
        if config[key] != value:
            raise table.ConversionError(f"{path}: {key} is {config[key]!r}; only "
                                        f"{value!r} converts exactly")
    return config


def _load(directory: str) -> tuple[str, dict]:
    import safetensors  # pylint: disable=g-import-not-at-top
    from safetensors import numpy as safetensors_np  # pylint: disable=g-import-not-at-top
    path = os.path.join(directory, WEIGHTS_FILE)
    if not tf.io.gfile.exists(path):
        raise table.ConversionError(
            f"{path}: not found (only safetensors files are read; save a PyTorch model "
            "with save_pretrained(safe_serialization=True))")
    with tf.io.gfile.GFile(path, "rb") as f:  # a URL too (gs://), so not `load_file`
        data = f.read()
    try:
        return path, safetensors_np.load(data)
    except (safetensors.SafetensorError, KeyError) as e:  # KeyError: a dtype numpy lacks
        return path, _read_safetensors(path, data, e)


# safetensors dtypes → little-endian numpy ones; BF16 is read as its raw 16 bits.
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
           "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def _read_safetensors(path: str, data: bytes, error: Exception) -> dict:
    """The arrays of `data`, a safetensors file that safetensors' numpy loader refused
    (`error`): one holding bfloat16, which numpy lacks, is read here (a bfloat16's bits
    are a float32's top half); anything else is a `ConversionError` saying what is wrong.
    The layout: an 8-byte little-endian header size, a JSON header {name: {dtype, shape,
    data_offsets}}, then the tensors' bytes (offsets count from there)."""
    if data.startswith(b"version https://git-lfs"):
        raise table.ConversionError(f"{path}: a git-lfs pointer, not the weights; run "
                                    "`git lfs pull` in the clone (or clone with git-lfs "
                                    "installed)")
    size = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + size]) if 8 < 8 + size <= len(data) else None
    except ValueError:
        header = None
    entries = [e for k, e in header.items() if k != "__metadata__"] if isinstance(
        header, dict) else []
    if not any(isinstance(e, dict) and e.get("dtype") == "BF16" for e in entries):
        if isinstance(error, KeyError):
            raise table.ConversionError(f"{path}: holds {error.args[0]} tensors, which are "
                                        "not read here; save the model as float32")
        raise table.ConversionError(f"{path}: not a readable safetensors file ({error})")
    body = memoryview(data)[8 + size:]
    arrays = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if dtype not in _DTYPES:
            raise table.ConversionError(f"{path}: tensor {name} is {dtype}, which is not "
                                        "read here; save the model as float32")
        try:
            begin, end = entry["data_offsets"]
            if not 0 <= begin <= end <= len(body):
                raise ValueError
            array = np.frombuffer(body[begin:end], _DTYPES[dtype]).reshape(entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise table.ConversionError(f"{path}: tensor {name} does not match its header "
                                        "(a truncated or damaged file?)") from None
        if dtype == "BF16":  # the bits as a float32's top half: exact
            array = (array.astype("uint32") << 16).view("float32")
        arrays[name] = array.astype(array.dtype.newbyteorder("="))
    return arrays


def _size(config: dict) -> sizes.EncoderSize:
    return sizes.EncoderSize(config["hidden_size"], config["num_hidden_layers"],
                             config["num_attention_heads"], config["intermediate_size"],
                             config["embedding_size"])


def _tie(loaded: dict, discriminator, generator) -> str:
    """What the generator shares, read off the tensors (HF stores copies): equal
    embeddings, and equal encoder weights too under tie='all'."""
    disc, gen = loaded["discriminator"][1], loaded["generator"][1]

    def same(prefix):
        keys = [k for k in gen if k.startswith(prefix) and k not in _NOT_WEIGHTS]
        return bool(keys) and all(k in disc and disc[k].shape == gen[k].shape
                                  and np.array_equal(disc[k], gen[k]) for k in keys)

    if not same("electra.embeddings."):
        return "none"
    if generator == discriminator and same("electra.encoder."):
        return "all"
    return "embeddings"


class HuggingFace(formats.Format):
    """Hugging Face ELECTRA directories (transformers' safetensors and config.json)."""

    name = "hf"

    def read(self, path: str, num_heads: int | None = None,
             generator_num_heads: int | None = None) -> table.Weights:
        """Hugging Face ELECTRA of any shape: `path/discriminator` (+ `path/generator`) or
        one ElectraForPreTraining directory; config.json and model.safetensors in each."""
        del num_heads, generator_num_heads  # config.json says
        directories = _directories(path)
        configs = {part: _read_config(d) for part, d in directories.items()}
        disc = configs["discriminator"]
        source = os.path.join(directories["discriminator"], "config.json")
        if "ElectraForMaskedLM" in disc.get("architectures", []):
            raise table.ConversionError(f"{source}: an ElectraForMaskedLM (a generator); give "
                                        "the directory holding discriminator/ and generator/")
        discriminator = _size(disc)
        positions = disc["max_position_embeddings"]
        loaded = {part: _load(d) for part, d in directories.items()}
        if "generator" in configs:
            gen = configs["generator"]
            gen_source = os.path.join(directories["generator"], "config.json")
            for key in ("vocab_size", "max_position_embeddings"):
                if gen[key] != disc[key]:
                    raise table.ConversionError(f"{gen_source}: {key} is {gen[key]}, the "
                                                f"discriminator's {disc[key]}; ours needs "
                                                "one")
            generator = _size(gen)
            tie = _tie(loaded, discriminator, generator)
        else:
            tie, generator = "embeddings", table.fresh_generator(discriminator)
        spec = table.ModelSpec(disc["vocab_size"],
                               table.model_shape(source, discriminator, generator, positions,
                                                 tie),
                               has_generator="generator" in configs)
        used = {part: set() for part in loaded}

        def tensor(name, shape):
            key, transpose = hf_name(name)
            part = _part(name, tie)[0]
            if part not in loaded:
                raise table.ConversionError(f"{path}: no generator/ directory (needed for "
                                            f"{key})")
            file, arrays = loaded[part]
            if key not in arrays:
                raise table.ConversionError(f"{file}: no tensor {key} (TF1 {name})")
            table.check_shape(file, key, arrays[key].shape, shape[::-1] if transpose else shape)
            for holder in _part(name, tie):
                used.get(holder, set()).add(key)
            return np.asarray(arrays[key].T if transpose else arrays[key], "float32")

        tensors = {slot.name: tensor(slot.name, slot.shape)
                   for slot in table.expected_slots(spec)}
        if "generator" in loaded:
            file, arrays = loaded["generator"]
            output = arrays.get("generator_lm_head.weight")
            words = tensors["generator/embeddings/word_embeddings" if tie == "none"
                            else "electra/embeddings/word_embeddings"]
            if output is not None and not np.array_equal(output, words):
                raise table.ConversionError(f"{file}: generator_lm_head.weight differs from the "
                                            "word embeddings; ours projects with the word "
                                            "embeddings")
        ignored = tuple(sorted(f"{part}/{key}" for part, (_, arrays) in loaded.items()
                               for key in arrays
                               if key not in used[part] and key not in _NOT_WEIGHTS))
        vocab = os.path.join(directories["discriminator"], "vocab.txt")
        return table.Weights(spec, tensors, path, vocab if tf.io.gfile.exists(vocab) else None,
                             ignored, lower_case=_lower_case(directories["discriminator"]))

    def write(self, weights: table.Weights, output: str, vocab_file: str | None = None,
              lower_case: bool = True) -> list[str]:
        """`output/discriminator/` (ElectraForPreTraining) and, with a generator,
        `output/generator/` (ElectraForMaskedLM): config.json, model.safetensors, and with a
        vocab, vocab.txt and tokenizer_config.json (`lower_case`: the data's normalisation)."""
        from safetensors import numpy as safetensors_np  # pylint: disable=g-import-not-at-top
        spec = weights.spec
        parts = ["discriminator"] + (["generator"] if spec.generator is not None else [])
        pad_id = tokenizer_lib.Vocab.load(vocab_file).pad_id if vocab_file else 0
        with files.new_directory(output) as tmp:
            for part in parts:
                directory = os.path.join(tmp, part)
                tf.io.gfile.makedirs(directory)
                arrays = {}
                for name, array in weights.tensors.items():
                    if part in _part(name, spec.tie):
                        key, transpose = hf_name(name)
                        arrays[key] = np.ascontiguousarray(array.T if transpose else array)
                # transformers refuses safetensors files without format metadata; the
                # bytes go through gfile, as `directory` may be a URL (gs://).
                with tf.io.gfile.GFile(os.path.join(directory, WEIGHTS_FILE), "wb") as f:
                    f.write(safetensors_np.save(arrays, metadata={"format": "pt"}))
                files.write_json(_config(spec, part, pad_id),
                                 os.path.join(directory, "config.json"))
                if vocab_file:
                    files.copy_vocab(vocab_file, spec, directory)
                    files.write_json(_tokenizer_config(spec, lower_case),
                                     os.path.join(directory, "tokenizer_config.json"))
        return [os.path.join(output, part) for part in parts]


def _lower_case(directory: str) -> bool | None:
    """do_lower_case of the directory's tokenizer_config.json, if it says."""
    value = (workdir_lib.read_json(directory, "tokenizer_config.json") or {}).get(
        "do_lower_case")
    return None if value is None else bool(value)
