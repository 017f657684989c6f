"""Hugging Face directories (`convert.hf`): an exact round trip under HF's names and
layouts, errors that name the file and the tensor."""

import json
import os

import numpy as np
import pytest
import safetensors
from safetensors import numpy as safetensors_np

from electra_tf.convert import hf
from electra_tf.convert import table
from tests.convert import originals


def test_hf_round_trip_is_exact_with_hf_names(original, weights, tmp_path):
    out = str(tmp_path / "hf")
    hf.HuggingFace().write(weights, out, original["vocab"].path)
    t = original["tensors"]

    disc = safetensors_np.load_file(os.path.join(out, "discriminator", "model.safetensors"))
    assert len(disc) == 5 + 16 * originals.TINY.num_layers + 4
    np.testing.assert_array_equal(disc["electra.encoder.layer.1.attention.self.query.weight"],
                                  t["electra/encoder/layer_1/attention/self/query/kernel"].T)
    np.testing.assert_array_equal(disc["electra.encoder.layer.0.output.LayerNorm.bias"],
                                  t["electra/encoder/layer_0/output/LayerNorm/beta"])
    assert disc["discriminator_predictions.dense_prediction.weight"].shape == (1, 64)
    gen = safetensors_np.load_file(os.path.join(out, "generator", "model.safetensors"))
    assert len(gen) == 5 + 2 + 16 * originals.GENERATOR.num_layers + 5
    np.testing.assert_array_equal(gen["electra.embeddings_project.weight"],
                                  t["generator/embeddings_project/kernel"].T)  # [32, 64]
    np.testing.assert_array_equal(gen["electra.embeddings.word_embeddings.weight"],
                                  t["electra/embeddings/word_embeddings"])    # its copy
    np.testing.assert_array_equal(gen["generator_lm_head.bias"],
                                  t["generator_predictions/output_bias"])
    assert gen["generator_predictions.dense.weight"].shape == (64, 32)        # [E, H_gen]
    assert "generator_lm_head.weight" not in gen  # tied to the word embeddings, as HF saves

    config = json.load(open(os.path.join(out, "generator", "config.json")))
    assert config["architectures"] == ["ElectraForMaskedLM"]
    assert (config["hidden_size"], config["num_attention_heads"], config["embedding_size"],
            config["intermediate_size"], config["vocab_size"]) == (32, 1, 64, 128, 32)
    config = json.load(open(os.path.join(out, "discriminator", "config.json")))
    assert config["architectures"] == ["ElectraForPreTraining"]
    assert (config["model_type"], config["hidden_act"], config["layer_norm_eps"]) == (
        "electra", "gelu", 1e-12)
    assert os.path.exists(os.path.join(out, "discriminator", "vocab.txt"))
    tokenizer = json.load(open(os.path.join(out, "generator", "tokenizer_config.json")))
    assert (tokenizer["do_lower_case"], tokenizer["model_max_length"]) == (True, 512)

    again = hf.HuggingFace().read(out)
    assert again.spec == weights.spec and again.ignored == ()
    originals.assert_same_tensors(again.tensors, weights.tensors)

    alone = hf.HuggingFace().read(os.path.join(out, "discriminator"))  # one ElectraForPreTraining
    assert alone.spec.generator is None
    originals.assert_same_tensors(alone.tensors, {
        k: v for k, v in weights.tensors.items()
        if k.startswith(("electra/", "discriminator_"))})


@pytest.mark.parametrize("key, value, message", [
    ("electra.encoder.layer.0.intermediate.dense.weight", None,
     r"discriminator/model.safetensors: no tensor electra.encoder.layer.0.intermediate.dense"
     r".weight \(TF1 electra/encoder/layer_0/intermediate/dense/kernel\)"),
    ("discriminator_predictions.dense.weight", np.zeros((64, 32), "float32"),
     r"discriminator/model.safetensors: discriminator_predictions.dense.weight has shape "
     r"\[64, 32\], expected \[64, 64\]"),
])
def test_hf_missing_or_misshapen_tensor_is_named(weights, tmp_path, key, value, message):
    out = str(tmp_path / "hf")
    hf.HuggingFace().write(weights, out)
    path = os.path.join(out, "discriminator", "model.safetensors")
    arrays = safetensors_np.load_file(path)
    if value is None:
        del arrays[key]
    else:
        arrays[key] = value
    safetensors_np.save_file(arrays, path, metadata={"format": "pt"})
    with pytest.raises(table.ConversionError, match=message):
        hf.HuggingFace().read(out)


def test_hf_config_defaults_are_transformers():
    transformers = pytest.importorskip("transformers",
                                       reason="pip install -r requirements-test.txt")
    config = transformers.ElectraConfig()  # transformers 5 has no position_embedding_type
    ours = {**hf._DEFAULTS, **hf._EXACT}
    assert {key: getattr(config, key, "absolute") for key in ours} == ours


def _edit_config(out, part, **changes):
    """Rewrites `out/part/config.json` with `changes`; a value of ... removes the key."""
    path = os.path.join(out, part, "config.json")
    config = json.load(open(path))
    for key, value in changes.items():
        if value is ...:
            del config[key]
        else:
            config[key] = value
    json.dump(config, open(path, "w"))


def test_hf_config_without_optional_keys_reads_with_transformers_defaults(weights, tmp_path):
    out = str(tmp_path / "hf")
    hf.HuggingFace().write(weights, out)
    for part in ("discriminator", "generator"):  # 512 positions, exact gelu: the defaults
        _edit_config(out, part, max_position_embeddings=..., hidden_act=...,
                     layer_norm_eps=..., position_embedding_type=...)
    assert hf.HuggingFace().read(out).spec == weights.spec

    _edit_config(out, "discriminator", intermediate_size=...)  # 1024, which the weights refute
    with pytest.raises(table.ConversionError, match=(
            r"^\S+/discriminator/model.safetensors: electra.encoder.layer.0.intermediate.dense"
            r".weight has shape \[256, 64\], expected \[1024, 64\] for this model$")):
        hf.HuggingFace().read(out)


@pytest.mark.parametrize("changes, message", [
    ({"model_type": ...}, "model_type is None, not 'electra'"),
    ({"intermediate_size": None}, "intermediate_size is None; it must be a positive integer"),
    ({"num_hidden_layers": "2"}, "num_hidden_layers is '2'; it must be a positive integer"),
    ({"hidden_act": "gelu_new"}, "hidden_act is 'gelu_new'; only 'gelu' converts exactly"),
])
def test_hf_config_error_names_the_file_and_the_key(weights, tmp_path, changes, message):
    out = str(tmp_path / "hf")
    hf.HuggingFace().write(weights, out)
    _edit_config(out, "discriminator", **changes)
    with pytest.raises(table.ConversionError) as e:
        hf.HuggingFace().read(out)
    assert str(e.value) == f"{os.path.join(out, 'discriminator', 'config.json')}: {message}"


def _bfloat16_file(arrays) -> bytes:
    """safetensors bytes of float32 `arrays` cut to bfloat16 (their top 16 bits), laid out
    by hand: numpy, so safetensors.numpy, has no bfloat16."""
    header, data = {}, b""
    for name, array in arrays.items():
        bits = (np.ascontiguousarray(array, "<f4").view("<u4") >> 16).astype("<u2")
        header[name] = {"dtype": "BF16", "shape": list(array.shape),
                        "data_offsets": [len(data), len(data) + bits.nbytes]}
        data += bits.tobytes()
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


def test_hf_bfloat16_reads_widened_to_float32(weights, tmp_path):
    out = str(tmp_path / "hf")
    hf.HuggingFace().write(weights, out)
    for part in ("discriminator", "generator"):
        path = os.path.join(out, part, "model.safetensors")
        data = _bfloat16_file(safetensors_np.load_file(path))
        # safetensors' own parser reads the layout as we wrote it
        assert {spec["dtype"] for _, spec in safetensors.deserialize(data)} == {"BF16"}
        with open(path, "wb") as f:
            f.write(data)
    again = hf.HuggingFace().read(out)
    assert again.spec == weights.spec
    originals.assert_same_tensors(again.tensors, {
        name: (np.ascontiguousarray(array).view("uint32") & 0xFFFF0000).view("float32")
        for name, array in weights.tensors.items()})


@pytest.mark.parametrize("content, message", [
    (lambda _: b"version https://git-lfs.github.com/spec/v1\noid sha256:4d2a\nsize 54236116\n",
     "a git-lfs pointer, not the weights; run `git lfs pull` in the clone (or clone with "
     "git-lfs installed)"),
    (lambda _: b"<html>Not Found</html>",
     "not a readable safetensors file (Error while deserializing: header too large)"),
    (lambda arrays: _bfloat16_file(arrays)[:-10],
     "tensor {last} does not match its header (a truncated or damaged file?)"),
])
def test_hf_unreadable_weights_are_one_line_naming_the_file(weights, tmp_path, content,
                                                            message):
    out = str(tmp_path / "hf")
    hf.HuggingFace().write(weights, out)
    path = os.path.join(out, "generator", "model.safetensors")
    arrays = safetensors_np.load_file(path)
    with open(path, "wb") as f:
        f.write(content(arrays))
    with pytest.raises(table.ConversionError) as e:
        hf.HuggingFace().read(out)
    assert str(e.value) == f"{path}: " + message.format(last=list(arrays)[-1])
