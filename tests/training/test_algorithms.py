"""The training algorithms' stages, variables, switch and errors (end to end: two-stage in
tests/test_objectives_cli.py, adversarial in test_adversarial.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import context
from electra_tf.training import algorithms
from electra_tf.training import distribute
from electra_tf.training import loop
from electra_tf.training import optimizer as optimizer_lib
from electra_tf.training import trainer as trainer_lib
from electra_tf.training.algorithms import base
from tests.training import test_trainer


def two_stage_config(**model):
    config = electra_configs.get_config("tiny")
    config.train.algorithm = "two_stage"
    config.train.two_stage_generator_steps = 3
    config.model.generator_hidden_fraction = 1.0
    config.model.tie = "none"  # the generator, frozen in stage 2, has its own embeddings
    config.model.update(model)
    return config


def test_joint_trains_every_variable_by_the_objectives_loss():
    config = electra_configs.get_config("tiny")
    joint = algorithms.get(config)
    model = model_config.pretrainer(config, 30).build_for(8, 2)
    assert joint.stage(0) == joint.stage(10**9) == "joint"
    assert joint.variables(model, "joint") == model.trainable_variables
    loss, values = tf.constant(3.0), {"mlm_loss": tf.constant(1.0)}
    assert joint.loss(None, loss, values, "joint", {}, {}, 4.0) == (loss, values)
    assert joint.checkpoint_items() == {} and joint.layers() == []


def test_every_algorithm_subclasses_the_base_and_joint_is_its_defaults():
    """One pattern for every member: a `base.Algorithm` subclass by its name, made from
    the run's config; joint overrides no hook (the base's defaults are joint's)."""
    for name, member in algorithms.ALGORITHMS.items():
        assert issubclass(member, base.Algorithm) and member.name == name
    hooks = {k for k, v in vars(base.Algorithm).items() if callable(v)} - {"__init__"}
    assert not hooks & set(vars(algorithms.joint.Joint))
    assert isinstance(algorithms.ALGORITHMS.create("joint", None), algorithms.joint.Joint)


@pytest.mark.parametrize("name", ["two_stage", "adversarial"])
def test_a_member_with_settings_made_without_the_config_says_so(name):
    with pytest.raises(ValueError, match=rf"^config.train.algorithm='{name}' needs the "
                                         r"run's config$"):
        algorithms.ALGORITHMS.create(name)


def test_two_stage_trains_one_model_at_a_time_and_switches_by_copying():
    config = two_stage_config()
    two_stage = algorithms.get(config)
    model = model_config.pretrainer(config, 30).build_for(8, 2)
    assert [two_stage.stage(s) for s in (0, 2, 3, 50)] == [
        "generator", "generator", "discriminator", "discriminator"]
    assert two_stage.next_boundary(1) == 3 and two_stage.next_boundary(3) == float("inf")
    generator = {id(v) for v in two_stage.variables(model, "generator")}
    discriminator = {id(v) for v in two_stage.variables(model, "discriminator")}
    assert not generator & discriminator
    assert {id(v) for v in model.generator_head.trainable_weights} <= generator
    assert {id(v) for v in model.discriminator_head.trainable_weights} <= discriminator
    values = {"mlm_loss": tf.constant(2.0), "rtd_loss": tf.constant(0.5)}
    objective = model.objective
    def loss(stage):
        return float(two_stage.loss(objective, None, values, stage, {}, {}, 4.0)[0])
    assert loss("generator") == 2.0 and loss("discriminator") == 25.0

    two_stage.begin(model, 2)  # not the switch: nothing happens
    kernels = [(d, g) for d, g in zip(model.discriminator.weights, model.generator.weights)
               if "kernel" in d.path]
    assert all(not np.array_equal(d.numpy(), g.numpy()) for d, g in kernels)
    two_stage.begin(model, 3)
    for d, g in zip(model.discriminator.weights, model.generator.weights):
        np.testing.assert_array_equal(d.numpy(), g.numpy())


def test_two_stage_runs_stage_2s_generator_without_dropout():
    """The paper's stage 2 generator is frozen: a fixed language model, whose logits do
    not depend on the step's dropout masks; in stage 1 it trains with dropout. Set by
    `begin` wherever the run starts: before, at or after the switch."""
    config = two_stage_config()
    two_stage = algorithms.get(config)
    model = model_config.pretrainer(config, test_trainer.VOCAB).build_for(
        test_trainer.SEQ, test_trainer.P)
    batch = test_trainer._batch()

    def logits(seed):
        return model.generate(batch, context.StepContext(
            uniform=np.zeros((test_trainer.BATCH, test_trainer.P), "float32"), training=True,
            seed=tf.constant([seed, 0], tf.int64)))["mlm_logits"]

    for step, dropout in ((0, True), (3, False), (7, False), (1, True)):
        two_stage.begin(model, step)
        assert (not np.allclose(logits(1), logits(2))) == dropout, step


@pytest.mark.parametrize("algorithm", ["joint", "two_stage", "adversarial"])
def test_validating_an_algorithm_creates_no_variable(algorithm):
    """loop.validate builds the algorithm before the loop makes its strategy, and
    MultiWorkerMirroredStrategy must be made before TensorFlow's context starts ("Collective
    ops must be configured at program startup"): no variable until `build`, which the
    Trainer calls in the strategy's scope."""
    config = two_stage_config()
    config.train.algorithm = algorithm
    created = []

    def recording(next_creator, **kwargs):
        created.append(kwargs.get("name"))
        return next_creator(**kwargs)
    with tf.variable_creator_scope(recording):
        loop.validate(config)
        assert not created, created
        keras.layers.Dense(2).build((None, 3))  # the recorder sees Keras' variables
    assert {"kernel", "bias"} <= set(created)


def test_two_stage_switch_step_in_the_checkpoint_is_checked():
    two_stage = algorithms.get(two_stage_config())
    two_stage.check_restored("run")
    two_stage.switch_step.assign(5)  # what a checkpoint of another switch restores
    with pytest.raises(errors.UserError, match=r"two_stage_generator_steps=3, but the "
                       r"checkpoint in run switched at step 5"):
        two_stage.check_restored("run")


@pytest.mark.parametrize("change, message", [
    ({"objective": "mlm"}, r"config.model.objective='mlm': config.train.algorithm="),
    ({"tie": "all"}, r"config.model.tie='all': config.train.algorithm='two_stage' copies"),
    ({"tie": "embeddings"}, r"config.model.tie='embeddings': config.train.algorithm="
                            r"'two_stage' copies .* freezes it, .*; use tie=none"),
    ({"tie": "gdes"}, r"config.model.tie='gdes': config.train.algorithm='two_stage'"),
    ({"generator_num_layers": 1}, r"config.model.generator_num_layers=1 "
                                  r"\(config.model.num_layers=2\)"),
    ({"tie": "none", "generator_embedding_size": 16},
     r"generator_embedding_size=16 \(config.model.embedding_size=64\); e.g. set config."
     r"model.generator_hidden_fraction=1.0 and config.model.generator_embedding_size=64"),
])
def test_two_stage_errors_name_the_keys(change, message):
    with pytest.raises(errors.UserError, match=message):
        algorithms.get(two_stage_config(**change))


def test_bad_algorithm_or_switch_names_the_key():
    config = two_stage_config()
    config.train.two_stage_generator_steps = -1  # config_check's range, checked first
    with pytest.raises(errors.UserError, match=r"two_stage_generator_steps=-1: must be a "
                       r"whole number >= 0 \(0: half of train.steps\)"):
        loop.validate(config)
    config.train.algorithm = "alternating"
    with pytest.raises(errors.UserError, match=r"config.train.algorithm='alternating': "
                       "choose one of joint, two_stage, adversarial"):
        algorithms.get(config)


def test_two_stage_switches_at_half_the_run_by_default():
    config = two_stage_config()
    config.train.update(two_stage_generator_steps=0, steps=41)
    two_stage = algorithms.get(config)
    assert [two_stage.stage(s) for s in (19, 20)] == ["generator", "discriminator"]
    two_stage.switch_step.assign(30)  # a checkpoint of a run with another switch
    with pytest.raises(errors.UserError, match=(
            r"two_stage_generator_steps=0 switches at half of config.train.steps, step 20, "
            r"but the checkpoint in run switched at step 30: use another --workdir, or "
            r"config.train.two_stage_generator_steps=30 to resume")):
        two_stage.check_restored("run")


def test_two_stage_discriminator_starts_a_fresh_adam():
    # With one optimizer for both stages, the discriminator's first updates after the
    # switch had zero moments but bias correction at step N + 1: ~3x Adam's usual size.
    config = two_stage_config()
    config.train.update(steps=40, warmup_steps=2, weight_decay=0.0)
    model = model_config.pretrainer(config, 30).build_for(8, 2)
    run = optimizer_lib.create_optimizer(config.train, model)
    two_stage = algorithms.get(config)
    two_stage.build(config.train, model, "float32")
    assert two_stage.optimizer("generator", run) is run
    assert set(two_stage.checkpoint_items()) == {"switch_step", "discriminator_optimizer"}

    def update(stage):
        optimizer = two_stage.optimizer(stage, run)
        variables = two_stage.variables(model, stage)
        optimizer.apply_gradients([(tf.ones_like(v), v) for v in variables])

    for step in range(20):  # stage 1 runs past the switch step: a long first stage
        update("generator")
    head = model.discriminator_head.trainable_weights[0]
    schedule = optimizer_lib.WarmupLinearDecay(config.train.learning_rate, 2, 40 - 3)
    for k in range(4):  # the stage's own warm-up and update count, from 0
        before = head.numpy()
        update("discriminator")
        step_size = np.abs(head.numpy() - before).max()
        lr = float(schedule(k))
        assert step_size <= 1.05 * lr + 1e-12, (k, step_size, lr)
        assert step_size >= 0.9 * lr, (k, step_size, lr)
    assert int(run.iterations.numpy()) == 20
    assert int(two_stage.discriminator_optimizer.iterations.numpy()) == 4


@pytest.mark.parametrize("algorithm, step, accumulation_steps", [
    ("joint", 0, 1), ("two_stage", 0, 1), ("two_stage", 1, 1), ("adversarial", 0, 1),
    ("adversarial", 0, 2)])
def test_the_reported_loss_is_what_the_tape_differentiated(monkeypatch, algorithm, step,
                                                           accumulation_steps):
    """TensorBoard's and the log's `loss` is the scalar the step's tape differentiated
    (each micro-batch's share of it summed), in every algorithm and stage; the
    objective's total is `objective_loss`."""
    config = test_trainer._config(algorithm=algorithm, jit_compile=False, remat="none",
                                  two_stage_generator_steps=1,
                                  accumulation_steps=accumulation_steps)
    config.model.update(generator_hidden_fraction=1.0, tie="none")  # two_stage's needs
    strategy = distribute.get_strategy(config.runtime)
    trainer = trainer_lib.Trainer(config, strategy, test_trainer.VOCAB, test_trainer.P)
    data = tf.data.Dataset.from_tensors(
        {k: tf.constant(v) for k, v in test_trainer._batch().items()}).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(data))
    trainer.step.assign(step)
    trainer.start_loop(step)
    differentiated = []
    gradient = tf.GradientTape.gradient

    def recording(tape, target, sources, *args, **kwargs):
        differentiated.append(float(target))
        return gradient(tape, target, sources, *args, **kwargs)
    monkeypatch.setattr(tf.GradientTape, "gradient", recording)
    tf.config.run_functions_eagerly(True)  # the tape's target as a number
    try:
        trainer.train_loop(iterator, tf.constant(1))
    finally:
        tf.config.run_functions_eagerly(False)
    out = trainer.train_metrics.result()
    assert len(differentiated) == accumulation_steps
    assert out["loss"] == pytest.approx(sum(differentiated), rel=1e-5)
    objective = out["mlm_loss"] + 50.0 * out["rtd_loss"]
    assert out["objective_loss"] == pytest.approx(objective, rel=1e-5)
    expected = {"joint": objective,
                "two_stage": out["mlm_loss"] if step == 0 else 50.0 * out["rtd_loss"],
                "adversarial": out.get("policy_loss", 0.0) + out.get("baseline_loss", 0.0)
                + 50.0 * out["rtd_loss"]}[algorithm]
    assert out["loss"] == pytest.approx(expected, rel=1e-5)
    if algorithm != "joint":  # the reported loss is not the objective's total
        assert abs(out["loss"] - objective) > 1e-3 * objective
