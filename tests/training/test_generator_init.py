"""A generator you already have (training/generator_init.py), frozen or trained, and the
sampling temperature's schedule."""

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf import errors
from electra_tf import model_config
from electra_tf import workdir as workdir_lib
from electra_tf.model import flops
from electra_tf.model import objectives
from electra_tf.model import sampling
from electra_tf.model import sizes
from electra_tf.training import checkpointing
from electra_tf.training import generator_init
from tests import helpers
from tests import test_reliability as reliability
from tests import test_train
from tests.convert import originals
from tests.training import test_trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Fast-ELECTRA's setting: a converted generator, frozen, its softmax cooled from 3 to 1.
FROZEN_GENERATOR = ("--config.model.tie=none", "--config.train.generator=frozen",
                    "--config.model.temperature=3",
                    "--config.model.temperature_schedule=linear")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A tiny TF1 original (its generator 32 wide, sharing the 64-wide embeddings),
    converted to a workdir of ours."""
    return originals.write_converted(tmp_path_factory.mktemp("converted"))


def _config(**model):
    config = electra_configs.get_config("tiny")
    config.model.update(model)
    return config


@pytest.mark.parametrize("kind, expected", [
    ("constant", [3.0, 3.0, 3.0, 3.0]),
    ("linear", [3.0, 2.0, 1.0, 1.0]),
    ("cosine", [3.0, 2.0, 1.0, 1.0])])
def test_the_temperature_schedule(kind, expected):
    config = _config(temperature=3.0, temperature_schedule=kind)
    config.train.steps = 10  # temperature_steps=0: over the whole run
    schedule = model_config.temperature_schedule(config)
    np.testing.assert_allclose([float(schedule(s)) for s in (0, 5, 10, 20)], expected,
                               rtol=1e-6)
    config.model.temperature_steps = 4
    assert float(model_config.temperature_schedule(config)(tf.constant(4, tf.int64))) == (
        3.0 if kind == "constant" else 1.0)
    config.model.temperature_schedule = "exponential"
    with pytest.raises(errors.UserError, match=r"temperature_schedule='exponential': "
                       r"choose one of constant, linear, cosine"):
        model_config.temperature_schedule(config)


def test_the_model_samples_at_the_temperature_it_is_given():
    model = model_config.pretrainer(_config(), 30).build_for(8, 4)
    ids = np.random.default_rng(0).integers(5, 30, (64, 8)).astype(np.int32)
    positions = np.tile(np.arange(1, 5, dtype=np.int32), (64, 1))            # [64, 4]
    masked = ids.copy()
    masked[:, 1:5] = 4  # [MASK]
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids),
             "segment_ids": np.zeros_like(ids), "masked_input_ids": masked,
             "masked_lm_positions": positions, "masked_lm_ids": ids[:, 1:5],
             "masked_lm_weights": np.ones((64, 4), np.float32)}
    uniform = tf.random.stateless_uniform([64, 4], [0, 1])
    hot = helpers.forward(model, batch, uniform=uniform, temperature=tf.constant(1e4), training=False)
    np.testing.assert_array_equal(  # the model's draw is sampling.sample at that temperature
        hot["sampled_ids"], sampling.sample(hot["mlm_logits"], uniform, 1e4))
    # Near-uniform: nearly every token of the vocabulary is drawn, about equally often.
    counts = np.bincount(hot["sampled_ids"].numpy().ravel(), minlength=30)
    assert (counts > 0).sum() >= 28 and counts.max() < 4 * counts.mean()
    cold = helpers.forward(model, batch, uniform=uniform, temperature=tf.constant(1e-6), training=False)
    # Cold: the most likely token, wherever the runner-up is not within a few
    # temperatures of it (an untrained generator's logits lie ~1e-4 apart: at T = 1e-3
    # the runner-up is drawn too, e^(-0.1) as likely).
    logits = np.sort(cold["mlm_logits"].numpy(), -1)
    clear = logits[..., -1] - logits[..., -2] > 30 * 1e-6                   # [64, 4]
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(cold["sampled_ids"].numpy()[clear],
                                  tf.argmax(cold["mlm_logits"], -1).numpy()[clear])


def test_a_frozen_generator_does_not_move_and_has_no_optimizer_state():
    config = test_trainer._config()  # pylint: disable=protected-access
    config.model.update(tie="none", temperature=2.0, temperature_schedule="linear")
    config.train.generator = "frozen"
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    trainer = test_trainer.trainer_lib.Trainer(config, strategy, test_trainer.VOCAB,
                                               test_trainer.P)
    model = trainer.model
    generator = model.generator_variables()
    before = [v.numpy() for v in generator]
    discriminator = [v.numpy() for v in model.discriminator_variables()]
    frozen = {id(v) for v in generator}
    assert not frozen & {id(v) for v in model.trainable_variables}
    # Slots only for the trainable variables (two each, Adam's m and v).
    slots = [v for v in trainer.optimizer.variables if v.name.endswith(("momentum",
                                                                          "velocity"))]
    assert len(slots) == 2 * len(model.trainable_variables)
    assert not [v for v in slots if "generator" in v.name]

    data = tf.data.Dataset.from_tensors({k: tf.constant(v) for k, v in
                                         test_trainer._batch().items()}).repeat()  # pylint: disable=protected-access
    trainer.train_loop(iter(strategy.experimental_distribute_dataset(data)), tf.constant(3))
    for variable, value in zip(generator, before):
        np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.path)
    assert max(float(np.abs(v.numpy() - w).max()) for v, w in
               zip(model.discriminator_variables(), discriminator)) > 1e-3
    assert np.isfinite(trainer.train_metrics.result()["loss"])


def test_a_frozen_random_generator_is_said_in_the_log(data, tmp_path, monkeypatch):
    """config.train.generator=frozen without generator_init freezes a random generator:
    a uniform-generator ablation in effect, which the run's log says (and, through
    `generator_init.FROZEN_AT_RANDOM`, the comparison's results.json and table)."""
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    config = electra_configs.get_config("tiny")
    config.data.update(train_files=data["train"], eval_files="", vocab_file=data["vocab"],
                       max_seq_length=32)
    config.model.tie = "none"
    config.train.update(generator="frozen", batch_size=4, steps=1, jit_compile=False,
                        log_every=1, checkpoint_every=1)
    assert generator_init.frozen_at_random(config)
    warnings = []
    monkeypatch.setattr(loop.logging, "warning", lambda *args: warnings.append(args))
    # The data's casing (its manifest's: tests/serving/test_export.py) is kept with the
    # run, for an export where the data is not; as if the data were cased.
    cased = []
    monkeypatch.setattr(loop.pipeline, "lower_case_of_data",
                        lambda files: cased.append(files) or False)
    loop.train_and_evaluate(config, str(tmp_path / "run"))
    assert (generator_init.FROZEN_AT_RANDOM,) in warnings
    with open(tmp_path / "run" / "config.json", encoding="utf-8") as f:
        assert json.load(f)["lower_case"] is False and cased == [data["train"]]
    # The same command again: the run is at config.train.steps, which the log says.
    assert loop.train_and_evaluate(config, str(tmp_path / "run")) == {}
    assert any("nothing to train (raise config.train.steps" in args[0]
               and args[2:] == (1, 1) for args in warnings), warnings
    config.model.generator_init = "a run"
    assert not generator_init.frozen_at_random(config)
    config.train.generator = "train"
    del config.model["generator_init"]  # a config.json of an earlier version
    assert not generator_init.frozen_at_random(model_config.complete(config))


def test_a_frozen_generator_counts_its_forward_pass_only():
    shape = sizes.ModelShape(sizes.SIZES["small"], sizes.generator_size(sizes.SIZES["small"],
                                                                        0.25))
    generator = flops.generator_flops(shape.generator, 128, 19, 30522)
    for objective in ("electra", "replace_mlm"):
        trained = objectives.training_flops(shape, 128, 19, 30522, objective)
        frozen = objectives.training_flops(shape, 128, 19, 30522, objective, "frozen")
        assert trained - frozen == 2 * generator  # no backward pass (2 x forward)
    assert objectives.training_flops(shape, 128, 19, 30522, "mlm", "frozen") == (
        objectives.training_flops(shape, 128, 19, 30522, "mlm"))


def _loaded(config, vocab):
    config = generator_init.configure(config)
    model = model_config.pretrainer(config, vocab.size).build_for(8, 2)
    generator_init.load(model, config, vocab)
    return config, model


def test_generator_init_from_our_run_loads_its_generator_exactly(tmp_path):
    vocab, source = helpers.write_pretrained_run(str(tmp_path / "ours"))
    config = _config(tie="none", generator_init=str(tmp_path / "ours"))
    config, model = _loaded(config, vocab)
    # Its shape is the checkpoint's generator's (32 wide; 64-wide embeddings, its own now).
    assert model.shape.generator == source.shape.generator
    assert model.shape.generator.embedding_size == 64 and model.shape.tie == "none"
    for ours, theirs in zip(model.generator_variables(), source.generator_variables(),
                            strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)


def test_generator_init_from_a_converted_tf1_checkpoint_loads_it_exactly(converted):
    config = _config(tie="none", generator_init=converted["run"])
    config.train.generator = "frozen"
    _, model = _loaded(config, converted["vocab"])
    names = [name for name in converted["tensors"] if name.startswith("generator")]
    assert len(names) > 20
    for name in names:
        variable = originals.where_in_ours(model, name)
        np.testing.assert_array_equal(
            variable.numpy(), converted["tensors"][name].reshape(variable.shape), err_msg=name)
    # The generator's own table: the original's shared one.
    np.testing.assert_array_equal(
        model.generator.embeddings.token_embedding.embeddings.numpy(),
        converted["tensors"]["electra/embeddings/word_embeddings"])


@pytest.mark.parametrize("model, message", [
    ({"generator_hidden_size": 48}, r"^config.model.generator_hidden_size=48, but the "
     r"generator of .* has hidden_size=32: leave it 0 \(the checkpoint's\) or give 32$"),
    ({"embedding_size": 32}, r"its generator's embeddings are 64 wide and the "
     r"discriminator's 32 \(config.model.embedding_size\), so config.model.tie="
     r"'embeddings' cannot share them; use config.model.tie=none, or "
     r"config.model.embedding_size=64$"),
    ({"tie": "all"}, r"with config.model.tie='all': the generator would be the "),
    ({"max_position_embeddings": 256}, r"max_position_embeddings=256, but the generator "
     r"of .* has 512 positions: give 512$")])
def test_a_generator_that_does_not_fit_is_a_one_line_error(tmp_path, model, message):
    helpers.write_pretrained_run(str(tmp_path / "ours"))
    config = _config(generator_init=str(tmp_path / "ours"), **model)
    with pytest.raises(errors.UserError, match=message):
        generator_init.configure(config)


@pytest.mark.parametrize("model, train, message", [
    ({}, {"generator": "frozen"}, r"^config.train.generator='frozen' with config.model.tie="
     r"'embeddings': the discriminator would train what it shares with the generator; "
     r"use config.model.tie=none"),
    ({"tie": "none"}, {"generator": "frozen", "algorithm": "adversarial"},
     r"config.train.algorithm='adversarial' trains the generator; use algorithm joint"),
    ({"tie": "none", "objective": "mlm"}, {"generator": "frozen"},
     r"config.model.objective='mlm' has no generator"),
    ({}, {"generator": "fixed"}, r"config.train.generator='fixed': choose one of train, "
     r"frozen")])
def test_frozen_generator_errors_name_the_keys(model, train, message):
    config = _config(**model)
    config.train.update(train)
    with pytest.raises(errors.UserError, match=message):
        model_config.pretrainer(config, 30)


def test_a_run_resumed_with_another_generator_refuses(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    started = _config(tie="none", generator_init="/runs/a")
    started.train.generator = "frozen"
    workdir_lib.write_json(str(tmp_path), workdir_lib.CONFIG, started.to_dict())
    for change, message in ((("model", "generator_init", "/runs/b"),
                             r"^config.model.generator_init='/runs/b', but the run in .* "
                             r"was started with '/runs/a'"),
                            (("train", "generator", "train"),
                             r"^config.train.generator='train', but the run in .* was "
                             r"started with 'frozen'")):
        config = _config(tie="none", generator_init="/runs/a")
        config.train.generator = "frozen"
        section, key, value = change
        config[section][key] = value
        with pytest.raises(errors.UserError, match=message):
            checkpointing.check_same_run(config, str(tmp_path), vocab)


def test_frozen_converted_generator_trains_resumes_exactly_and_export_reads_it(
        data, converted, tmp_path):
    whole, resumed = str(tmp_path / "whole"), str(tmp_path / "resumed")
    command = helpers.train_command(
        data, whole, *FROZEN_GENERATOR, f"--config.model.generator_init="
        f"{converted['run']}", "--config.data.eval_files=", "--config.train.log_every=2",
        "--config.train.checkpoint_every=2", "--config.train.steps_per_loop=2", steps=4)
    env = helpers.child_env()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "The generator starts from the generator of" in result.stderr

    # The generator is the converted one, bit for bit, and has no optimizer slots.
    final = workdir_lib.latest_checkpoint(whole)
    reader = tf.train.load_checkpoint(final)
    source = tf.train.load_checkpoint(workdir_lib.latest_checkpoint(converted["run"]))
    generator = [k for k in source.get_variable_to_shape_map()
                 if k.startswith("model/generator") and k.endswith("VARIABLE_VALUE")]
    assert len(generator) > 20
    for key in generator:
        np.testing.assert_array_equal(reader.get_tensor(key), source.get_tensor(key), key)
    slots = [k for k in reader.get_variable_to_shape_map()
             if k.startswith("optimizer/") and "generator" in k]
    assert not slots
    # linear from 3 to 1 over the 4 steps: logged at the steps after each loop.
    assert test_train._scalars(os.path.join(whole, "logs", "train"),  # pylint: disable=protected-access
                               "temperature") == [(2, 2.0), (4, 1.0)]

    # A copy stopped after its step-2 checkpoint resumes to the uninterrupted weights.
    helpers.rewind(whole, resumed, 2)
    command = [c.replace(whole, resumed) for c in command]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=env)
    assert result.returncode == 0 and "Resumed from" in result.stderr, result.stderr[-3000:]
    reliability._assert_same_checkpoint(  # pylint: disable=protected-access
        workdir_lib.latest_checkpoint(resumed), final)

    # Export loads the run's own latest checkpoint (not generator_init's run): every
    # discriminator weight is one of its tensors. (The SavedModel itself: serving/.)
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    _, _, model, path = export.load_run(whole)
    assert path == final
    saved = [reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
             if key.endswith("VARIABLE_VALUE") and not key.startswith(
                 ("optimizer/_variables/", "model/generator"))]  # (the converted ones)
    weights = model.discriminator.weights
    assert len(weights) > 20
    for weight in weights:
        assert any(value.shape == tuple(weight.shape) and np.array_equal(value, weight.numpy())
                   for value in saved), weight.path
