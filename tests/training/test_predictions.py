"""The predictions view: what it reads from the model, and its three renderings."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import masking as masking_lib
from electra_tf.data import pipeline
from electra_tf.model import pretrainer
from electra_tf.model import sizes
from electra_tf.serving import export
from electra_tf.text import packer as packer_lib
from electra_tf.training import predictions
from tests import helpers


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    vocab = helpers.write_vocab(str(tmp_path_factory.mktemp("vocab")))
    tiny = sizes.SIZES["tiny"]
    keras.utils.set_random_seed(0)
    model = pretrainer.ElectraPretrainer(
        vocab.size, sizes.ModelShape(tiny, sizes.generator_size(tiny, 0.5), max_positions=16))
    model.build_for(16, 3)
    packer = packer_lib.TextPacker(vocab, 16, lower_case=True)
    ids, mask, segments = packer.pack(tf.constant(["the cat sat on the mat .", "a dog"]),
                                      tf.constant(["it was happy", "ran"]))
    masking = pipeline.masking_config_for(vocab, 16)
    batch = masking_lib.mask_batch({"input_ids": ids, "input_mask": mask,
                                    "segment_ids": segments}, masking, seed=[3, 4])
    return vocab, model, batch


def test_views_hold_what_the_model_did(setup):
    vocab, model, batch = setup
    uniform = predictions.noise(0, *batch["masked_lm_ids"].shape)
    forward = predictions.predict_fn(model)
    shown = predictions.views(forward, batch, vocab, uniform)
    outputs = helpers.forward(model, batch, uniform=uniform, training=False)
    lengths = batch["input_mask"].numpy().sum(1)
    assert [len(s) for s in shown] == lengths.tolist()
    for row, tokens in enumerate(shown):
        assert [t.text for t in tokens] == [vocab.tokens[i] for i in
                                            batch["input_ids"][row, :lengths[row]].numpy()]
        chosen = {int(p) for p, w in zip(batch["masked_lm_positions"][row].numpy(),
                                          batch["masked_lm_weights"][row].numpy()) if w}
        assert {i for i, t in enumerate(tokens) if t.masked} == chosen
        for i, t in enumerate(tokens):
            corrupted = vocab.tokens[int(outputs["corrupted_ids"][row, i])]
            assert t.seen == corrupted
            # A sample equal to the original counts as original.
            assert t.replaced == (corrupted != t.text)
            assert t.sample is None or t.masked
        # The discriminator's probability, as the exported model computes it.
        served = export.discriminate(model, outputs["corrupted_ids"], batch["input_mask"],
                                     batch["segment_ids"])["replaced_probability"]
        np.testing.assert_allclose([t.probability for t in tokens],
                                   served[row, :lengths[row]].numpy(), atol=1e-6)
        # Segment B starts after the first [SEP].
        assert [t.segment for t in tokens].index(1) == [t.text for t in tokens].index("[SEP]") + 1
    # The same noise draws the same samples: the view at every evaluation is comparable.
    assert predictions.views(forward, batch, vocab, uniform) == shown


TOKENS = [
    predictions.Token("[CLS]", False, None, False, 0.01),
    predictions.Token("cat", True, "dog", True, 0.91),
    predictions.Token("sat", True, "sat", False, 0.12),         # sampled the original
    predictions.Token("a|b", False, None, False, 0.62),
    predictions.Token("<b>", False, None, False, 0.05, segment=1),
]


def test_markdown_is_a_table_row_per_token():
    text = predictions.markdown([TOKENS])
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(TOKENS)   # header + one row per token
    assert "| 1 | `cat` | ✓ | **`dog`** | 0.91 | █████████░ |" in text
    assert "| 2 | `sat` | ✓ | `sat` | 0.12 |" in text   # masked, not replaced: not bold
    assert r"`a\|b`" in text                            # a | does not break the table
    assert "5 tokens, 2 masked, 1 replaced" in text


def test_terminal_plain_and_coloured():
    plain = predictions.terminal([TOKENS], colour=False).splitlines()[-1]
    assert plain == "[CLS] *cat→dog*[0.91] _sat_[0.12] a|b[0.62] | <b>"
    coloured = predictions.terminal([TOKENS], colour=True).splitlines()[-1]
    assert "\033[97;48;5;196m*cat→dog*\033[0m" in coloured   # P 0.91: the reddest
    assert coloured.startswith("[CLS] ")                       # P 0.01: no shading


def test_html_escapes_and_marks_replaced():
    page = predictions.html([TOKENS], title="run <1>")
    assert "<b>" not in page.replace("<body>", "") and "&lt;b&gt;" in page
    assert "run &lt;1&gt;" in page
    assert "text-decoration: underline;" in page and "rgba(220, 30, 30, 0.910)" in page
    assert page.count("<tr>") == 1 + len(TOKENS)
