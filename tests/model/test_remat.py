"""model/remat.py's choice under `config.train.remat=auto` (`choose`) and the estimate it
reads (`activation_bytes`); what each mode computes is tests/training/test_trainer.py's."""

import pytest

from electra_tf.model import remat
from electra_tf.model import sizes

GIB = 2**30


def test_activation_estimate_grows_with_batch_sequence_and_width():
    small, base = sizes.SIZES["small"], sizes.SIZES["base"]
    one = remat.activation_bytes([small], 1, 128, 2)
    assert remat.activation_bytes([small], 128, 128, 2) == 128 * one
    assert remat.activation_bytes([small], 1, 128, 4) > one  # float32 values
    assert remat.activation_bytes([base], 1, 128, 2) > 2 * one
    # Quadratic in the sequence length through the attention probabilities.
    assert remat.activation_bytes([small], 1, 512, 2) > 4 * one
    assert remat.activation_bytes([small, small], 1, 128, 2, logits=10) == 2 * one + 40
    # Korthikanti et al.'s 34·S·H + 5·heads·S² bytes per block at 16 bits (F = 4H),
    # give or take the LayerNorms and masks they count otherwise.
    h, s, heads, layers = base.hidden_size, 128, base.num_heads, base.num_layers
    paper = layers * (34 * s * h + 5 * heads * s * s)
    assert abs(remat.activation_bytes([base], 1, s, 2) / paper - 1) < 0.05


@pytest.mark.parametrize("kind, memory, activations, chosen", [
    ("cpu", None, 1 * GIB, "selective"),
    ("cpu", 1000 * GIB, 1 * GIB, "selective"),  # a CPU never drops recomputation
    ("gpu", 80 * GIB, 6 * GIB, "none"),         # Base at 128 x 128, bfloat16, on an H100
    ("gpu", 16 * GIB, 13 * GIB, "selective"),   # Base at 256 x 128 on a 16 GiB GPU
    ("tpu", 16 * GIB, 4 * GIB, "none"),
    ("tpu", 16 * GIB, 10 * GIB, "selective"),
    ("gpu", None, 1 * GIB, "selective"),        # memory unknown
])
def test_auto_chooses_by_device_and_memory(kind, memory, activations, chosen):
    mode, reason = remat.choose("auto", kind, memory, activations, state_bytes=GIB)
    assert mode == chosen
    assert f"~{activations / GIB:.1f} GiB estimated" in reason  # says the estimate
    assert remat.choose("auto", kind, memory, 3 * 2**20, 0)[1].count("3.0 MiB") == 1


def test_the_weights_state_counts_against_the_memory():
    assert remat.choose("auto", "gpu", 16 * GIB, 8 * GIB, state_bytes=0)[0] == "none"
    assert remat.choose("auto", "gpu", 16 * GIB, 8 * GIB, state_bytes=4 * GIB)[0] == (
        "selective")


def test_a_mode_given_is_kept_and_a_bad_one_refused():
    for mode in remat.MODES:
        assert remat.choose(mode, "gpu", 80 * GIB, GIB, 0) == (mode, "as configured")
    with pytest.raises(ValueError, match="mode='all': choose one of auto, none"):
        remat.choose("all", "cpu", None, GIB, 0)
