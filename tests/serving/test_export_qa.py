"""The QA SavedModel: in-graph windows and spans agree with the fine-tuning's evaluation
(`squad.features` + `squad.best_answers`), in TF Serving's session loader."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import errors
from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning import squad
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
    embeddings = encoder.Embeddings(vocabulary_size=vocab.size, embedding_size=16)
    enc = encoder.Encoder(embeddings, hidden_size=16, num_layers=1, num_heads=2,
                          intermediate_size=32)
    model = model_lib.QuestionAnswerer(enc, beam_size=5, seed=0)
    questions = [squad.Question(str(i), q, c, [], []) for i, (q, c) in
                 enumerate(zip(QUESTIONS, CONTEXTS))]
    features = squad.features(questions, vocab, True, SEQ, STRIDE, QUERY)
    outputs = {k: v.numpy() for k, v in model(
        {k: features.arrays()[k] for k in ("input_ids", "input_mask", "segment_ids")},
        training=False).items()}
    return vocab, model, questions, features, squad.best_answers(questions, features,
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


def test_export_answers_as_the_evaluation_does_in_the_session_loader(setup, tmp_path):
    vocab, model, questions, _, expected = setup
    # A threshold between the requests' no-answer scores: some answer, some decline.
    nulls = sorted(a.null_score for a in expected)
    threshold = (nulls[1] + nulls[2]) / 2
    path = export_qa.export_question_answerer(
        model, vocab, str(tmp_path / "qa" / "1"), max_seq_length=SEQ, lower_case=True,
        doc_stride=STRIDE, max_query_length=QUERY, max_answer_length=4,
        null_threshold=threshold)
    got = helpers.session_run(path, {"ask": ("serving_default", {
        "question": np.array(QUESTIONS, object), "context": np.array(CONTEXTS, object)})},
        str(tmp_path / "out"))["ask"]
    assert set(got) == {"answer", "start", "end", "score", "no_answer_score"}
    np.testing.assert_allclose(got["no_answer_score"], [a.null_score for a in expected],
                               atol=1e-5)
    answered = [a.null_score <= threshold and a.start >= 0 for a in expected]
    assert 0 < sum(answered) < len(expected)
    for q, a, ok, text, start, end, score in zip(questions, expected, answered,
                                                 got["answer"], got["start"], got["end"],
                                                 got["score"]):
        assert (text.decode("utf-8"), start, end) == ((a.text, a.start, a.end) if ok
                                                      else ("", -1, -1)), q.qid
        if a.start >= 0:
            assert score == pytest.approx(a.score, abs=1e-4)
            assert q.context[a.start:a.end] == a.text      # characters, any script
        else:  # no valid span at all (the empty context)
            assert score == export_qa.NO_SPAN_SCORE
    assert expected[1].start == -1 and expected[0].start >= 0
