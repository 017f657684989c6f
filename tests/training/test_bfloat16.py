"""The bfloat16 training step multiplies matrices in bfloat16: a float32 matmul in it
(such as the generator's projection onto the vocabulary, which Keras' embeddings left
in float32: three GEMMs of the H200 profile, BENCHMARKS.md "GPU") costs a GPU or TPU
several times a bfloat16 one."""

import re

import pytest
import tensorflow as tf

from configs import electra as electra_config
from electra_tf.data import masking
from electra_tf.model import heads
from electra_tf.training import distribute
from electra_tf.training import trainer as trainer_lib
from tests.training import test_trainer

# float32 matrix multiplies the bfloat16 step may keep, by the op name TF gives them:
# none today. The losses (log-softmax over the vocabulary, the RTD sigmoid) and the
# attention's softmax statistics (row max and sum, model/attention.py) are float32,
# but as reductions and elementwise ops, not matmuls. A float32 matmul a loss needs
# goes here, with its reason.
ALLOWED_FLOAT32_MATMULS = ()


def _float32_matmuls(hlo: str) -> list[str]:
    """(op name, shape) of each dot or convolution with a float32 operand in `hlo`
    (XLA's HLO before its own optimisation: XLA:CPU then turns bfloat16 dots into
    float32 ones, which GPUs and TPUs do not)."""
    shapes, found = {}, []
    for line in hlo.splitlines():
        parsed = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) (\w+)\((.*)", line)
        if not parsed:
            continue
        name, shape, op, rest = parsed.groups()
        shapes[name] = shape
        if op not in ("dot", "convolution"):
            continue
        operands = re.findall(r"%([\w.\-]+)", rest.split(")")[0])
        if any(shapes.get(o, "").startswith("f32[") for o in operands):
            op_name = re.search(r'op_name="([^"]+)"', line)
            found.append((op_name.group(1) if op_name else name, shape))
    return found


# Base (configs/electra.py: its widths and heads; the generator a third as wide) at
# batch 2, seq 128 and BERT's vocabulary: its projections onto the vocabulary are the
# GEMMs the H200 profile found in float32. Two layers of each tower, not 12: every block
# is the same code, two blocks hold every hand-over (embeddings to block, block to
# block, block to heads), and batch, sequence and depth change no matmul's dtype. Each
# block adds 28 dots to the 15 outside them: 127 here (687 with 12 layers).
BASE = {"VOCAB": 30_522, "SEQ": 128, "BATCH": 2,
        "P": masking.max_predictions_per_seq(0.15, 128)}
BASE_LAYERS = 2


def _bfloat16_hlo(size, monkeypatch, **train) -> str:
    """The HLO (before XLA's optimisation) of `size`'s bfloat16 training step with
    config.train updated by `train`, on test_trainer's batch (its shapes set to
    `BASE`'s for "base"): the program XLA compiles, by the trainer's `xla_scope` (the
    forward/backward pass, or the replica loop of the whole step)."""
    if size == "base":
        for name, value in BASE.items():
            monkeypatch.setattr(test_trainer, name, value)
    # The vocabulary padded as on a GPU or TPU (`auto` leaves a CPU's unpadded).
    train = {"vocabulary_padding": "tiles", **train}
    config = test_trainer._config(mixed_precision="bfloat16", **train)  # pylint: disable=protected-access
    if size == "base":
        config.model = electra_config.get_config("base").model
        config.model.num_layers = BASE_LAYERS
    trainer = trainer_lib.Trainer(config, distribute.get_strategy(config.runtime),
                                  test_trainer.VOCAB, test_trainer.P)
    assert trainer.policy == "mixed_bfloat16"
    assert trainer.remat == train.get("remat", "selective")  # auto on a CPU: selective
    # test_trainer._config compiles the pass alone (auto on a CPU); never the other branch.
    assert trainer.xla_scope == train.get("xla_scope", "forward_backward")
    if trainer.xla_scope == "whole_step":
        hlo = _whole_step_hlo(trainer)
    else:
        hlo = test_trainer._optimized_hlo(trainer, stage="hlo")  # pylint: disable=protected-access
    # The backward pass: the training step's program, not evaluation's or the
    # predictions view's (forward passes alone).
    assert 'op_name="gradient_tape/' in hlo
    return hlo


def _whole_step_hlo(trainer) -> str:
    """The HLO (before XLA's optimisation) of `trainer`'s replica loop, the program a
    TPU or one GPU compiles for the whole step (`Trainer._replica_loop`: a `while`
    over the steps of one launch), on `steps_per_loop` copies of the batch."""
    replica_loop = trainer._replica_loop(trainer.stage, jit_compile=True)  # pylint: disable=protected-access
    batch = {k: tf.constant(v) for k, v in test_trainer._batch().items()}  # pylint: disable=protected-access
    batches = [batch] * trainer.config.train.steps_per_loop
    hlo = replica_loop.experimental_get_compiler_ir(
        batches, tf.constant(1), tf.constant(0, tf.int64))(stage="hlo")
    # The step around the pass is in it, inside the `while`: the gradient norm and the
    # optimizer's update.
    assert 'op_name="while/global_norm/' in hlo and "AssignSubVariableOp" in hlo
    return hlo


@pytest.mark.parametrize("size, train, min_matmuls", [
    # The CPU's defaults: remat selective, the forward/backward pass compiled.
    pytest.param("tiny", {}, 50, id="tiny"),
    # What `auto` runs on a GPU (nothing recomputed, the whole step compiled: the
    # optimizer and metrics in the program too), and what a TPU compiles.
    pytest.param("tiny", {"remat": "none", "xla_scope": "whole_step"}, 50,
                 id="tiny-whole_step"),
    pytest.param("base", {}, 100, id="base")])
def test_the_bfloat16_step_has_no_float32_matmul(monkeypatch, size, train, min_matmuls):
    hlo = _bfloat16_hlo(size, monkeypatch, **train)
    matmuls = re.findall(r"\bdot\(", hlo)
    assert len(matmuls) > min_matmuls  # the whole forward/backward pass is there
    found = [(name, shape) for name, shape in _float32_matmuls(hlo)
             if not any(re.search(allowed, name) for allowed in ALLOWED_FLOAT32_MATMULS)]
    assert not found, found
    if size == "tiny":
        return  # its padded vocabulary (128) is other tensors' width too
    # The projection onto the vocabulary, padded for the hardware, and its two
    # gradients: bfloat16 [*, E] x [E, V'] GEMMs.
    vocabulary = f",{heads.padded_vocabulary(test_trainer.VOCAB)}]"
    projections = [line for line in hlo.splitlines()
                   if re.search(r" dot\(", line) and vocabulary in line]
    assert len(projections) == 3, projections
    assert all(re.search(r"= bf16\[", line) for line in projections), projections
