"""The optimizer: schedule, weight-decay exclusions, choice of optimizer, loss scaling."""

import importlib.util
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import errors
from electra_tf.model import pretrainer
from electra_tf.model import sizes
from electra_tf.training import optimizer as optimizer_lib
from tests import helpers

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIG_PATH = REPO / "configs" / "electra.py"


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
    """The original's: polynomial decay (power 1) times min(1, step / warm-up)."""
    schedule = optimizer_lib.WarmupLinearDecay(peak=2e-3, warmup_steps=10, total_steps=110)
    steps = [0, 1, 5, 9, 10, 11, 60, 109, 110, 500]
    expected = [2e-3 * max(0.0, 1 - s / 110) * min(1.0, s / 10) for s in steps]
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


def _adamw_pair():
    """Our AdamW and Keras' on two identical sets of variables (one excluded from decay),
    with the same schedule, decay, betas and clipping."""
    schedule = optimizer_lib.WarmupLinearDecay(peak=1e-2, warmup_steps=2, total_steps=10)
    kwargs = dict(learning_rate=schedule, weight_decay=0.01, beta_1=0.9, beta_2=0.999,
                  epsilon=1e-6, global_clipnorm=1.0)
    rng = np.random.default_rng(0)
    values = [rng.normal(size=s).astype(np.float32) for s in ([4, 3], [3], [5, 2, 2])]
    pairs = []
    for optimizer in (optimizer_lib.AdamW(**kwargs), keras.optimizers.AdamW(**kwargs)):
        variables = [keras.Variable(v, name=n) for v, n in zip(values, ("kernel", "bias", "w"))]
        optimizer.exclude_from_weight_decay(var_list=[variables[1]])
        optimizer.build(variables)
        pairs.append((optimizer, variables))
    return pairs, rng


@pytest.mark.parametrize("compiled", [False, True])
def test_fused_adamw_matches_keras_adamw(compiled):
    """Same variables, moments and step count as Keras' AdamW after steps with random
    gradients (some over the clipping norm), decay and warm-up included; in a
    tf.function and under XLA too."""
    pairs, rng = _adamw_pair()

    def stepper(optimizer, variables):
        def step(grads):
            optimizer.apply_gradients(zip(grads, variables))
        return tf.function(step, jit_compile=True) if compiled else step

    steps = [stepper(optimizer, variables) for optimizer, variables in pairs]
    for _ in range(6):
        grads = [rng.normal(size=v.shape, scale=rng.choice([0.01, 3.0])).astype(np.float32)
                 for v in pairs[0][1]]
        for step in steps:
            step([tf.constant(g) for g in grads])
    (ours, ours_vars), (theirs, their_vars) = pairs
    assert int(ours.iterations) == int(theirs.iterations) == 6
    initial = _values(_adamw_pair()[0][0][1])
    # The weights' changes, then the moments, each to its own scale. TF's kernel takes
    # 1 − β in float32 (Keras: in Python), so v differs by ~1.3e-5 relative for β₂=0.999.
    # The changes hold the weights' own rounding: a few float32 steps of the weights.
    for a, b, i in zip(_values(ours_vars), _values(their_vars), initial):
        assert np.abs(b - i).max() > 1e-3
        np.testing.assert_allclose(a - i, b - i, rtol=3e-5,
                                   atol=4 * np.spacing(np.abs(i).max()))
    for a, b in zip(_values(ours._momentums + ours._velocities),  # pylint: disable=protected-access
                    _values(theirs._momentums + theirs._velocities)):  # pylint: disable=protected-access
        assert np.abs(b).max() > 0
        np.testing.assert_allclose(a, b, rtol=3e-5, atol=1e-6 * np.abs(b).max())


def _values(variables):
    return [v.numpy() for v in variables]


@pytest.mark.parametrize("compiled", [False, True])
def test_adamw_without_bias_correction_is_the_originals_update(compiled):
    """bias_correction=False: the original's AdamWeightDecayOptimizer, written out in
    numpy (m, v; update = m/(√v+ε) + wd·w on decayed variables; w −= lr·update), after
    global-norm clipping, with its warm-up and decay; in a tf.function under XLA too."""
    schedule = optimizer_lib.WarmupLinearDecay(peak=1e-2, warmup_steps=3, total_steps=10)
    optimizer = optimizer_lib.AdamW(learning_rate=schedule, weight_decay=0.01, beta_1=0.9,
                                    beta_2=0.999, epsilon=1e-6, global_clipnorm=1.0,
                                    bias_correction=False)
    rng = np.random.default_rng(1)
    values = [rng.normal(size=s).astype(np.float32) for s in ([4, 3], [3])]
    variables = [keras.Variable(v, name=n) for v, n in zip(values, ("kernel", "bias"))]
    optimizer.exclude_from_weight_decay(var_list=[variables[1]])
    optimizer.build(variables)
    step = lambda grads: optimizer.apply_gradients(zip(grads, variables))
    step = tf.function(step, jit_compile=True) if compiled else step
    w = [v.astype(np.float64) for v in values]
    m, v = [np.zeros_like(x) for x in w], [np.zeros_like(x) for x in w]
    for t in range(6):
        grads = [rng.normal(size=x.shape, scale=rng.choice([0.01, 3.0])).astype(np.float32)
                 for x in w]
        step([tf.constant(g) for g in grads])
        norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
        lr = 1e-2 * min(1.0, t / 3) * max(0.0, 1 - t / 10)
        for i, g in enumerate(grads):
            g = g * min(1.0, 1.0 / norm)
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g ** 2
            update = m[i] / (np.sqrt(v[i]) + 1e-6) + (0.01 * w[i] if i == 0 else 0.0)
            w[i] = w[i] - lr * update
    assert int(optimizer.iterations) == 6
    for ours, theirs, start in zip(_values(variables), w, values):
        assert np.abs(theirs - start).max() > 1e-3
        np.testing.assert_allclose(ours - start, theirs - start, rtol=2e-4, atol=2e-6)


def test_the_configs_say_whether_adam_is_bias_corrected(model):
    """The paper's sizes (and fine-tuning) take the original's uncorrected Adam; tiny,
    ours, the corrected one it was tuned with."""
    from configs import finetune as finetune_configs  # pylint: disable=g-import-not-at-top
    assert not finetune_configs.get_config("mrpc").train.adam_bias_correction
    for size, corrected in (("tiny", True), ("small", False), ("base", False)):
        config = load_config(size)
        assert optimizer_lib.create_optimizer(config.train, model).bias_correction is corrected


def test_fused_adamw_update_is_a_few_ops_per_variable():
    """The traced update grows by a few ops per variable (Keras' own: ~50): the graph
    that TF keeps, in every function holding the step, for each of a model's variables."""
    counts = {}
    for cls in (optimizer_lib.AdamW, keras.optimizers.AdamW):
        per_size = []
        for n in (10, 30):
            optimizer = cls(learning_rate=1e-3, weight_decay=0.01, global_clipnorm=1.0)
            variables = [keras.Variable(np.ones([4], np.float32)) for _ in range(n)]
            optimizer.build(variables)
            graph = tf.function(lambda grads: optimizer.apply_gradients(
                zip(grads, variables))).get_concrete_function(
                    [tf.TensorSpec([4], tf.float32)] * n).graph
            per_size.append(len(graph.get_operations()))
        counts[cls] = (per_size[1] - per_size[0]) / 20
    assert counts[optimizer_lib.AdamW] <= 14, counts
    assert counts[keras.optimizers.AdamW] >= 3 * counts[optimizer_lib.AdamW], counts


_MIRRORED_SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from electra_tf.training import optimizer as optimizer_lib

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
shapes = ([4, 3], [3])
initial = [rng.normal(size=s).astype(np.float32) for s in shapes]
grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(3)]
results = []
for cls, share in ((optimizer_lib.AdamW, 1.0), (keras.optimizers.AdamW, 0.5)):
    with strategy.scope():
        variables = [keras.Variable(v) for v in initial]
        optimizer = cls(learning_rate=1e-2, weight_decay=0.01, global_clipnorm=1.0)
        optimizer.exclude_from_weight_decay(var_list=[variables[1]])
        optimizer.build(variables)

    @tf.function
    def step(grads):
        # Ours takes gradients already summed over replicas; Keras sums them itself.
        strategy.run(lambda g: optimizer.apply_gradients(
            zip([x * share for x in g], variables)), args=(grads,))

    for g in grads:
        step([tf.constant(x) for x in g])
    components = [[c.numpy() for c in v.value.values] for v in variables]
    assert all(len(c) == 2 and np.array_equal(c[0], c[1]) for c in components), components
    results.append([c[0] for c in components])
for ours, theirs, start in zip(*results, initial):
    assert np.abs(theirs - start).max() > 1e-3
    np.testing.assert_allclose(ours - start, theirs - start, rtol=3e-5,
                               atol=4 * np.spacing(np.abs(start).max()))
print("same")
"""


def test_fused_adamw_under_mirrored_strategy_matches_keras_adamw(tmp_path):
    """Over 2 logical CPUs (MirroredStrategy's merge call, an update per device): both
    copies of each variable move as Keras' AdamW moves them."""
    script = tmp_path / "mirrored.py"
    script.write_text(_MIRRORED_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], env=helpers.child_env(),
                            capture_output=True, text=True, timeout=300, cwd=REPO,
                            check=False)
    assert result.returncode == 0 and "same" in result.stdout, result.stderr[-3000:]
