"""Every numeric config field, walked with 0, -1, a huge value and a string through the
check the binaries run: a one-line error naming the key, or a value a run accepts (then
the shape and the algorithm, read before anything is written, accept it too). A few go
through the binaries: exit 2, the workdir untouched."""

import copy
import os
import subprocess

import ml_collections
import pytest

from configs import electra
from configs import finetune
from electra_tf import config_check
from electra_tf import errors
from electra_tf import model_config
from electra_tf.training import algorithms
from electra_tf.training import optimizer
from tests import helpers

CONFIGS = {"electra:tiny": lambda: electra.get_config("tiny"),
           "electra:base": lambda: electra.get_config("base"),
           "finetune:mrpc": lambda: finetune.get_config("mrpc"),
           "finetune:squad2": lambda: finetune.get_config("squad2"),
           "finetune:conll2003": lambda: finetune.get_config("conll2003")}

# Written from the configs' comments, not from config_check's table: the keys where 0
# is a meaningful value (none, off, the default), and the one that may be negative.
ZERO_ALLOWED = {
    "data.mask_token_rate", "data.random_token_rate", "model.hidden_size",
    "model.num_layers", "model.num_heads", "model.intermediate_size",
    "model.embedding_size", "model.generator_hidden_size", "model.generator_num_layers",
    "model.generator_num_heads", "model.generator_intermediate_size",
    "model.generator_embedding_size", "model.temperature_steps", "model.disc_weight",
    "model.dropout", "model.attention_dropout",
    "train.warmup_steps", "train.weight_decay", "train.adam_beta1", "train.adam_beta2",
    "train.clip_norm", "train.eval_predictions", "train.profile_steps",
    "train.two_stage_generator_steps", "train.adversarial_mlm_weight", "train.seed",
    "runtime.cpu_devices",
    "model.answerable_weight", "model.null_threshold", "train.warmup_proportion"}
# Fine-tuning: 0 takes the pre-trained model's rates; evaluations every epoch.
ZERO_ALLOWED_FINETUNING = {"train.learning_rate", "train.layerwise_lr_decay",
                           "train.eval_every", "data.stride"}  # (tagging: half a window)
NEGATIVE_ALLOWED = {"model.null_threshold"}  # a logit threshold
# Shares and probabilities: a huge value is out of range.
BOUNDED = {"data.mask_prob", "data.mask_token_rate", "data.random_token_rate",
           "model.generator_hidden_fraction", "model.generator_layer_fraction",
           "model.dropout", "model.attention_dropout", "train.adam_beta1", "train.adam_beta2",
           "train.layerwise_lr_decay", "train.warmup_proportion"}


def _cases():
    for name, make in CONFIGS.items():
        for key in config_check.numeric_keys(make()):
            for value in ("zero", "minus_one", "huge", "string"):
                yield name, key, value


def _value(kind, original):
    whole = isinstance(original, int)
    return {"zero": 0 if whole else 0.0, "minus_one": -1 if whole else -1.0,
            "huge": 10**12 if whole else 1e12, "string": "abc"}[kind]


def _refused(name, key, kind, whole) -> bool:
    if kind == "string":
        return True
    if kind == "zero":
        return key not in ZERO_ALLOWED and not (
            name.startswith("finetune") and key in ZERO_ALLOWED_FINETUNING)
    if kind == "minus_one":
        return key not in NEGATIVE_ALLOWED
    return whole or key in BOUNDED  # huge: whole numbers stop at int32


@pytest.mark.parametrize("name, key, kind", list(_cases()))
def test_every_numeric_key(name, key, kind):
    config = CONFIGS[name]()
    section, field = key.split(".")
    original = config[section][field]
    # A plain copy: a string must reach the check (a ConfigDict refuses it at assignment,
    # as `--config.KEY=abc` is refused when the flags are parsed).
    values = copy.deepcopy(config.to_dict())
    values[section][field] = _value(kind, original)
    if _refused(name, key, kind, isinstance(original, int)):
        with pytest.raises(errors.UserError) as e:
            config_check.check(values)
        message = str(e.value)
        assert message.startswith(f"config.{key}=") and "\n" not in message, message
        assert "must be" in message
    else:
        config_check.check(values)
        if name.startswith("electra"):  # what a run reads next, before writing, accepts it
            resolved = ml_collections.ConfigDict(values)
            model_config.resolve(resolved)
            algorithms.get(resolved)


def test_every_numeric_key_has_a_range():
    for name, make in CONFIGS.items():
        config = make()
        missing = [k for k in config_check.numeric_keys(config)
                   if k not in config_check.ranges_for(config)]
        assert not missing, f"{name}: no range for {missing}"


def test_masking_shares_add_up():
    config = electra.get_config("tiny")
    config.data.mask_token_rate, config.data.random_token_rate = 0.9, 0.2
    with pytest.raises(errors.UserError, match="mask_token_rate=0.9 and .*at most 1"):
        config_check.check(config)


def test_a_config_that_masks_no_position_is_refused():
    """0.05 of 16 tokens is int(0.88) = 0 positions: the masking could not be built (a
    ValueError deep in the run before); 0.1 of 16 is one."""
    config = electra.get_config("tiny")
    config.data.max_seq_length, config.data.mask_prob = 16, 0.05
    with pytest.raises(errors.UserError) as info:
        config_check.check(config)
    assert str(info.value) == (
        "config.data.mask_prob=0.05 of config.data.max_seq_length=16 masks no position "
        "(int((mask_prob + 0.005) * max_seq_length) = 0): raise either")
    config.data.mask_prob = 0.1
    config_check.check(config)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("config_check")
    vocab = helpers.write_vocab(str(root))
    return {"train": helpers.make_data(str(root), vocab, max_seq_length=32), "eval": "",
            "vocab": vocab.path}


@pytest.mark.parametrize("override, message, where", [
    ("--config.train.steps=-5", "config.train.steps=-5: must be a whole number >= 1", "new"),
    ("--config.train.learning_rate=-0.001",
     "config.train.learning_rate=-0.001: must be a number > 0", "existing"),
    ("--config.train.checkpoint_every=0",
     "config.train.checkpoint_every=0: must be a whole number >= 1", "existing"),
    ("--config.train.batch_size=abc", "--config.train.batch_size", "new"),
])
def test_the_binary_exits_2_with_the_workdir_untouched(data, tmp_path, override, message,
                                                      where):
    run = tmp_path / where
    if where == "existing":
        run.mkdir()
        (run / "notes.txt").write_text("mine")
    result = subprocess.run(helpers.train_command(data, str(run), override, steps=2),
                            cwd=helpers.ROOT, capture_output=True, text=True, timeout=300,
                            env=helpers.child_env())
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last, last
    assert "Traceback" not in result.stderr
    if where == "new":
        assert not run.exists()
    else:
        assert os.listdir(run) == ["notes.txt"]


def test_finetune_binary_exits_2_before_writing(tmp_path):
    run = tmp_path / "run"
    result = subprocess.run(
        helpers.finetune_command("mrpc", run, "/nonexistent", "", "--config.train.epochs=-1"),
        cwd=helpers.ROOT, capture_output=True, text=True, timeout=300,
        env=helpers.child_env())
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: config.train.epochs=-1.0: must be a number > 0")
    assert not run.exists()


def test_the_train_binary_answers_a_bad_config_before_tensorflow_loads(data, tmp_path):
    """Ranges, choices and the shape need no TensorFlow (`model_config.checked`): the
    answer comes in a fraction of a second, not after TF's seconds of start-up."""
    run = tmp_path / "run"
    result = subprocess.run(
        helpers.train_command(data, str(run), "--config.train.optimizer=sgd", steps=2),
        cwd=helpers.ROOT, capture_output=True, text=True, timeout=300,
        env=helpers.child_env(PYTHONPROFILEIMPORTTIME="1"))
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == "error: config.train.optimizer='sgd': choose one of adamw, lamb"
    imported = [line.rsplit("|", 1)[-1].strip() for line in lines
                if line.startswith("import time:")]
    # Every process that started (the binary restarts itself once for huge pages, with
    # the environment) listed its imports, the one that answered included.
    assert imported.count("site") == imported.count("electra_tf.model_config") >= 1
    assert not {"tensorflow", "keras"} & set(imported)
    assert not run.exists()


def test_the_choices_are_those_the_modules_act_on():
    # The one list kept beside its code (the others are CHOICES' own).
    assert tuple(optimizer.OPTIMIZERS) == config_check.CHOICES["train.optimizer"]
    for key, choices in config_check.CHOICES.items():
        config = electra.get_config("tiny")
        section, name = key.split(".")
        assert config[section][name] in choices, key  # the default is a choice
        config[section][name] = "nonesuch"
        with pytest.raises(errors.UserError, match=rf"^config.{key}='nonesuch': choose "
                                                   rf"one of {', '.join(choices)}$"):
            model_config.checked(config)
