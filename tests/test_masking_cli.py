"""Whole-word masking from the command line: trains and resumes exactly.
(tests/data/test_masking.py: the selection itself, eagerly and inside tf.data.) Its
checkpoint holds what a joint run's does, and the export reads no masking setting.
Trained runs are exported in tests/training (a frozen generator's through the tool,
adversarial's) and, in the slow suite, a joint run's (test_url_paths, test_objectives_cli)."""

import json
import os
import subprocess

import ml_collections
import pytest

from electra_tf import workdir as workdir_lib
from electra_tf.data import pipeline
from electra_tf.text import tokenizer
from tests import helpers
from tests import test_reliability as reliability

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The shared training data, but "happy" is two tokens, "hap ##py": words of
    several pieces to mask whole."""
    words = [w for w in helpers.WORDS if w != "happy"] + ["hap", "##py"]
    return helpers.write_training_data(tmp_path_factory.mktemp("data"), words)


def _run(command):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=helpers.child_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _train(data, workdir):
    """Four steps with whole-word masking, a checkpoint every two."""
    return _run(helpers.train_command(
        data, workdir, "--config.data.whole_word_masking=true", "--config.data.eval_files=",
        "--config.train.checkpoint_every=2", "--config.train.steps_per_loop=2",
        "--config.train.log_every=2", steps=4))


def test_whole_word_masking_trains_and_resumes_exactly(data, tmp_path):
    whole, resumed = str(tmp_path / "whole"), str(tmp_path / "resumed")
    _train(data, whole)

    # The run masked whole words: the flag reached config.json and the masking it builds.
    config = ml_collections.ConfigDict(json.load(open(os.path.join(whole, "config.json"))))
    vocab = tokenizer.Vocab.load(data["vocab"])
    masking_config = pipeline.masking_config(config, vocab)
    assert masking_config.whole_word_masking
    assert [vocab.tokens[i] for i in masking_config.continuation_ids] == [
        "##py", "##s", "##ed"]
    batch = next(iter(pipeline.pretraining_dataset(
        pipeline.config_files(config, "train_files", vocab), 16, 32, masking_config, seed=0)))
    ids, chosen = batch["input_ids"].numpy(), batch["masked_lm_ids"].numpy()
    assert vocab.id("##py") in ids and vocab.id("##py") in chosen

    # A copy stopped after its step-2 checkpoint resumes to the uninterrupted weights.
    assert "Resumed from" in _train(data, helpers.rewind(whole, resumed, 2)).stderr
    reliability._assert_same_checkpoint(  # pylint: disable=protected-access
        workdir_lib.latest_checkpoint(resumed), workdir_lib.latest_checkpoint(whole))
