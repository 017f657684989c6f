"""Any model shape, end to end from the command line: a shape no preset has, and one
encoder for both models (tie all), trains, resumes exactly, exports, serves in TF Serving's
loader (tests/test_model_config.py: the resolution). Elsewhere: tie none trains and
resumes with electra_15 (tests/test_objectives_cli.py) and two_stage, and exports in
tests/training/test_generator_init.py; the custom shape fine-tunes from a workdir's
config.json in tests/convert/test_workdir.py."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers

ROOT = os.path.dirname(os.path.abspath(__file__ + "/.."))
# The example: hidden 96, 3 layers, 3 heads, FFN 384, embeddings 48, 128 positions.
CUSTOM = ("--config.model.hidden_size=96", "--config.model.num_layers=3",
          "--config.model.num_heads=3", "--config.model.intermediate_size=384",
          "--config.model.embedding_size=48", "--config.model.max_position_embeddings=128")
SHAPES = {
    "custom": CUSTOM,
    "tie_all": ("--config.model.tie=all",),
}
RUN = ("--config.data.eval_files=", "--config.train.checkpoint_every=10",
       "--config.train.steps_per_loop=5", "--config.train.log_every=10")


def _run(command, **kwargs):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            **kwargs)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _train(data, workdir, shape, steps):
    return _run(helpers.train_command(data, workdir, *RUN, *SHAPES[shape], steps=steps))


def _weights(workdir):
    path = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(path)
            if name.startswith("model/")}


@pytest.mark.slow  # two shapes × two training processes, an export each
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_shape_trains_resumes_exactly_exports_and_serves(shape, data, tmp_path):
    whole = str(tmp_path / "whole")
    _train(data, whole, shape, steps=20)
    halves = helpers.rewind(whole, str(tmp_path / "halves"), 10)  # stopped at step 10
    result = _train(data, halves, shape, steps=20)  # the same command, later: resumes
    assert "Resumed from" in result.stderr
    a, b = _weights(whole), _weights(halves)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)

    saved = json.load(open(os.path.join(whole, "config.json")))["model"]
    if shape == "custom":  # the resolved shape, explicit in config.json
        assert (saved["hidden_size"], saved["num_heads"], saved["embedding_size"],
                saved["max_position_embeddings"], saved["generator_hidden_size"]) == (
                    96, 3, 48, 128, 48)
    else:  # tie all: one encoder, no generator/ weights of its own
        assert saved["tie"] == "all" and saved["generator_hidden_size"] == 64
        assert not [n for n in a if n.startswith("model/generator/")]

    export_dir = str(tmp_path / "models" / "1")
    _run([sys.executable, "tools/export_savedmodel.py", f"--workdir={whole}",
          f"--output={export_dir}"])
    served = helpers.session_run(export_dir, {"text": (
        "serving_default", {"text": np.array(["the cat sat on the mat ."], dtype=object)})},
        str(tmp_path / "served"))["text"]
    assert served["replaced_probability"].shape == (1, 32)
    assert 0 < served["replaced_probability"][0, 1] < 1

