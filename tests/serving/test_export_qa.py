"""The QA SavedModel: in-graph windows and spans agree with the fine-tuning's evaluation
(`squad.windows.features` + `best_answers`), in TF Serving's session loader."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf import errors
from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning.squad import data as squad_data
from electra_tf.finetuning.squad import windows as squad_windows
from electra_tf.model import encoder
from electra_tf.serving import export_qa
from tests import helpers

SEQ, STRIDE, QUERY = 24, 6, 8
LONG = ("the cat sat on the mat . the dog ran in the big red house . a small bird sat on "
        "a tree . " * 4)                                     # ~120 tokens: many windows
SCRIPTS = "Théâtre : 北京 the big mat . Москва and العربية , the happy dog ."
QUESTIONS = ["where did the dog run ?", "what ?", "où est 北京 ?", "",
             "the question is longer than the eight tokens kept of it , a lot"]
CONTEXTS = [LONG, "", SCRIPTS, "red", SCRIPTS]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    vocab = helpers.write_vocab(str(tmp_path_factory.mktemp("vocab")))
    keras.utils.set_random_seed(0)  # the same weights, hence the same answers, every run
    embeddings = encoder.Embeddings(vocabulary_size=vocab.size, embedding_size=16)
    enc = encoder.Encoder(embeddings, hidden_size=16, num_layers=1, num_heads=2,
                          intermediate_size=32)
    model = model_lib.QuestionAnswerer(enc, beam_size=5, seed=0)
    questions = [squad_data.Question(str(i), q, c, [], []) for i, (q, c) in
                 enumerate(zip(QUESTIONS, CONTEXTS))]
    features = squad_windows.features(questions, vocab, True, SEQ, STRIDE, QUERY)
    outputs = {k: v.numpy() for k, v in model(
        {k: features.arrays()[k] for k in ("input_ids", "input_mask", "segment_ids")},
        training=False).items()}
    return vocab, model, questions, features, squad_windows.best_answers(questions, features,
                                                                         outputs, 4)


def test_windows_in_the_graph_are_the_features_windows(setup):
    vocab, _, questions, features, _ = setup
    windows = export_qa.Windows(vocab, SEQ, True, STRIDE, QUERY)(
        tf.constant(QUESTIONS), tf.constant(CONTEXTS))
    for key in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(windows[key].numpy(), features.arrays()[key], key)
    np.testing.assert_array_equal(windows["example"].numpy(), features.question_index)
    assert windows["num_windows"].numpy()[0] >= 10 and windows["num_windows"].numpy()[1] == 1
    # A context token is in at most `overlap` windows (the span search's static bound);
    # the long context's windows overlap (doc_stride < the room), so a start has rivals.
    overlap = export_qa.Windows(vocab, SEQ, True, STRIDE, QUERY).overlap
    counts = {}
    for f in np.nonzero(features.question_index == 0)[0]:
        for start in features.token_chars[f][:, 0]:
            if start >= 0:
                counts[start] = counts.get(start, 0) + 1
    assert 2 <= max(counts.values()) <= overlap
    with pytest.raises(errors.UserError, match="leaves no context token"):
        export_qa.Windows(vocab, 10, True, STRIDE, QUERY)


def _window_of(features, index, start):
    """Which of question `index`'s windows (0: its first) scores the answer starting at
    character `start`: the one giving that token its most context."""
    windows = np.nonzero(features.question_index == index)[0]
    for w, f in enumerate(windows):
        hit = np.nonzero((features.token_chars[f][:, 0] == start) & features.max_context[f])[0]
        if len(hit):
            return w
    raise AssertionError(f"no window of question {index} scores a start at {start}")


def _ask(path, tmp_path):
    return helpers.session_run(path, {"ask": ("serving_default", {
        "question": np.array(QUESTIONS, object), "context": np.array(CONTEXTS, object)})},
        str(tmp_path / "out"))["ask"]


def _export(model, vocab, path, null_threshold=None):
    return export_qa.export_question_answerer(
        model, vocab, path, max_seq_length=SEQ, lower_case=True, doc_stride=STRIDE,
        max_query_length=QUERY, max_answer_length=4, null_threshold=null_threshold)


def test_export_answers_as_the_evaluation_does_in_the_session_loader(setup, tmp_path):
    """No threshold: every request's answer, character offsets and score are the host
    evaluation's (squad_windows.features + squad_windows.best_answers)."""
    vocab, model, questions, features, expected = setup
    got = _ask(_export(model, vocab, str(tmp_path / "qa" / "1")), tmp_path)
    assert set(got) == {"answer", "start", "end", "score"}
    for q, a, text, start, end, score in zip(questions, expected, got["answer"],
                                             got["start"], got["end"], got["score"]):
        assert (text.decode("utf-8"), start, end) == (a.text, a.start, a.end), q.qid
        if a.start >= 0:
            assert score == pytest.approx(a.score, abs=1e-4), q.qid
        else:  # no valid span at all (the empty context)
            assert score == export_qa.NO_SPAN_SCORE
    answered = [(i, a) for i, a in enumerate(expected) if a.start >= 0]
    assert expected[1].start == -1 and len(answered) == len(expected) - 1
    # The comparison covers character offsets after multi-byte characters (bytes →
    # characters) and a start scored in a later window (the most-context rule).
    assert any(any(len(ch.encode("utf-8")) > 1 for ch in questions[i].context[:a.start])
               for i, a in answered)
    assert any(_window_of(features, i, a.start) > 0 for i, a in answered)


def test_a_null_threshold_declines_answers_and_reports_the_no_answer_score(setup, tmp_path):
    vocab, model, questions, _, expected = setup
    # A threshold between the requests' no-answer scores: some answer, some decline.
    nulls = sorted(a.null_score for a in expected)
    threshold = (nulls[1] + nulls[2]) / 2
    got = _ask(_export(model, vocab, str(tmp_path / "qa" / "1"), threshold), tmp_path)
    assert set(got) == {"answer", "start", "end", "score", "no_answer_score"}
    np.testing.assert_allclose(got["no_answer_score"], [a.null_score for a in expected],
                               atol=1e-5)
    answered = [a.null_score <= threshold and a.start >= 0 for a in expected]
    declined = [a.null_score > threshold and a.start >= 0 for a in expected]
    assert any(answered) and any(declined)
    for q, a, ok, text, start, end in zip(questions, expected, answered, got["answer"],
                                          got["start"], got["end"]):
        assert (text.decode("utf-8"), start, end) == ((a.text, a.start, a.end) if ok
                                                      else ("", -1, -1)), q.qid
