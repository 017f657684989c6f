"""Model FLOPs of ELECTRA pre-training, per sequence (for throughput and MFU figures).

A multiply-add counts as 2 FLOPs; only matmuls are counted (softmax, LayerNorm, GELU,
dropout, the loss and the optimizer are a few percent and are left out); embedding
lookups and the gathers of masked positions are free. With S the sequence length, P the
masked positions per sequence (`masking.max_predictions_per_seq`), V the vocabulary, E the
embedding width, and for each encoder H its hidden width, F its FFN width, L its layers:

    encoder forward = L · [ 2·S·(4·H² + 2·H·F)      QKV + attention output, FFN in and out
                          + 2·2·S²·H ]              attention scores and weighted sum
                    + 2·S·E·H   (only when E ≠ H)   embedding projection
    discriminator   = encoder(H, F, L) + 2·S·H² + 2·S·H          RTD head: dense + logits
    generator       = encoder(Hg, Fg, Lg) + P·(2·Hg·Eg + 2·Eg·V) MLM head, masked positions
    training        = 3 · (generator + discriminator)            backward ≈ 2 × forward

(for ELECTRA; each objective adds these up for its own passes and heads:
`objectives.training_flops`. This module is a leaf: it imports only `sizes`).

The MLM head projects to the vocabulary at the P masked positions only (never over all S
tokens), so V costs P·2·E·V, not S·2·E·V. ELECTRA-Small (H=256, F=1024, L=12, E=128;
generator H=64, F=256, L=12) at S=128, P=19, V=30522 comes to about 3.0 GFLOP forward,
9.0 GFLOP per training sequence. Everything is read from the shapes, so custom shapes and
an untied generator's own embedding width (E_g in its MLM head) count exactly:

>>> from electra_tf.model import sizes
>>> small = sizes.SIZES["small"]
>>> generator = sizes.generator_size(small, 0.25)
>>> forward_flops_per_sequence(small, generator, 128, 19, 30522)
2994671104
>>> round(training_flops_per_sequence(small, generator, 128, 19, 30522) / 1e9, 2)
8.98
"""

from electra_tf.model import sizes as sizes_lib


def encoder_flops(size: sizes_lib.EncoderSize, seq_len: int) -> int:
    """Forward FLOPs of one encoder (embedding projection + L blocks) for one sequence."""
    s, h, f = seq_len, size.hidden_size, size.intermediate_size
    per_layer = 2 * s * (4 * h * h + 2 * h * f) + 2 * 2 * s * s * h
    projection = 2 * s * size.embedding_size * h if size.embedding_size != h else 0
    return size.num_layers * per_layer + projection


def mlm_head_flops(size: sizes_lib.EncoderSize, num_positions: int, vocab_size: int) -> int:
    """An MLM head on `size`'s encoder at `num_positions` positions: dense H → E, then the
    tied embedding matrix E → V."""
    e = size.embedding_size
    return num_positions * (2 * size.hidden_size * e + 2 * e * vocab_size)


def rtd_head_flops(size: sizes_lib.EncoderSize, seq_len: int) -> int:
    """The replaced-token head at every position: dense H → H, then H → 1."""
    h = size.hidden_size
    return 2 * seq_len * h * h + 2 * seq_len * h


def generator_flops(generator: sizes_lib.EncoderSize, seq_len: int, num_predictions: int,
                    vocab_size: int) -> int:
    """Forward FLOPs of the generator with its MLM head at the masked positions."""
    return (encoder_flops(generator, seq_len)
            + mlm_head_flops(generator, num_predictions, vocab_size))


def forward_flops_per_sequence(discriminator: sizes_lib.EncoderSize,
                               generator: sizes_lib.EncoderSize, seq_len: int,
                               num_predictions: int, vocab_size: int) -> int:
    """Forward FLOPs of generator + discriminator (with their heads) for one sequence."""
    discriminator_flops = encoder_flops(discriminator, seq_len) + rtd_head_flops(
        discriminator, seq_len)
    return discriminator_flops + generator_flops(generator, seq_len, num_predictions,
                                                 vocab_size)


def training_flops_per_sequence(discriminator: sizes_lib.EncoderSize,
                                generator: sizes_lib.EncoderSize, seq_len: int,
                                num_predictions: int, vocab_size: int) -> int:
    """Forward + backward FLOPs for one sequence: 3 × the forward."""
    return 3 * forward_flops_per_sequence(discriminator, generator, seq_len,
                                          num_predictions, vocab_size)

