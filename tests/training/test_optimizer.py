"""The optimizer: schedule, weight-decay exclusions, choice of optimizer, loss scaling."""

import importlib.util
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import errors
from electra_tf.model import pretrainer
from electra_tf.model import sizes
from electra_tf.training import optimizer as optimizer_lib

CONFIG_PATH = pathlib.Path(__file__).resolve().parents[2] / "configs" / "electra.py"


def load_config(size="tiny"):
    spec = importlib.util.spec_from_file_location("electra_config", CONFIG_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(size)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    tiny = sizes.SIZES["tiny"]
    return pretrainer.ElectraPretrainer(30, sizes.ModelShape(
        tiny, sizes.generator_size(tiny, 0.5), max_positions=16)).build_for(8, 2)


def test_warmup_linear_decay_values():
    schedule = optimizer_lib.WarmupLinearDecay(peak=2e-3, warmup_steps=10, total_steps=110)
    steps = [0, 1, 5, 9, 10, 11, 60, 109, 110, 500]
    expected = [2e-3 * s / 10 if s < 10 else 2e-3 * max(0.0, 1 - s / 110) for s in steps]
    got = [float(schedule(tf.constant(s))) for s in steps]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-12)
    assert got[0] == 0.0 and got[-1] == 0.0
    assert max(got) <= 2e-3
    # No warm-up: the peak at step 0.
    no_warmup = optimizer_lib.WarmupLinearDecay(peak=1.0, warmup_steps=0, total_steps=4)
    assert [float(no_warmup(s)) for s in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    # Serializable.
    again = optimizer_lib.WarmupLinearDecay(**schedule.get_config())
    assert float(again(tf.constant(42))) == float(schedule(tf.constant(42)))


def is_no_decay(variable):
    """LayerNorm gamma/beta (the only gammas/betas here) and every bias by name."""
    return variable.name in ("gamma", "beta") or variable.name.endswith("bias")


def test_no_decay_variables_are_layer_norms_and_biases(model):
    no_decay = {id(v) for v in optimizer_lib.no_decay_variables(model)}
    trainable = model.trainable_weights
    gammas = [v for v in trainable if v.name == "gamma"]
    # Embeddings LN + MLM-head LN + two per block in each of the 2 + 2 blocks.
    assert len(gammas) == 2 + 2 * 2 + 2 * 2
    for v in trainable:
        assert (id(v) in no_decay) == is_no_decay(v), v.path
    # The MLM head's output bias is a bias too.
    assert id(model.generator_head._bias) in no_decay  # pylint: disable=protected-access
    assert sum(v.name.endswith("bias") for v in trainable) > 20
    kernels = [v for v in trainable if v.name in ("kernel", "embeddings")]
    assert len(kernels) > 20
    assert id(model.embeddings.token_embedding.embeddings) not in no_decay
    assert id(model.embeddings.position_embedding.position_embeddings) not in no_decay


def test_create_optimizer_excludes_and_decays(model):
    config = load_config("tiny")
    config.train.warmup_steps = 0
    optimizer = optimizer_lib.create_optimizer(config.train, model)
    assert isinstance(optimizer, optimizer_lib.AdamW)
    assert optimizer.global_clipnorm == config.train.clip_norm
    for v in model.trainable_weights:
        assert optimizer._use_weight_decay(v) != is_no_decay(v), v.path  # pylint: disable=protected-access
    # A step with zero gradients only applies the decoupled decay, to kernels only.
    kernel = model.discriminator_head.dense.kernel
    bias = model.discriminator_head.dense.bias
    gamma = model.embeddings.layer_norm.gamma
    bias.assign(tf.ones_like(bias))
    before = {name: v.numpy().copy() for name, v in
              (("kernel", kernel), ("bias", bias), ("gamma", gamma))}
    variables = [kernel, bias, gamma]
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in variables])
    factor = 1 - config.train.learning_rate * config.train.weight_decay
    np.testing.assert_allclose(kernel.numpy(), before["kernel"] * factor, rtol=1e-6)
    np.testing.assert_array_equal(bias.numpy(), before["bias"])
    np.testing.assert_array_equal(gamma.numpy(), before["gamma"])


def test_lamb_and_unknown_optimizer(model):
    config = load_config("tiny")
    config.train.optimizer = "lamb"
    optimizer = optimizer_lib.create_optimizer(config.train, model)
    assert isinstance(optimizer, keras.optimizers.Lamb)
    assert isinstance(optimizer, optimizer_lib.Lamb)
    assert float(optimizer.weight_decay) == pytest.approx(config.train.weight_decay)
    config.train.optimizer = "sgd"
    with pytest.raises(errors.UserError, match="sgd"):
        optimizer_lib.create_optimizer(config.train, model)


def test_gradients_are_not_summed_again(model):
    config = load_config("tiny")
    optimizer = optimizer_lib.create_optimizer(config.train, model)
    grads_and_vars = [(tf.ones([2]), tf.Variable([0.0, 0.0]))]
    assert optimizer._all_reduce_sum_gradients(grads_and_vars) == grads_and_vars  # pylint: disable=protected-access


def test_mixed_float16_gets_loss_scaling(model):
    config = load_config("tiny")
    optimizer = optimizer_lib.create_optimizer(config.train, model,
                                               dtype_policy="mixed_float16")
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(optimizer.inner_optimizer, optimizer_lib.AdamW)
    assert not isinstance(optimizer_lib.create_optimizer(config.train, model),
                          keras.optimizers.LossScaleOptimizer)
