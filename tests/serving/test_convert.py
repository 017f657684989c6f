"""Checkpoint conversion: every tensor in its place, exact round trips, the original's
equations computed in NumPy as the reference, keras-hub within its gelu approximation,
errors that name the tensor."""

import importlib.util
import json
import math
import os
import re

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from safetensors import numpy as safetensors_np

from electra_tf.model import sizes
from electra_tf.serving import convert
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = sizes.SIZES["tiny"]                   # E = H = 64, 2 layers, 2 heads, FFN 256
GENERATOR = sizes.generator_size(TINY, 0.5)  # 32 units, 1 head, FFN 128: projects 64 → 32
TINY_SHAPE = sizes.ModelShape(TINY, GENERATOR)
# Shapes no preset has: hidden 96, 3 layers, 3 heads (not hidden / 64), FFN 384, E 48,
# 128 positions; the generator half as wide. Then each weight sharing.
CUSTOM = sizes.EncoderSize(96, 3, 3, 384, 48)
SHAPES = {
    "custom": sizes.ModelShape(CUSTOM, sizes.EncoderSize(48, 3, 1, 192, 48), 128),
    "none": sizes.ModelShape(TINY, sizes.EncoderSize(32, 1, 1, 128, 32), 128, "none"),
    "all": sizes.ModelShape(CUSTOM, CUSTOM, 64, "all"),
}
# Not weights: the original's checkpoints also hold optimizer slots and the step.
NOT_WEIGHTS = ("global_step", "electra/embeddings/word_embeddings/adam_m",
               "generator/encoder/layer_0/output/dense/kernel/adam_v")


def original_layout(vocab_size, shape=TINY_SHAPE, generator=True):
    """{name: shape} of the original's pre-training checkpoint, written out from
    google-research/electra (model/modeling.py BertModel, run_pretraining.py heads): the
    discriminator under `electra/`, the generator under `generator/` using the same
    `electra/embeddings` (tied; `untied_generator_embeddings`: its own
    `generator/embeddings` at its width; `untied_generator=False`: no `generator/` at
    all), kernels [in, out]."""
    e = shape.discriminator.embedding_size
    layout = {}

    def embeddings(scope, width):
        layout.update({f"{scope}/embeddings/word_embeddings": (vocab_size, width),
                       f"{scope}/embeddings/position_embeddings": (shape.max_positions, width),
                       f"{scope}/embeddings/token_type_embeddings": (2, width),
                       f"{scope}/embeddings/LayerNorm/gamma": (width,),
                       f"{scope}/embeddings/LayerNorm/beta": (width,)})

    embeddings("electra", e)

    def dense(name, n_in, n_out):
        layout[f"{name}/kernel"], layout[f"{name}/bias"] = (n_in, n_out), (n_out,)

    def layer_norm(name, n):
        layout[f"{name}/gamma"], layout[f"{name}/beta"] = (n,), (n,)

    encoders = [("electra", shape.discriminator, e)]
    if generator and shape.tie == "none":
        embeddings("generator", shape.generator.embedding_size)
    if generator and shape.tie != "all":
        encoders.append(("generator", shape.generator, shape.generator.embedding_size))
    for scope, size, width in encoders:
        h, f = size.hidden_size, size.intermediate_size
        if h != width:
            dense(f"{scope}/embeddings_project", width, h)
        for i in range(size.num_layers):
            p = f"{scope}/encoder/layer_{i}"
            for name in ("query", "key", "value"):
                dense(f"{p}/attention/self/{name}", h, h)
            dense(f"{p}/attention/output/dense", h, h)
            layer_norm(f"{p}/attention/output/LayerNorm", h)
            dense(f"{p}/intermediate/dense", h, f)
            dense(f"{p}/output/dense", f, h)
            layer_norm(f"{p}/output/LayerNorm", h)
    h = shape.discriminator.hidden_size
    dense("discriminator_predictions/dense", h, h)
    dense("discriminator_predictions/dense_1", h, 1)
    if generator:
        e_gen = shape.generator.embedding_size
        dense("generator_predictions/dense", shape.generator.hidden_size, e_gen)
        layer_norm("generator_predictions/LayerNorm", e_gen)
        layout["generator_predictions/output_bias"] = (vocab_size,)
    return layout


def where_in_ours(model, name):
    """The variable of our pre-trainer that the original's tensor `name` must land in."""
    embeddings = model.embeddings
    fixed = {"electra/embeddings/word_embeddings": embeddings.token_embedding.embeddings,
             "electra/embeddings/position_embeddings":
                 embeddings.position_embedding.position_embeddings,
             "electra/embeddings/token_type_embeddings": embeddings.segment_embedding.embeddings,
             "electra/embeddings/LayerNorm/gamma": embeddings.layer_norm.gamma,
             "electra/embeddings/LayerNorm/beta": embeddings.layer_norm.beta,
             "generator_predictions/output_bias": model.generator_head._bias}
    if name in fixed:
        return fixed[name]
    *path, leaf = name.split("/")
    path = "/".join(path)
    encoders = {"electra": model.discriminator, "generator": model.generator}
    match = re.fullmatch(r"(electra|generator)/encoder/layer_(\d+)/(.*)", path)
    if match:
        block = encoders[match.group(1)].blocks[int(match.group(2))]
        attention = block._self_attention_layer
        layer = {"attention/self/query": attention.query_dense,
                 "attention/self/key": attention.key_dense,
                 "attention/self/value": attention.value_dense,
                 "attention/output/dense": attention.output_dense,
                 "attention/output/LayerNorm": block._self_attention_layer_norm,
                 "intermediate/dense": block._feedforward_intermediate_dense,
                 "output/dense": block._feedforward_output_dense,
                 "output/LayerNorm": block._feedforward_layer_norm}[match.group(3)]
    elif path.endswith("/embeddings_project"):
        layer = encoders[path.split("/")[0]].projection
    else:
        layer = {"discriminator_predictions/dense": model.discriminator_head.dense,
                 "discriminator_predictions/dense_1": model.discriminator_head.logits,
                 "generator_predictions/dense": model.generator_head._intermediate_dense,
                 "generator_predictions/LayerNorm":
                     model.generator_head._intermediate_layer_norm}[path]
    return getattr(layer, leaf)


def write_original(directory, shape=TINY_SHAPE, generator=True, junk=NOT_WEIGHTS):
    """An original-style checkpoint of random weights (N(0, 0.1); LayerNorm scales near
    1) written by TF1's Saver, with vocab.txt beside it."""
    os.makedirs(directory, exist_ok=True)
    vocab = helpers.write_vocab(str(directory))
    rng = np.random.default_rng(0)
    tensors = {name: (rng.normal(0, 0.1, size) + name.endswith("gamma")).astype("float32")
               for name, size in original_layout(vocab.size, shape, generator).items()}
    junk = {name: np.ones((2,), "float32") for name in junk}
    variables = {name: tf.Variable(value) for name, value in {**tensors, **junk}.items()}
    prefix = tf.compat.v1.train.Saver(var_list=variables).save(
        None, os.path.join(str(directory), "model.ckpt"))
    return {"prefix": prefix, "dir": str(directory), "tensors": tensors, "vocab": vocab}


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return write_original(tmp_path_factory.mktemp("tf1"))


@pytest.fixture(scope="module")
def weights(original):
    return convert.read_tf1(original["dir"])


@pytest.fixture(scope="module")
def model(weights):
    model = convert.build_pretrainer(weights.spec)
    convert.load_into(convert.pretrainer_slots(model), weights)
    return model


def assert_same_tensors(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype == np.float32, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_tf1_every_tensor_lands_in_its_place(original, weights, model):
    assert weights.spec == convert.ModelSpec(original["vocab"].size, TINY_SHAPE)
    assert weights.vocab_file == os.path.join(original["dir"], "vocab.txt")
    assert sorted(weights.ignored) == sorted(NOT_WEIGHTS)
    assert_same_tensors(weights.tensors, original["tensors"])
    placed = set()
    for name, array in original["tensors"].items():
        variable = where_in_ours(model, name)
        np.testing.assert_array_equal(variable.numpy().reshape(array.shape), array,
                                      err_msg=name)
        placed.add(id(variable))
    assert placed == {id(v) for v in model.weights}  # and nothing of ours is left over


# ------------------------------------------------------------------ reference forward
_erf = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x, t, name):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-12) * t[f"{name}/gamma"] + t[f"{name}/beta"]


def _dense(x, t, name):
    return x @ t[f"{name}/kernel"] + t[f"{name}/bias"]


def reference_encoder(t, scope, size, ids, segments, mask, e="electra/embeddings"):
    """The original's BertModel in float64 NumPy: sequence output [B, S, H]."""
    t = {k: v.astype("float64") for k, v in t.items()}
    x = (t[f"{e}/word_embeddings"][ids] + t[f"{e}/token_type_embeddings"][segments]
         + t[f"{e}/position_embeddings"][:ids.shape[1]])
    x = _layer_norm(x, t, f"{e}/LayerNorm")
    if f"{scope}/embeddings_project/kernel" in t:
        x = _dense(x, t, f"{scope}/embeddings_project")
    batch, length, hidden = x.shape
    head = hidden // size.num_heads
    adder = (1.0 - mask[:, None, None, :]) * -10000.0          # [B, 1, 1, S]

    def heads(v):                                               # [B, S, H] → [B, n, S, d]
        return v.reshape(batch, length, size.num_heads, head).transpose(0, 2, 1, 3)

    for i in range(size.num_layers):
        p = f"{scope}/encoder/layer_{i}"
        q, k, v = (heads(_dense(x, t, f"{p}/attention/self/{n}"))
                   for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        a = _layer_norm(_dense(context, t, f"{p}/attention/output/dense") + x, t,
                        f"{p}/attention/output/LayerNorm")
        x = _layer_norm(_dense(_gelu(_dense(a, t, f"{p}/intermediate/dense")), t,
                               f"{p}/output/dense") + a, t, f"{p}/output/LayerNorm")
    return x


def test_tf1_converted_model_computes_the_original(original, model):
    t = original["tensors"]
    rng = np.random.default_rng(1)
    ids = rng.integers(5, original["vocab"].size, (2, 12))
    segments = np.zeros_like(ids)
    segments[:, 6:] = 1
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    inputs = {"token_ids": ids.astype("int32"), "segment_ids": segments.astype("int32"),
              "padding_mask": mask.astype("int32")}

    # Discriminator: replaced-token logits [B, S].
    sequence = reference_encoder(t, "electra", TINY, ids, segments, mask)
    expected = _dense(_gelu(_dense(sequence, t, "discriminator_predictions/dense")), t,
                      "discriminator_predictions/dense_1")[..., 0]
    ours = model.discriminator_head(model.discriminator(inputs, training=False)).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)

    # Generator: MLM logits [B, P, V] at P positions (tied output embeddings + bias).
    positions = np.array([[1, 4, 7], [0, 2, 8]])
    hidden = reference_encoder(t, "generator", GENERATOR, ids, segments, mask)
    hidden = np.take_along_axis(hidden, positions[..., None], axis=1)
    hidden = _layer_norm(_gelu(_dense(hidden, t, "generator_predictions/dense")), t,
                         "generator_predictions/LayerNorm")
    expected = (hidden @ t["electra/embeddings/word_embeddings"].T
                + t["generator_predictions/output_bias"])
    ours = model.generator_head(model.generator(inputs, training=False),
                                mask_positions=positions.astype("int32")).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ round trips
def test_tf1_round_trip_is_exact(original, weights, tmp_path):
    prefix = convert.save_tf1(weights, str(tmp_path / "out"), original["vocab"].path)
    assert sorted(n for n, _ in tf.train.list_variables(prefix)) == sorted(original["tensors"])
    again = convert.read_tf1(str(tmp_path / "out"))  # the directory: its latest checkpoint
    assert again.spec == weights.spec and again.ignored == ()
    assert_same_tensors(again.tensors, weights.tensors)


def test_hf_round_trip_is_exact_with_hf_names(original, weights, tmp_path):
    out = str(tmp_path / "hf")
    convert.save_hf(weights, out, original["vocab"].path)
    t = original["tensors"]

    disc = safetensors_np.load_file(os.path.join(out, "discriminator", "model.safetensors"))
    assert len(disc) == 5 + 16 * TINY.num_layers + 4
    np.testing.assert_array_equal(disc["electra.encoder.layer.1.attention.self.query.weight"],
                                  t["electra/encoder/layer_1/attention/self/query/kernel"].T)
    np.testing.assert_array_equal(disc["electra.encoder.layer.0.output.LayerNorm.bias"],
                                  t["electra/encoder/layer_0/output/LayerNorm/beta"])
    assert disc["discriminator_predictions.dense_prediction.weight"].shape == (1, 64)
    gen = safetensors_np.load_file(os.path.join(out, "generator", "model.safetensors"))
    assert len(gen) == 5 + 2 + 16 * GENERATOR.num_layers + 5
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

    again = convert.read_hf(out)
    assert again.spec == weights.spec and again.ignored == ()
    assert_same_tensors(again.tensors, weights.tensors)

    alone = convert.read_hf(os.path.join(out, "discriminator"))  # one ElectraForPreTraining
    assert alone.spec.generator is None
    assert_same_tensors(alone.tensors, {k: v for k, v in weights.tensors.items()
                                        if k.startswith(("electra/", "discriminator_"))})


def _load_config(size):
    spec = importlib.util.spec_from_file_location(
        "electra_config", os.path.join(ROOT, "configs", "electra.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(size)


def test_electra_tf_workdir_round_trip_is_exact(original, weights, tmp_path):
    out = str(tmp_path / "run")
    path = convert.save_electra_tf(weights, out, _load_config("tiny").to_dict(),
                                   original["vocab"].path)
    assert path == os.path.join(out, "checkpoints", "ckpt-0")
    keys = [k for k, _ in tf.train.list_variables(path)]
    assert "step/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert not [k for k in keys if k.startswith("optimizer")]
    assert tf.train.load_checkpoint(path).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == 0
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["model"]["size"] == "tiny"
    assert config["model"]["generator_hidden_fraction"] == 0.5
    assert (config["model"]["generator_hidden_size"], config["model"]["tie"]) == (
        32, "embeddings")  # the resolved shape, explicit
    again = convert.read_electra_tf(out)
    assert again.spec == weights.spec
    assert_same_tensors(again.tensors, weights.tensors)

    # The converted run exports for TF Serving like a trained one.
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    exported = export.export_run(out, str(tmp_path / "models" / "1"), max_seq_length=8)
    loaded = tf.saved_model.load(exported)
    probability = loaded.signatures["serving_default"](text=tf.constant(["a b"]))
    assert probability["replaced_probability"].shape == (1, 8)


@pytest.mark.slow  # trains; the conversion itself has fast round-trip tests
def test_converted_workdir_resumes_pretraining(original, weights, tmp_path):
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    out = str(tmp_path / "run")
    convert.save_electra_tf(weights, out, _load_config("tiny").to_dict(),
                            original["vocab"].path)
    config = _load_config("tiny")
    config.data.train_files = helpers.make_data(str(tmp_path), original["vocab"])
    config.data.vocab_file = os.path.join(out, "vocab.txt")
    config.data.max_seq_length = 32
    # One step: its learning rate is 0 (warm-up starts at 0), so ckpt-1 must hold exactly
    # the converted weights, restored into the trainer by the resume path.
    config.train.steps = 1
    config.train.batch_size = 4
    config.runtime.strategy = "one_device"
    loop.train_and_evaluate(config, out)
    assert tf.train.latest_checkpoint(os.path.join(out, "checkpoints")).endswith("ckpt-1")
    assert_same_tensors(convert.read_electra_tf(out).tensors, weights.tensors)


# ------------------------------------------------------------------ keras-hub
def test_keras_hub_preset_matches_ours_but_for_tanh_gelu(weights, model, tmp_path):
    out = str(tmp_path / "preset")
    convert.save_keras_hub(weights, out)
    backbone = keras_hub.models.ElectraBackbone.from_preset(out)
    rng = np.random.default_rng(2)
    ids = rng.integers(5, weights.spec.vocab_size, (2, 16)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 11:] = 0
    inputs = {"token_ids": ids, "segment_ids": (np.arange(16) >= 8).astype("int32")[None]
              .repeat(2, 0), "padding_mask": mask}
    ours = model.discriminator(inputs, training=False).numpy()
    outputs = backbone(inputs)
    # keras-hub's blocks use tanh-approximate gelu (ours, the original's and HF's: erf).
    # |gelu_tanh(x) - gelu(x)| <= 4.7e-4 for every x; through the FFN and two
    # LayerNorms (outputs of unit scale) this checkpoint's outputs differ by at most
    # 7.2e-4 (measured): 2e-3 leaves room and would still catch a misplaced tensor.
    real = mask.astype(bool)
    np.testing.assert_allclose(outputs["sequence_output"].numpy()[real], ours[real],
                               atol=2e-3, rtol=0)
    np.testing.assert_array_equal(outputs["pooled_output"], 0.0)  # ELECTRA has no pooler
    for block in backbone.transformer_layers:  # with exact gelu, the same model
        block._feedforward_intermediate_dense.activation = keras.activations.gelu
    np.testing.assert_allclose(backbone(inputs)["sequence_output"].numpy()[real], ours[real],
                               atol=1e-6, rtol=0)


# ------------------------------------------------------------------ errors
def _rewrite_tf1(original, directory, change):
    tensors = dict(original["tensors"])
    change(tensors)
    variables = {name: tf.Variable(value) for name, value in tensors.items()}
    tf.compat.v1.train.Saver(var_list=variables).save(None, os.path.join(directory,
                                                                         "model.ckpt"))
    return directory


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("electra/encoder/layer_1/output/dense/bias"),
     r"model.ckpt: no tensor electra/encoder/layer_1/output/dense/bias$"),
    (lambda t: t.update({"generator/encoder/layer_0/attention/self/key/kernel":
                         np.zeros((32, 16), "float32")}),
     r"model.ckpt: generator/encoder/layer_0/attention/self/key/kernel has shape \[32, 16\], "
     r"expected \[32, 32\]"),
])
def test_tf1_missing_or_misshapen_tensor_is_named(original, tmp_path, change, message):
    directory = _rewrite_tf1(original, str(tmp_path), change)
    with pytest.raises(convert.ConversionError, match=message):
        convert.read_tf1(directory)


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
    convert.save_hf(weights, out)
    path = os.path.join(out, "discriminator", "model.safetensors")
    arrays = safetensors_np.load_file(path)
    if value is None:
        del arrays[key]
    else:
        arrays[key] = value
    safetensors_np.save_file(arrays, path, metadata={"format": "pt"})
    with pytest.raises(convert.ConversionError, match=message):
        convert.read_hf(out)


def test_outputs_are_checked(original, weights, tmp_path):
    with pytest.raises(convert.ConversionError, match="exists and is not empty"):
        convert.save_hf(weights, original["dir"])
    other = helpers.write_vocab(str(tmp_path), words=["only", "three", "words"])
    with pytest.raises(convert.ConversionError, match=r"vocab.txt: 12 tokens, but the "
                       r"checkpoint's embeddings have 32 rows"):
        convert.save_hf(weights, str(tmp_path / "hf"), other.path)
    assert not os.path.exists(tmp_path / "hf") and not os.path.exists(tmp_path / "hf.tmp")


# ------------------------------------------------------------------ the tool
def _tool(*args):
    return helpers.run_tool("convert_checkpoint.py", *args, timeout=300)


def test_tool_converts_and_refuses_in_one_line(original, tmp_path):
    # tf1 → our workdir → HF, by the command line; the HF weights are the original's.
    result = _tool("--from=tf1", "--to=electra_tf", f"--input={original['dir']}",
                   f"--output={tmp_path}/run")
    assert result.returncode == 0, result.stderr
    assert "read 80 tensors (169,025 parameters, discriminator and generator)" in result.stdout
    assert "ignored 3 tensors the model does not have" in result.stdout
    assert (f"python -m electra_tf.train --config=configs/electra.py:tiny "
            f"--workdir={tmp_path}/run --config.data.vocab_file={tmp_path}/run/vocab.txt"
            ) in result.stdout
    result = _tool("--from=electra_tf", "--to=hf", f"--input={tmp_path}/run",
                   f"--output={tmp_path}/hf")
    assert result.returncode == 0, result.stderr
    assert os.path.exists(tmp_path / "hf" / "generator" / "vocab.txt")  # the run's vocab
    assert_same_tensors(convert.read_hf(str(tmp_path / "hf")).tensors, original["tensors"])

    result = _tool("--from=tf1", "--to=keras_hub", f"--input={original['dir']}",
                   f"--output={tmp_path}/preset", "--num_heads=3")
    assert result.returncode == 2, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {original['prefix']}: discriminator.hidden_size (64) is not a multiple of "
        "discriminator.num_heads (3)"]
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "preset")


# ------------------------------------------------------------------ any shape
@pytest.fixture(scope="module", params=sorted(SHAPES) + ["alone"])
def shaped(request, tmp_path_factory):
    """(name, original, weights) for each of SHAPES, and "alone": the custom
    discriminator without a generator (what HF hub discriminators are)."""
    name = request.param
    shape = SHAPES["custom"] if name == "alone" else SHAPES[name]
    original = write_original(tmp_path_factory.mktemp(name), shape, generator=name != "alone",
                              junk=())
    # The custom shape's 3 heads are in no tensor: said, as the tool's --num_heads does.
    heads = 3 if shape.discriminator == CUSTOM else None
    return name, original, convert.read_tf1(original["dir"], num_heads=heads)


def test_any_shape_reads_and_round_trips_exactly(shaped, tmp_path):
    name, original, weights = shaped
    vocab = original["vocab"]
    if name == "alone":
        expected = convert.ModelSpec(vocab.size, sizes.ModelShape(
            CUSTOM, convert.fresh_generator(CUSTOM), 128), has_generator=False)
    else:
        expected = convert.ModelSpec(vocab.size, SHAPES[name])
    assert weights.spec == expected
    assert_same_tensors(weights.tensors, original["tensors"])

    prefix = convert.save_tf1(weights, str(tmp_path / "tf1"), vocab.path)
    again = convert.read_tf1(prefix, num_heads=expected.discriminator.num_heads)
    assert again.spec == expected
    assert_same_tensors(again.tensors, original["tensors"])

    convert.save_hf(weights, str(tmp_path / "hf"), vocab.path)
    disc = json.load(open(tmp_path / "hf" / "discriminator" / "config.json"))
    assert (disc["max_position_embeddings"], disc["num_attention_heads"]) == (
        expected.shape.max_positions, expected.discriminator.num_heads)
    assert os.path.exists(tmp_path / "hf" / "generator") == expected.has_generator
    again = convert.read_hf(str(tmp_path / "hf"))  # the sharing read off the tensors
    assert again.spec == expected and again.ignored == ()
    assert_same_tensors(again.tensors, original["tensors"])

    convert.save_electra_tf(weights, str(tmp_path / "run"), _load_config("small").to_dict(),
                            vocab.path)
    config = json.load(open(tmp_path / "run" / "config.json"))
    assert config["data"]["max_seq_length"] <= expected.shape.max_positions
    again = convert.read_electra_tf(str(tmp_path / "run"))
    assert again.spec == expected
    assert_same_tensors(again.tensors, original["tensors"])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_any_shape_computes_the_original(name, tmp_path):
    shape = SHAPES[name]
    original = write_original(tmp_path, shape, junk=())
    weights = convert.read_tf1(original["dir"],
                               num_heads=shape.discriminator.num_heads)
    model = convert.build_pretrainer(weights.spec)
    convert.load_into(convert.pretrainer_slots(model), weights)
    t = original["tensors"]
    rng = np.random.default_rng(1)
    ids = rng.integers(5, original["vocab"].size, (2, 12))
    segments = (np.arange(12) >= 6).astype("int64")[None].repeat(2, 0)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    inputs = {"token_ids": ids.astype("int32"), "segment_ids": segments.astype("int32"),
              "padding_mask": mask.astype("int32")}
    sequence = reference_encoder(t, "electra", shape.discriminator, ids, segments, mask)
    expected = _dense(_gelu(_dense(sequence, t, "discriminator_predictions/dense")), t,
                      "discriminator_predictions/dense_1")[..., 0]
    ours = model.discriminator_head(model.discriminator(inputs, training=False)).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)

    scope = "electra" if shape.tie == "all" else "generator"
    embeddings = "generator/embeddings" if shape.tie == "none" else "electra/embeddings"
    positions = np.array([[1, 4, 7], [0, 2, 8]])
    hidden = reference_encoder(t, scope, shape.generator, ids, segments, mask, embeddings)
    hidden = np.take_along_axis(hidden, positions[..., None], axis=1)
    hidden = _layer_norm(_gelu(_dense(hidden, t, "generator_predictions/dense")), t,
                         "generator_predictions/LayerNorm")
    expected = (hidden @ t[f"{embeddings}/word_embeddings"].T
                + t["generator_predictions/output_bias"])
    ours = model.generator_head(model.generator(inputs, training=False),
                                mask_positions=positions.astype("int32")).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow  # a minute: export, then a training step (compiles)
def test_a_discriminator_alone_exports_and_pretrains_with_a_fresh_generator(tmp_path,
                                                                           caplog):
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    original = write_original(tmp_path / "tf1", SHAPES["custom"], generator=False, junk=())
    weights = convert.read_tf1(original["dir"], num_heads=3)
    out = str(tmp_path / "run")
    convert.save_electra_tf(weights, out, _load_config("small").to_dict(),
                            original["vocab"].path)
    exported = export.export_run(out, str(tmp_path / "models" / "1"), max_seq_length=8)
    loaded = tf.saved_model.load(exported)
    assert loaded.signatures["serving_default"](text=tf.constant(["a b"]))[
        "replaced_probability"].shape == (1, 8)

    config = _load_config("small")
    config.model.update({k: v for k, v in json.load(open(os.path.join(out, "config.json")))
                         ["model"].items()})
    config.data.train_files = helpers.make_data(str(tmp_path), original["vocab"])
    config.data.vocab_file = os.path.join(out, "vocab.txt")
    config.data.max_seq_length = 32
    config.train.update(steps=1, batch_size=4, warmup_steps=1, log_every=1)
    config.runtime.strategy = "one_device"
    with caplog.at_level("WARNING"):
        loop.train_and_evaluate(config, out)
    assert any("generator starts from fresh weights" in r.getMessage() for r in caplog.records)
    # Once pre-trained, the workdir holds a real generator: it converts with it.
    assert convert.read_electra_tf(out).spec.has_generator
    assert not convert.read_electra_tf(os.path.join(out, "checkpoints", "ckpt-0")
                                       ).spec.has_generator  # but ckpt-0's is still fresh

    # And it fine-tunes (the discriminator only), as a pre-trained run does.
    from electra_tf.finetuning import loop as finetuning  # pylint: disable=g-import-not-at-top
    from tests.finetuning import test_finetune  # pylint: disable=g-import-not-at-top
    (tmp_path / "glue").mkdir()
    task = test_finetune._toy_data(tmp_path / "glue", "sst2", 32, 16)  # pylint: disable=protected-access
    config = test_finetune._config("sst2", out, str(task), epochs=1)  # pylint: disable=protected-access
    best = finetuning.finetune(config, str(tmp_path / "sst2"))
    assert 0 <= best["validation"]["accuracy"] <= 1


def test_a_leftover_temporary_output_does_not_stop_a_conversion(tmp_path):
    """A failed run's OUTPUT.tmp (a file or a directory) is replaced, not an error."""
    from electra_tf.serving import convert  # pylint: disable=g-import-not-at-top
    for leftover in ("file", "directory"):
        output = tmp_path / leftover
        tmp = tmp_path / f"{leftover}.tmp"
        if leftover == "file":
            tmp.write_text("half")
        else:
            tmp.mkdir()
            (tmp / "part").write_text("half")
        with convert._new_directory(str(output)) as directory:
            (tmp_path / directory / "config.json").write_text("{}")
        assert os.listdir(output) == ["config.json"] and not tmp.exists()
