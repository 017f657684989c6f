"""An ELECTRIC run converts its discriminator alone (no format holds the two-tower
generator): to our workdir and back, and to Hugging Face and back, exactly."""

import json

import numpy as np

from configs import electra as electra_configs
from electra_tf import convert
from tests import helpers


def test_an_electric_runs_discriminator_converts_alone_and_exactly(tmp_path):
    run = str(tmp_path / "electric")
    vocab, model = helpers.write_pretrained_run(run, objective="electric")
    weights = convert.read("electra_tf", run)
    assert not weights.spec.has_generator
    assert not [name for name in weights.tensors if name.startswith("generator")]
    head = model.discriminator_head.logits.kernel.numpy()
    np.testing.assert_array_equal(weights.tensors["discriminator_predictions/dense_1/kernel"],
                                  head)

    out = str(tmp_path / "workdir")
    convert.write("electra_tf", weights, out, vocab.path,
                  config=electra_configs.get_config("tiny").to_dict())
    assert json.load(open(tmp_path / "workdir" / "converted.json"))["generator"] == "fresh"
    hf_dir = str(tmp_path / "hf")
    convert.write("hf", weights, hf_dir, vocab.path)
    for again in (convert.read("electra_tf", out),
                  convert.read("hf", str(tmp_path / "hf" / "discriminator"))):
        assert sorted(again.tensors) == sorted(weights.tensors)
        for name, tensor in weights.tensors.items():
            np.testing.assert_array_equal(again.tensors[name], tensor, err_msg=name)
