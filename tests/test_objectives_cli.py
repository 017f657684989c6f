"""Every objective from the command line: trains, logs its own metrics, resumes exactly
after a stop (all_tokens_mlm: as replace_mlm does); one objective per serving head
exports the encoder and serves (a SIGKILL's resume: test_reliability.py). Weight sharings
and whole-word masking ride along on some cases.
(tests/model/test_objectives.py: each objective's forward, loss, metrics and FLOPs;
tests/data/test_masking.py: whole-word selection itself, eagerly and inside tf.data.)"""

import json
import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf import convert
from electra_tf import errors
from electra_tf import model_config
from electra_tf.data import pipeline
from electra_tf.serving import export
from electra_tf.text import tokenizer
from electra_tf.training import checkpointing
from tests import helpers
from tests import test_reliability as reliability
from tests import test_train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = ("--config.train.checkpoint_every=10", "--config.train.steps_per_loop=5",
       "--config.train.log_every=10", "--config.train.eval_every=20",
       "--config.train.eval_steps=2")
# The metric each objective adds to TensorBoard (besides loss).
OWN_METRIC = {"mlm": "masked_lm_accuracy", "electra_15": "disc_auc",
              "replace_mlm": "lm_accuracy", "all_tokens_mlm": "lm_loss",
              "electric": "cloze_accuracy"}
# case: (objective, overrides); options ride along: tie=gdes (electra with its
# embeddings), tie=none (electra_15: the generator's own embeddings), whole-word masking
# (replace_mlm: it trains, resumes and exports as a run without it does).
CASES = {**{name: (name, ()) for name in OWN_METRIC},
         "electra_15": ("electra_15", ("--config.model.tie=none",)),
         "electra_gdes": ("electra", ("--config.model.tie=gdes",)),
         "replace_mlm": ("replace_mlm", ("--config.data.whole_word_masking=true",))}
# The cases exported and served: one per head that serves its own way (`Objective.serve`);
# electra_15 serves as electra does, all_tokens_mlm as replace_mlm.
SERVED = ("electra_gdes", "electric", "mlm", "replace_mlm")
# all_tokens_mlm's state and draws are replace_mlm's (only its targets differ): it trains
# and logs, and replace_mlm's case resumes.
NOT_RESUMED = ("all_tokens_mlm",)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The shared training data, but "happy" is two tokens, "hap ##py": words of
    several pieces for whole-word masking."""
    words = [w for w in helpers.WORDS if w != "happy"] + ["hap", "##py"]
    return helpers.write_training_data(tmp_path_factory.mktemp("data"), words)


def _command(data, workdir, objective, *overrides, steps=20):
    return helpers.train_command(data, workdir, *RUN, f"--config.model.objective={objective}",
                                 *overrides, steps=steps)


def _run(command):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow  # six cases, five with two training processes, four with an export
@pytest.mark.parametrize("case", sorted(CASES))
def test_objective_trains_resumes_exactly_exports_and_serves(case, data, tmp_path):
    objective, overrides = CASES[case]
    whole, halves = str(tmp_path / "whole"), str(tmp_path / "halves")
    _run(_command(data, whole, objective, *overrides))
    if case not in NOT_RESUMED:
        helpers.rewind(whole, halves, 10)  # as if stopped after its checkpoint at step 10
        assert "Resumed from" in _run(_command(data, halves, objective, *overrides)).stderr
        reliability._assert_same_checkpoint(  # pylint: disable=protected-access
            tf.train.latest_checkpoint(os.path.join(halves, "checkpoints")),
            tf.train.latest_checkpoint(os.path.join(whole, "checkpoints")))

    saved = json.load(open(os.path.join(whole, "config.json")))["model"]
    assert saved["objective"] == objective
    if case == "electra_15":  # tie none: the generator has embeddings of its own
        assert (saved["tie"], saved["generator_embedding_size"]) == ("none", 32)
    if case == "replace_mlm":  # the flag reached config.json and the masking it builds
        _assert_masks_whole_words(whole, data)
    for logs in ("train", "eval"):
        metric = test_train._scalars(  # pylint: disable=protected-access
            os.path.join(whole, "logs", logs), OWN_METRIC.get(objective, "disc_auc"))
        assert metric and all(np.isfinite(v) for _, v in metric), (logs, metric)
    reader = tf.train.load_checkpoint(os.path.join(whole, "checkpoints", "ckpt-20"))
    has_generator = any(n.startswith("model/generator")
                        for n in reader.get_variable_to_shape_map())
    assert has_generator == (objective != "mlm")
    if case not in SERVED:
        return

    export_dir = str(tmp_path / "models" / "1")
    _run([sys.executable, "tools/export_savedmodel.py", f"--workdir={whole}",
          f"--output={export_dir}"])
    requests = {
        "text": ("serving_default", {"text": np.array(["the cat sat on the mat ."], object)}),
        "encode": ("encode", {"text": np.array(["the cat sat ."], object)})}
    if objective == "electric":  # a text's score in one pass
        requests["score"] = ("score", {"text": np.array(["the cat sat .", "sat . the cat"],
                                                        object)})
    served = helpers.session_run(export_dir, requests, str(tmp_path / "served"))
    assert served["encode"]["sequence_output"].shape == (1, 32, 64)
    if objective == "electra":
        assert served["text"]["replaced_probability"].shape == (1, 32)
    elif objective == "electric":  # energies, and the score
        assert served["text"]["energies"].shape == (1, 32)
        assert served["score"]["score"].shape == (2,)
        assert served["score"]["score"][0] != served["score"]["score"][1]
    else:  # an MLM head: the token it predicts at each position
        assert served["text"]["predicted_tokens"].shape == (1, 32)
        assert served["text"]["predicted_tokens"][0, 1] != b""


def _assert_masks_whole_words(workdir, data):
    """The run's config.json builds whole-word masking: its batches mask "##py"."""
    config = ml_collections.ConfigDict(json.load(open(os.path.join(workdir, "config.json"))))
    vocab = tokenizer.Vocab.load(data["vocab"])
    masking_config = pipeline.masking_config(config, vocab)
    assert masking_config.whole_word_masking
    assert [vocab.tokens[i] for i in masking_config.continuation_ids] == [
        "##py", "##s", "##ed"]
    batch = next(iter(pipeline.pretraining_dataset(
        pipeline.config_files(config, "train_files", vocab), 16, 32, masking_config, seed=0)))
    ids, chosen = batch["input_ids"].numpy(), batch["masked_lm_ids"].numpy()
    assert vocab.id("##py") in ids and vocab.id("##py") in chosen


def test_resuming_with_another_objective_is_refused(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    config = electra_configs.get_config("tiny")
    config.data.vocab_file = vocab.path
    with open(tmp_path / "config.json", "w") as f:
        json.dump(config.to_dict(), f)
    config.model.objective = "mlm"
    with pytest.raises(errors.UserError, match=(
            r"config.model.objective='mlm', but the run in .* was started with 'electra'")):
        checkpointing.check_same_run(config, str(tmp_path), tokenizer.Vocab.load(vocab.path))
    config.model.objective = "electra"
    checkpointing.check_same_run(ml_collections.ConfigDict(config), str(tmp_path),
                                 tokenizer.Vocab.load(vocab.path))


TWO_STAGE = ("--config.train.algorithm=two_stage", "--config.train.two_stage_generator_steps=8",
             "--config.model.generator_hidden_fraction=1.0", "--config.model.tie=none")


def _weights(workdir, checkpoint, part):
    """{variable path: value} of the model's `part` (an attribute) at `checkpoint`."""
    _, _, model, _ = export.load_run(workdir, checkpoint)
    return {v.path: v.numpy() for v in getattr(model, part).weights}


@pytest.mark.slow  # two training processes
def test_two_stage_freezes_the_generator_and_resumes_exactly_across_the_switch(data,
                                                                               tmp_path):
    whole = str(tmp_path / "whole")
    command = (*TWO_STAGE, "--config.data.eval_files=", "--config.train.checkpoint_every=5",
               "--config.train.keep_checkpoints=4")
    _run(_command(data, whole, "electra", *command))
    checkpoints = os.path.join(whole, "checkpoints")
    at_10, at_20 = (os.path.join(checkpoints, f"ckpt-{n}") for n in (10, 20))
    # After the switch (step 8) the generator is frozen; the discriminator trains.
    for part in ("generator", "generator_head"):
        g10, g20 = (_weights(whole, p, part) for p in (at_10, at_20))
        for name, value in g10.items():
            np.testing.assert_array_equal(value, g20[name], err_msg=name)
    d10, d20 = (_weights(whole, p, "discriminator") for p in (at_10, at_20))
    assert all(not np.array_equal(d10[n], d20[n]) for n in d10 if "kernel" in n)
    assert tf.train.load_checkpoint(at_20).get_tensor(
        "switch_step/.ATTRIBUTES/VARIABLE_VALUE") == 8

    # Stopped at step 5 (the generator's stage), the same command resumes across the
    # switch. (Not a 5-step run resumed to 20: another train.steps is another schedule.)
    halves = helpers.rewind(whole, str(tmp_path / "halves"), 5)
    result = _run(_command(data, halves, "electra", *command))
    assert "Resumed from" in result.stderr and "two_stage: step 8" in result.stderr
    reliability._assert_same_checkpoint(  # pylint: disable=protected-access
        tf.train.latest_checkpoint(os.path.join(halves, "checkpoints")), at_20)
    # Killed after the switch, the same command resumes the discriminator's stage:
    # test_reliability.py's SIGKILL test.


def test_conversion_takes_electra_runs_only(tmp_path):
    """An MLM objective's run has no replaced-token head for ELECTRA's layouts."""
    vocab = helpers.write_vocab(str(tmp_path))
    config = electra_configs.get_config("tiny")
    config.model.objective = "mlm"
    config.data.max_seq_length = 16
    model = model_config.pretrainer(model_config.resolve(config), vocab.size)
    checkpoint = tf.train.Checkpoint(step=tf.Variable(1, dtype=tf.int64),
                                     model=model.build_for(16, 3))
    checkpoint.save(str(tmp_path / "checkpoints" / "ckpt"))
    with open(tmp_path / "config.json", "w") as f:
        json.dump(model_config.resolve(config).to_dict(), f)
    with pytest.raises(errors.UserError, match=r"config.model.objective='mlm' has no "
                       "replaced-token head"):
        convert.workdir.ElectraTF().read(str(tmp_path))
