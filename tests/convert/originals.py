"""The original ELECTRA's checkpoints for the conversion tests: their layout written out
from google-research/electra, random weights in it saved by TF1's Saver, where each
tensor must land in our model, and the original's equations in float64 NumPy."""

import importlib.util
import math
import os
import re

import numpy as np
import tensorflow as tf

from electra_tf.model import sizes
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

    def add_dense(name, n_in, n_out):
        layout[f"{name}/kernel"], layout[f"{name}/bias"] = (n_in, n_out), (n_out,)

    def add_layer_norm(name, n):
        layout[f"{name}/gamma"], layout[f"{name}/beta"] = (n,), (n,)

    encoders = [("electra", shape.discriminator, e)]
    if generator and shape.tie == "none":
        embeddings("generator", shape.generator.embedding_size)
    if generator and shape.tie != "all":
        encoders.append(("generator", shape.generator, shape.generator.embedding_size))
    for scope, size, width in encoders:
        h, f = size.hidden_size, size.intermediate_size
        if h != width:
            add_dense(f"{scope}/embeddings_project", width, h)
        for i in range(size.num_layers):
            p = f"{scope}/encoder/layer_{i}"
            for name in ("query", "key", "value"):
                add_dense(f"{p}/attention/self/{name}", h, h)
            add_dense(f"{p}/attention/output/dense", h, h)
            add_layer_norm(f"{p}/attention/output/LayerNorm", h)
            add_dense(f"{p}/intermediate/dense", h, f)
            add_dense(f"{p}/output/dense", f, h)
            add_layer_norm(f"{p}/output/LayerNorm", h)
    h = shape.discriminator.hidden_size
    add_dense("discriminator_predictions/dense", h, h)
    add_dense("discriminator_predictions/dense_1", h, 1)
    if generator:
        e_gen = shape.generator.embedding_size
        add_dense("generator_predictions/dense", shape.generator.hidden_size, e_gen)
        add_layer_norm("generator_predictions/LayerNorm", e_gen)
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



def write_converted(directory) -> dict:
    """`write_original`'s tiny checkpoint (generator included) in DIRECTORY/tf1, converted
    to a workdir of ours in DIRECTORY/run as tools/convert_checkpoint.py --to=electra_tf
    writes it: `write_original`'s dict and "run", the workdir."""
    from electra_tf.convert import tf1  # pylint: disable=g-import-not-at-top
    from electra_tf.convert import workdir  # pylint: disable=g-import-not-at-top
    original = write_original(os.path.join(str(directory), "tf1"))
    run = os.path.join(str(directory), "run")
    workdir.ElectraTF().write(tf1.TF1().read(original["dir"]), run, original["vocab"].path,
                              config=load_config("tiny").to_dict())
    return {**original, "run": run}


def assert_same_tensors(a: dict, b: dict):
    """The same names, float32 arrays equal bit for bit."""
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype == np.float32, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# The original's equations, in float64 NumPy.
_ERF = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))


def layer_norm(x, t, name):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-12) * t[f"{name}/gamma"] + t[f"{name}/beta"]


def dense(x, t, name):
    return x @ t[f"{name}/kernel"] + t[f"{name}/bias"]


def reference_encoder(t, scope, size, ids, segments, mask, e="electra/embeddings"):
    """The original's BertModel in float64 NumPy: sequence output [B, S, H]."""
    t = {k: v.astype("float64") for k, v in t.items()}
    x = (t[f"{e}/word_embeddings"][ids] + t[f"{e}/token_type_embeddings"][segments]
         + t[f"{e}/position_embeddings"][:ids.shape[1]])
    x = layer_norm(x, t, f"{e}/LayerNorm")
    if f"{scope}/embeddings_project/kernel" in t:
        x = dense(x, t, f"{scope}/embeddings_project")
    batch, length, hidden = x.shape
    head = hidden // size.num_heads
    adder = (1.0 - mask[:, None, None, :]) * -10000.0          # [B, 1, 1, S]

    def heads(v):                                               # [B, S, H] → [B, n, S, d]
        return v.reshape(batch, length, size.num_heads, head).transpose(0, 2, 1, 3)

    for i in range(size.num_layers):
        p = f"{scope}/encoder/layer_{i}"
        q, k, v = (heads(dense(x, t, f"{p}/attention/self/{n}"))
                   for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        a = layer_norm(dense(context, t, f"{p}/attention/output/dense") + x, t,
                       f"{p}/attention/output/LayerNorm")
        x = layer_norm(dense(gelu(dense(a, t, f"{p}/intermediate/dense")), t,
                             f"{p}/output/dense") + a, t, f"{p}/output/LayerNorm")
    return x


def load_config(size):
    """configs/electra.py:SIZE, as `--config` reads it."""
    spec = importlib.util.spec_from_file_location(
        "electra_config", os.path.join(ROOT, "configs", "electra.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(size)
