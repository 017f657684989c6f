"""An ELECTRIC run converts its discriminator alone (no format holds the two-tower
generator): to our workdir and back, and to Hugging Face and back, exactly; in
`transformers` the RTD head's logits are ELECTRIC's energies."""

import json

import numpy as np
import pytest

from configs import electra as electra_configs
from electra_tf import convert
from tests import helpers


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("electric")
    run = str(root / "run")
    vocab, model = helpers.write_pretrained_run(run, objective="electric")
    weights = convert.read("electra_tf", run)
    convert.write("hf", weights, str(root / "hf"), vocab.path)
    return {"root": root, "vocab": vocab, "model": model, "weights": weights}


def test_an_electric_runs_discriminator_converts_alone_and_exactly(converted):
    weights, root = converted["weights"], converted["root"]
    assert not weights.spec.has_generator
    assert not [name for name in weights.tensors if name.startswith("generator")]
    np.testing.assert_array_equal(weights.tensors["discriminator_predictions/dense_1/kernel"],
                                  converted["model"].discriminator_head.logits.kernel.numpy())
    out = str(root / "workdir")
    convert.write("electra_tf", weights, out, converted["vocab"].path,
                  config=electra_configs.get_config("tiny").to_dict())
    assert json.load(open(root / "workdir" / "converted.json"))["generator"] == "fresh"
    for again in (convert.read("electra_tf", out),
                  convert.read("hf", str(root / "hf" / "discriminator"))):
        assert sorted(again.tensors) == sorted(weights.tensors)
        for name, tensor in weights.tensors.items():
            np.testing.assert_array_equal(again.tensors[name], tensor, err_msg=name)


def test_transformers_logits_are_the_energies(converted):
    torch = pytest.importorskip("torch", reason="pip install -r requirements-test.txt")
    transformers = pytest.importorskip("transformers",
                                       reason="pip install -r requirements-test.txt")
    hf = transformers.ElectraForPreTraining.from_pretrained(
        str(converted["root"] / "hf" / "discriminator")).eval()
    ids = np.array([[2, 7, 9, 11, 3, 0, 0, 0], [2, 12, 8, 3, 14, 15, 3, 0]], "int64")
    mask = (ids > 0).astype("int64")
    segments = np.array([[0] * 8, [0, 0, 0, 0, 1, 1, 1, 0]], "int64")
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                    token_type_ids=torch.tensor(segments)).logits.numpy()
    model = converted["model"]
    sequence = model.discriminator({"token_ids": ids, "segment_ids": segments,
                                    "padding_mask": mask}, training=False)
    energies = model.discriminator_head(sequence).numpy()
    np.testing.assert_allclose(logits * mask, energies * mask, atol=1e-4)
