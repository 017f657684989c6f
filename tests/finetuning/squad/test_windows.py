"""SQuAD's windows (`finetuning.squad.windows`): windows over long contexts, character
offsets in any script, the head, best spans across windows."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning.squad import data as squad_data
from electra_tf.finetuning.squad import windows
from electra_tf.model import encoder
from tests import helpers
from tests.finetuning.squad.test_data import CONTEXT


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return helpers.write_vocab(str(tmp_path_factory.mktemp("vocab")))


def test_windows_cover_a_long_context_and_find_the_answer(vocab):
    start = CONTEXT.index("big red house")
    questions = [squad_data.Question("q1", "where did the dog run ?", CONTEXT,
                                     ["big red house"], [start]),
                 squad_data.Question("q2", "what ?", CONTEXT, [], []),
                 # An empty dev question (data.py keeps it): the context alone.
                 squad_data.Question("q3", "", CONTEXT, [], [])]
    feats = windows.features(questions, vocab, lower_case=True, max_seq_length=24,
                             doc_stride=6, max_query_length=8)
    blank = feats.input_ids[feats.question_index == 2]
    assert len(blank) >= 2 and np.all(blank[:, :2] == [vocab.cls_id, vocab.sep_id])
    assert np.all(feats.segment_ids[feats.question_index == 2][:, 2] == 1)
    per_question = {q: int(np.sum(feats.question_index == q)) for q in (0, 1)}
    assert per_question[0] >= 3 and per_question[1] >= 3  # ~30 context tokens, 14-16 each
    assert feats.input_ids.shape == (len(feats), 24)
    for f in range(len(feats)):
        # [CLS] question [SEP] context [SEP], segment 1 from the context on.
        ids, segments, mask = feats.input_ids[f], feats.segment_ids[f], feats.input_mask[f]
        assert ids[0] == vocab.cls_id and segments[0] == 0
        context = np.nonzero(feats.token_chars[f][:, 0] >= 0)[0]
        assert np.all(segments[context] == 1) and ids[context[-1] + 1] == vocab.sep_id
        assert mask.sum() == context[-1] + 2
        s, e = feats.start_positions[f], feats.end_positions[f]
        if s:  # the answer's tokens, back to the context's characters
            chars = feats.token_chars[f]
            assert CONTEXT[chars[s, 0]:chars[e, 1]] == "big red house"
        assert feats.is_impossible[f] == (feats.question_index[f] > 0)
    assert np.sum(feats.start_positions[feats.question_index == 0] > 0) >= 1
    # Every context token is "max context" in exactly one window of its question.
    for q in (0, 1):
        counts = {}
        for f in np.nonzero(feats.question_index == q)[0]:
            for t in np.nonzero(feats.max_context[f])[0]:
                key = tuple(feats.token_chars[f][t])
                counts[key] = counts.get(key, 0) + 1
        assert set(counts.values()) == {1}


def test_offsets_are_characters_in_any_script(vocab):
    context = "Théâtre : 北京 the big mat ."
    start = context.index("北京")
    feats = windows.features(
        [squad_data.Question("q", "where ?", context, ["北京"], [start])], vocab,
        lower_case=True, max_seq_length=32)
    s, e = feats.start_positions[0], feats.end_positions[0]
    chars = feats.token_chars[0]
    assert (chars[s, 0], chars[e, 1]) == (start, start + 2)   # characters, not bytes
    assert context[chars[s - 2, 0]:chars[s - 2, 1]] == "Théâtre"


def _outputs(feats, spans, k=3):
    """Hand-made model outputs: window f proposes `spans[f]` = [(start, end, lp)]."""
    n = len(feats)
    out = {"start_top_log_probs": np.full((n, k), -50.0),
           "start_top_index": np.zeros((n, k), np.int32),
           "end_top_log_probs": np.full((n, k, k), -50.0),
           "end_top_index": np.zeros((n, k, k), np.int32),
           "answerable_logit": np.arange(n, dtype=np.float32)}
    for f, proposals in spans.items():
        for i, (start, end, lp) in enumerate(proposals):
            out["start_top_index"][f, i] = start
            out["start_top_log_probs"][f, i] = lp
            out["end_top_index"][f, i, 0] = end
            out["end_top_log_probs"][f, i, 0] = 0.0
    return out


def test_best_answer_is_the_best_valid_span_across_windows(vocab):
    start = CONTEXT.index("big red house")
    question = squad_data.Question("q1", "where did the dog run ?", CONTEXT, ["big red house"],
                                   [start])
    feats = windows.features([question], vocab, True, max_seq_length=24, doc_stride=6,
                             max_query_length=8)
    # The window where the answer's first token has its most context.
    f = next(f for f in range(len(feats))
             if feats.start_positions[f] and feats.max_context[f][feats.start_positions[f]])
    s, e = int(feats.start_positions[f]), int(feats.end_positions[f])
    other = (f + 1) % len(feats)
    proposals = {f: [(1, 1, -0.1),          # a question token: never an answer
                     (s, 23, -0.2),         # ends on the last [SEP] or padding
                     (s, e, -1.0)],
                 other: [(0, 0, -0.5)]}     # [CLS]: not a span
    answers = windows.best_answers([question], feats, _outputs(feats, proposals))
    assert (answers[0].text, answers[0].start, answers[0].end) == (
        "big red house", start, start + len("big red house"))
    assert answers[0].score == pytest.approx(-1.0)
    assert answers[0].null_score == 0.0      # the lowest of the windows' logits
    # Too long for max_answer_length: nothing valid is left.
    none = windows.best_answers([question], feats, _outputs(feats, proposals),
                                max_answer_length=2)
    assert (none[0].text, none[0].start) == ("", -1)


def test_the_head_learns_spans_and_finds_them_with_its_beam():
    embeddings = encoder.Embeddings(vocabulary_size=40, embedding_size=16)
    enc = encoder.Encoder(embeddings, hidden_size=16, num_layers=2, num_heads=2,
                          intermediate_size=32)
    head = model_lib.QuestionAnswerer(enc, beam_size=5, seed=0)
    # The hidden layers' gelu is the original's (its `modeling.gelu`): the exact one,
    # not the tanh approximation (up to 4.7e-4 away).
    x = np.linspace(-4.0, 4.0, 161)
    for dense in (head.end_hidden, head.answerable_hidden):
        np.testing.assert_allclose(dense.activation(x.astype("float32")),
                                   helpers.exact_gelu(x), atol=2e-6)
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(5, 40, (3, 12)).astype("int32"),
             "input_mask": np.ones((3, 12), "int32"),
             "segment_ids": np.repeat([[0] * 4 + [1] * 8], 3, 0).astype("int32"),
             "start_positions": np.array([5, 0, 7], "int32"),
             "end_positions": np.array([6, 0, 9], "int32"),
             "is_impossible": np.array([0, 1, 0], "int32")}
    optimizer = keras.optimizers.Adam(3e-3)
    losses = []
    for _ in range(40):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model_lib.qa_loss(head(batch, training=True), batch))
        grads = tape.gradient(loss, head.trainable_variables)
        optimizer.apply_gradients(zip(grads, head.trainable_variables))
        losses.append(float(loss))
    assert losses[-1] < 0.05 * losses[0], losses
    inputs = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    out = head(inputs, training=False)
    assert out["end_top_index"].shape == (3, 5, 5)
    np.testing.assert_array_equal(out["start_top_index"][:, 0], [5, 0, 7])
    np.testing.assert_array_equal(out["end_top_index"][:, 0, 0], [6, 0, 9])
    assert np.all(out["start_top_index"].numpy()[:, :] >= 0)
    # Question tokens (segment 0, but [CLS]) are never proposed as starts.
    assert not np.isin(out["start_top_index"].numpy(), [1, 2, 3]).any()
    logits = out["answerable_logit"].numpy()
    assert logits[1] > 0 > max(logits[0], logits[2])   # "impossible" only for row 1
    assert sorted(set(model_lib.layer_depths(head).values())) == [0, 1, 2, 4]
