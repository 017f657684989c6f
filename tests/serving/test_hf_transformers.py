"""Hugging Face `transformers` itself as the reference. An ELECTRA discriminator that
`transformers` builds here, of a shape no preset has (hidden 96, 3 layers, 3 heads, FFN
384, embeddings 48) and 128 positions, converted by the command line and exported, gives
HF's replaced-token probabilities in TF Serving's loader; converted back to HF, it loads
in `transformers` with a tokenizer that splits text as our SavedModel does.

torch (CPU) and transformers come from requirements-test.txt (README, "Run the tests").
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install -r requirements-test.txt")
transformers = pytest.importorskip("transformers",
                                   reason="pip install -r requirements-test.txt")

from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
from tests import helpers  # pylint: disable=g-import-not-at-top

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ = 128
TEXTS = ["the cat sat on the mat .", "The Big RED dog ran , then it sat",
         " ".join(helpers.WORDS * 8), ""]


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """A random ElectraForPreTraining saved by `save_pretrained` (safetensors), vocab.txt
    beside it. initializer_range 0.2, not 0.02: probabilities far from 0.5."""
    directory = tmp_path_factory.mktemp("hf")
    vocab = helpers.write_vocab(str(directory))
    torch.manual_seed(0)
    config = transformers.ElectraConfig(
        vocab_size=vocab.size, embedding_size=48, hidden_size=96, num_hidden_layers=3,
        num_attention_heads=3, intermediate_size=384, max_position_embeddings=SEQ,
        initializer_range=0.2)
    model = transformers.ElectraForPreTraining(config).eval()
    model.save_pretrained(str(directory))
    return {"dir": str(directory), "model": model, "vocab": vocab}


def hf_probabilities(model, ids, mask, segments):
    with torch.no_grad():
        logits = model(input_ids=torch.as_tensor(ids, dtype=torch.long),
                       attention_mask=torch.as_tensor(mask, dtype=torch.long),
                       token_type_ids=torch.as_tensor(segments, dtype=torch.long)).logits
    return torch.sigmoid(logits).numpy()


def _tool(*args):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools",
                                                          "convert_checkpoint.py"), *args],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def converted(hf, tmp_path_factory):
    """hf → our workdir (the command line) → SavedModel, and → HF again."""
    root = tmp_path_factory.mktemp("converted")
    out = _tool("--from=hf", "--to=electra_tf", f"--input={hf['dir']}",
                f"--output={root}/run")
    exported = export.export_run(str(root / "run"), str(root / "models" / "1"))
    _tool("--from=electra_tf", "--to=hf", f"--input={root}/run", f"--output={root}/hf")
    return {"stdout": out, "run": str(root / "run"), "exported": exported,
            "hf": str(root / "hf")}


@pytest.mark.slow  # the tool twice and an export: ~50 s shared
def test_the_conversion_says_what_it_read(converted):
    out = converted["stdout"]
    assert "discriminator alone" in out
    assert ("shape: discriminator: hidden 96, 3 layers, 3 heads, FFN 384, embeddings 48; "
            "generator: hidden 24, 3 layers, 1 heads, FFN 96, embeddings 48; 128 positions; "
            "tie=embeddings") in out
    assert "starts from fresh weights" in out
    assert "--config.model.hidden_size=96 --config.model.num_layers=3" in out
    config = json.load(open(os.path.join(converted["run"], "config.json")))
    assert (config["model"]["max_position_embeddings"], config["data"]["max_seq_length"]) == (
        SEQ, SEQ)


@pytest.mark.slow  # the tool twice and an export: ~50 s shared
def test_exported_model_gives_hf_probabilities_in_the_serving_loader(hf, converted,
                                                                    tmp_path):
    rng = np.random.default_rng(0)
    ids = rng.integers(5, hf["vocab"].size, (2, SEQ)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 70:] = 0                                   # padding
    segments = (np.arange(SEQ) >= 50).astype("int32")[None].repeat(2, 0)
    served = helpers.session_run(converted["exported"], {
        "text": ("serving_default", {"text": np.array(TEXTS, dtype=object)}),
        "ids": ("serving_ids", {"input_ids": ids, "input_mask": mask,
                                "segment_ids": segments})}, str(tmp_path))

    expected = hf_probabilities(hf["model"], ids, mask, segments)
    real = mask.astype(bool)
    ours = served["ids"]["replaced_probability"][real]
    np.testing.assert_allclose(ours, expected[real], atol=1e-4, rtol=0)
    np.testing.assert_allclose(ours, expected[real], rtol=1e-3)  # small ones too
    assert expected[real].max() > 10 * expected[real].min()  # tokens told apart

    # In-graph tokenization (every position of a 128-token text included).
    text = served["text"]
    assert text["input_mask"][2].sum() == SEQ
    expected = hf_probabilities(hf["model"], text["token_ids"], text["input_mask"],
                                np.zeros_like(text["token_ids"]))
    real = text["input_mask"].astype(bool)
    np.testing.assert_allclose(text["replaced_probability"][real], expected[real],
                               atol=1e-4, rtol=0)


@pytest.mark.slow  # the tool twice and an export: ~50 s shared
def test_hf_output_loads_in_transformers_with_our_tokenization(hf, converted, tmp_path):
    discriminator = os.path.join(converted["hf"], "discriminator")
    model = transformers.ElectraForPreTraining.from_pretrained(discriminator).eval()
    assert model.config.max_position_embeddings == SEQ
    for name, value in hf["model"].state_dict().items():  # the same weights, exactly
        np.testing.assert_array_equal(model.state_dict()[name].numpy(), value.numpy(),
                                      err_msg=name)
    assert not os.path.exists(os.path.join(converted["hf"], "generator"))  # never trained

    tokenizer = transformers.AutoTokenizer.from_pretrained(discriminator)
    served = helpers.session_run(converted["exported"], {
        "text": ("serving_default", {"text": np.array(TEXTS[:2], dtype=object)})},
        str(tmp_path))["text"]
    for i, text in enumerate(TEXTS[:2]):  # the upper-case one too: both lower-case
        ours = served["token_ids"][i][served["input_mask"][i] > 0].tolist()
        assert tokenizer(text)["input_ids"] == ours, text


@pytest.mark.parametrize("tie", ["embeddings", "none"])
def test_a_transformers_generator_pair_converts_with_its_sharing(tie, hf, tmp_path):
    """discriminator/ + generator/ as `transformers` builds them: the generator holding a
    copy of the discriminator's embeddings (tied) or its own, narrower ones (untied)."""
    from electra_tf import convert  # pylint: disable=g-import-not-at-top
    root = tmp_path / "pair"
    hf["model"].save_pretrained(str(root / "discriminator"))
    torch.manual_seed(1)
    config = transformers.ElectraConfig(
        vocab_size=hf["vocab"].size, embedding_size=48 if tie == "embeddings" else 24,
        hidden_size=48, num_hidden_layers=3, num_attention_heads=1, intermediate_size=192,
        max_position_embeddings=SEQ, initializer_range=0.2)
    generator = transformers.ElectraForMaskedLM(config).eval()
    if tie == "embeddings":  # what a tied pair's files hold: the same embedding tensors
        generator.electra.embeddings.load_state_dict(
            hf["model"].electra.embeddings.state_dict())
        generator.tie_weights()
    generator.save_pretrained(str(root / "generator"))

    weights = convert.hf.HuggingFace().read(str(root))
    assert weights.spec.tie == tie and weights.spec.has_generator
    assert weights.spec.generator.embedding_size == config.embedding_size
    model = convert.table.build_pretrainer(weights.spec)
    convert.table.load_into(convert.table.pretrainer_slots(model), weights)

    rng = np.random.default_rng(3)
    ids = rng.integers(5, hf["vocab"].size, (2, 40)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 30:] = 0
    segments = (np.arange(40) >= 20).astype("int32")[None].repeat(2, 0)
    positions = np.array([[1, 7, 33], [0, 12, 29]], "int32")
    with torch.no_grad():
        expected = generator(input_ids=torch.as_tensor(ids, dtype=torch.long),
                             attention_mask=torch.as_tensor(mask, dtype=torch.long),
                             token_type_ids=torch.as_tensor(segments, dtype=torch.long)
                             ).logits.numpy()
    expected = np.take_along_axis(expected, positions[..., None], axis=1)
    ours = model.generator_head(model.generator(
        {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}, training=False),
        mask_positions=positions).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)
