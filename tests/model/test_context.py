"""The step context: one immutable value, read by the layers through one mechanism."""

import dataclasses
import os
import threading

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model import context
from tests import helpers


def test_a_context_is_immutable_and_derives_new_ones():
    step = context.StepContext.for_step(5, 9, training=True, uniform=np.zeros((2, 3)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.seed = None
    block = step.for_block(3)
    assert block.block == 3 and block.uniform is step.uniform and step.block == 0
    salted = step.salted(1)
    assert step.seed.numpy().tolist() == [5, 9]  # unchanged
    assert salted.seed.numpy().tolist() != [5, 9] and salted.step is step.step
    assert step.salted(0) is step and context.StepContext().salted(1).seed is None
    with pytest.raises(ValueError, match="remat"):
        context.StepContext(remat="all")


def test_a_compiled_function_takes_a_context_as_one_argument():
    traces = []

    @tf.function
    def seed_sum(step_context):
        traces.append(step_context.remat)
        return tf.reduce_sum(step_context.seed) + tf.cast(step_context.block, tf.int64)

    for step in range(3):  # a new step's tensors: no new trace
        assert int(seed_sum(context.StepContext.for_step(1, step, block=tf.constant(2)))) \
            == 3 + step
    seed_sum(context.StepContext.for_step(1, 0, block=tf.constant(2), remat="blocks"))
    assert traces == ["none", "blocks"]  # the static fields are the trace's key


def test_contexts_compare_by_identity_even_in_a_graph():
    """== on the tensor fields would ask a graph tensor for a Python bool."""
    @tf.function
    def same(u, v):
        a, b = context.StepContext(uniform=u), context.StepContext(uniform=v)
        return tf.constant(a == b), tf.constant(a == a)  # pylint: disable=comparison-with-itself
    different, itself = same(tf.zeros([1, 2]), tf.ones([1, 2]))
    assert not bool(different) and bool(itself)


def test_entered_makes_a_context_active_in_its_block_and_thread_only():
    outer, inner = context.StepContext(), context.StepContext(remat="selective")
    assert context.active() is None
    with context.entered(outer):
        with context.entered(inner):
            assert context.active() is inner
        assert context.active() is outer
        seen = []
        thread = threading.Thread(target=lambda: seen.append(context.active()))
        thread.start()
        thread.join()
        assert seen == [None]  # another thread (a replica) enters its own
    assert context.active() is None


def test_no_thread_local_state_in_the_model():
    """The step's randomness reaches the layers through `context.active()` only."""
    model_dir = os.path.join(helpers.ROOT, "electra_tf", "model")
    for root, _, files in os.walk(model_dir):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    assert "threading" not in f.read(), name


def test_philox_is_what_auto_select_drew_on_a_cpu():
    """Runs of an earlier version drew with auto_select: on a CPU that is Philox, so
    naming it changes none of their masks, samples or dropout (a resume continues)."""
    seed = tf.constant([17, 3], tf.int64)
    for fn in (lambda alg: tf.random.stateless_uniform([64], seed, alg=alg),
               lambda alg: tf.random.stateless_uniform([8], seed, minval=None, maxval=None,
                                                       dtype=tf.uint32, alg=alg),
               lambda alg: tf.random.experimental.stateless_fold_in(seed, 5, alg=alg)):
        np.testing.assert_array_equal(fn("philox"), fn("auto_select"))


def test_every_random_draw_names_philox():
    """tf.random's stateless ops default to `auto_select`, which may pick another
    generator on another device (XLA on a TPU), so that the masks, the sampling noise and
    the dropout would depend on the device: every call in the package names Philox."""
    import ast  # pylint: disable=g-import-not-at-top
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "electra_tf")
    unnamed, calls = [], 0
    for directory, _, names in os.walk(package):
        for name in (n for n in names if n.endswith(".py")):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr.startswith("stateless_")
                        and "random" in ast.unparse(node.func.value)):
                    calls += 1
                    alg = [k.value for k in node.keywords if k.arg == "alg"]
                    if not (alg and isinstance(alg[0], ast.Constant)
                            and alg[0].value == "philox"):
                        unnamed.append(f"{path}:{node.lineno}")
    assert calls > 10 and not unnamed, unnamed
