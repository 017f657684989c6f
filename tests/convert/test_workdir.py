"""Our own runs (`convert.workdir`): an exact round trip; a converted workdir exports,
resumes pre-training, and a discriminator alone pre-trains with a fresh generator."""

import json
import os

import pytest
import tensorflow as tf

from electra_tf.convert import tf1
from electra_tf.convert import workdir
from tests import helpers
from tests.convert import originals


def test_electra_tf_workdir_round_trip_is_exact(original, weights, tmp_path):
    out = str(tmp_path / "run")
    path = workdir.ElectraTF().write(weights, out, original["vocab"].path,
                                     config=originals.load_config("tiny").to_dict())
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
    again = workdir.ElectraTF().read(out)
    assert again.spec == weights.spec
    originals.assert_same_tensors(again.tensors, weights.tensors)

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
    workdir.ElectraTF().write(weights, out, original["vocab"].path,
                              config=originals.load_config("tiny").to_dict())
    config = originals.load_config("tiny")
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
    originals.assert_same_tensors(workdir.ElectraTF().read(out).tensors, weights.tensors)


@pytest.mark.slow  # a minute: export, then a training step (compiles)
def test_a_discriminator_alone_exports_and_pretrains_with_a_fresh_generator(tmp_path,
                                                                           caplog):
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    original = originals.write_original(tmp_path / "tf1", originals.SHAPES["custom"],
                                        generator=False, junk=())
    weights = tf1.TF1().read(original["dir"], num_heads=3)
    out = str(tmp_path / "run")
    workdir.ElectraTF().write(weights, out, original["vocab"].path,
                              config=originals.load_config("small").to_dict())
    exported = export.export_run(out, str(tmp_path / "models" / "1"), max_seq_length=8)
    loaded = tf.saved_model.load(exported)
    assert loaded.signatures["serving_default"](text=tf.constant(["a b"]))[
        "replaced_probability"].shape == (1, 8)

    config = originals.load_config("small")
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
    assert workdir.ElectraTF().read(out).spec.has_generator
    assert not workdir.ElectraTF().read(os.path.join(out, "checkpoints", "ckpt-0")
                                        ).spec.has_generator  # but ckpt-0's is still fresh

    # And it fine-tunes (the discriminator only), as a pre-trained run does.
    from electra_tf.finetuning import loop as finetuning  # pylint: disable=g-import-not-at-top
    from tests.finetuning import test_finetune  # pylint: disable=g-import-not-at-top
    (tmp_path / "glue").mkdir()
    task = test_finetune._toy_data(tmp_path / "glue", "sst2", 32, 16)  # pylint: disable=protected-access
    config = test_finetune._config("sst2", out, str(task), epochs=1)  # pylint: disable=protected-access
    best = finetuning.finetune(config, str(tmp_path / "sst2"))
    assert 0 <= best["validation"]["accuracy"] <= 1, best  # it trained and evaluated
