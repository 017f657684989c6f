"""The bfloat16 training step multiplies matrices in bfloat16: a float32 matmul in it
(such as the generator's projection onto the vocabulary, which Keras' embeddings left
in float32: three GEMMs of the H200 profile, BENCHMARKS.md "GPU") costs a GPU or TPU
several times a bfloat16 one."""

import re

import pytest

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


# Base (configs/electra.py, all 12 layers, the generator a third as wide) at batch 2,
# seq 128 and BERT's vocabulary: its projections onto the vocabulary are the GEMMs the
# H200 profile found in float32. Batch and sequence change no matmul's dtype.
BASE = {"VOCAB": 30_522, "SEQ": 128, "BATCH": 2,
        "P": masking.max_predictions_per_seq(0.15, 128)}


def _bfloat16_hlo(size, monkeypatch) -> str:
    """The HLO (before XLA's optimisation) of `size`'s bfloat16 forward/backward pass, on
    test_trainer's batch (its shapes set to `BASE`'s for "base")."""
    if size == "base":
        for name, value in BASE.items():
            monkeypatch.setattr(test_trainer, name, value)
    config = test_trainer._config(mixed_precision="bfloat16")  # pylint: disable=protected-access
    if size == "base":
        config.model = electra_config.get_config("base").model
    trainer = trainer_lib.Trainer(config, distribute.get_strategy(config.runtime),
                                  test_trainer.VOCAB, test_trainer.P)
    assert trainer.policy == "mixed_bfloat16"
    return test_trainer._optimized_hlo(trainer, stage="hlo")  # pylint: disable=protected-access


@pytest.mark.parametrize("size, min_matmuls", [("tiny", 50), ("base", 600)])
def test_the_bfloat16_step_has_no_float32_matmul(monkeypatch, size, min_matmuls):
    hlo = _bfloat16_hlo(size, monkeypatch)
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
