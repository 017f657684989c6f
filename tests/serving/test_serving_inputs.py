"""Malformed requests to every exported signature, in TF Serving's session loader.

A scalar string (what REST's `"inputs": "hello"` sends) crashed the process, a matrix of
strings lost its rows, ids out of the vocab read zeros on a GPU. Each signature of the
pre-training export (`conftest.py`'s), a fine-tuned classifier's and a question
answerer's now answers InvalidArgument naming the input, and the same session then
serves a good request. The feeds go to `Session.run` in a fresh graph (the C++ run TF
Serving makes, with Grappler on), in one subprocess; a crash fails the test. (Python's
`Session.run` refuses a feed that misfits a placeholder's declared shape, which TF
Serving does not; the inputs are declared with unknown rank, so here, as there, every
feed reaches the graph.) `tf.saved_model.load`'s signatures get the same checks.
"""

import os
import pickle
import subprocess
import sys

import keras
import numpy as np
import pytest
from tensorflow.core.protobuf import saved_model_pb2

from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning.glue import specs as glue_specs
from electra_tf.model import encoder
from electra_tf.serving import export
from electra_tf.serving import export_qa
from tests import helpers

SEQ = helpers.SERVING_SEQ
GOOD = np.array([b"the cat sat", b""], dtype=object)
SCALAR = np.array(b"hello", dtype=object)
MATRIX = np.array([[b"the cat", b"sat"]], dtype=object)

_SCRIPT = """
import pickle, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops, as TF Serving links them
with open(sys.argv[1], "rb") as f:
    requests = pickle.load(f)

def answer(call):
    try:
        return "ok", {k: tuple(v.shape) for k, v in call().items()}
    except tf.errors.InvalidArgumentError as e:
        return "InvalidArgumentError", e.message

sessions, results = {}, {}
for label, (export_dir, signature, feeds) in requests.items():
    if label.startswith("eager"):  # tf.saved_model.load, as a Python client calls it
        function = tf.saved_model.load(export_dir).signatures[signature]
        results[label] = answer(lambda: function(**{k: tf.constant(v)
                                                    for k, v in feeds.items()}))
        continue
    if export_dir not in sessions:
        session = tf.compat.v1.Session(graph=tf.Graph())
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
        sessions[export_dir] = session, meta.signature_def
    session, signatures = sessions[export_dir]
    inputs, outputs = signatures[signature].inputs, signatures[signature].outputs
    results[label] = answer(lambda: session.run(
        {k: v.name for k, v in outputs.items()},
        {inputs[k].name: v for k, v in feeds.items()}))
with open(sys.argv[2], "wb") as f:
    pickle.dump(results, f)
"""


def _tiny_encoder(vocab):
    embeddings = encoder.Embeddings(vocabulary_size=vocab.size, embedding_size=16,
                                    max_sequence_length=32)
    return encoder.Encoder(embeddings, hidden_size=16, num_layers=1, num_heads=2,
                           intermediate_size=32)


def _ids(batch=1, length=SEQ, ids=5, mask=1, segments=0, **replace):
    feeds = {"input_ids": np.full([batch, length], ids, np.int32),
             "input_mask": np.full([batch, length], mask, np.int32),
             "segment_ids": np.full([batch, length], segments, np.int32)}
    return {**feeds, **replace}


def _requests(pretrained, classifier, qa, single, vocab_size):
    """{label: (export, signature, feeds)}, run in this order: each bad request, then a
    good one in the same session."""
    v = vocab_size
    return {
        "default_scalar": (pretrained, "serving_default", {"text": SCALAR}),
        "default_matrix": (pretrained, "serving_default", {"text": MATRIX}),
        "encode_scalar": (pretrained, "encode", {"text": SCALAR}),
        "encode_matrix": (pretrained, "encode", {"text": MATRIX}),
        "good_encode": (pretrained, "encode", {"text": GOOD}),
        "serving_pair_matrix": (pretrained, "serving_pair", {"text": GOOD, "text_pair": MATRIX}),
        "encode_pair_scalar": (pretrained, "encode_pair", {"text": SCALAR, "text_pair": GOOD}),
        "pair_scalar": (pretrained, "serving_pair", {"text": GOOD, "text_pair": SCALAR}),
        "pair_matrix": (pretrained, "encode_pair", {"text": MATRIX, "text_pair": GOOD}),
        "pair_lengths": (pretrained, "serving_pair", {"text": GOOD, "text_pair": GOOD[:1]}),
        "ids_vector": (pretrained, "serving_ids", _ids(input_ids=np.ones(SEQ, np.int32))),
        "ids_scalar": (pretrained, "encode_ids", _ids(input_ids=np.int32(3))),
        "ids_long": (pretrained, "serving_ids",
                     _ids(input_mask=np.ones([1, SEQ + 4], np.int32))),
        "ids_batches": (pretrained, "encode_ids",
                        _ids(segment_ids=np.zeros([2, SEQ], np.int32))),
        "ids_past_vocab": (pretrained, "serving_ids", _ids(ids=v)),
        "ids_negative": (pretrained, "encode_ids", _ids(ids=-1)),
        "mask_range": (pretrained, "serving_ids", _ids(mask=2)),
        "segment_range": (pretrained, "serving_ids", _ids(segments=2)),
        "good_text": (pretrained, "serving_default", {"text": GOOD}),
        "good_ids": (pretrained, "serving_ids", _ids(batch=2, ids=v - 1)),
        "good_pair": (pretrained, "serving_pair", {"text": GOOD, "text_pair": GOOD}),
        "good_encode_pair": (pretrained, "encode_pair", {"text": GOOD, "text_pair": GOOD}),
        "good_encode_ids": (pretrained, "encode_ids", _ids(batch=2)),
        "single_scalar": (single, "serving_default", {"text": SCALAR}),
        "single_matrix": (single, "serving_default", {"text": MATRIX}),
        "single_ids": (single, "serving_ids", _ids(segments=-1)),
        "single_good": (single, "serving_default", {"text": GOOD}),
        "classifier_scalar": (classifier, "serving_default",
                              {"text": SCALAR, "text_pair": GOOD}),
        "classifier_matrix": (classifier, "serving_default",
                              {"text": GOOD, "text_pair": MATRIX}),
        "classifier_ids": (classifier, "serving_ids", _ids(ids=v + 100)),
        "classifier_good": (classifier, "serving_default", {"text": GOOD, "text_pair": GOOD}),
        "qa_scalar": (qa, "serving_default", {"question": SCALAR, "context": GOOD}),
        "qa_matrix": (qa, "serving_default", {"question": GOOD, "context": MATRIX}),
        "qa_lengths": (qa, "serving_default", {"question": GOOD[:1], "context": GOOD}),
        "qa_good": (qa, "serving_default", {"question": GOOD, "context": GOOD}),
        "eager_scalar": (pretrained, "serving_default", {"text": SCALAR}),
    }


@pytest.fixture(scope="module")
def answers(run, exported, tmp_path_factory):
    """The vocab, the three exports and `{label: ("ok", {output: shape}) or
    ("InvalidArgumentError", message)}` for every request of `_requests`."""
    root = tmp_path_factory.mktemp("inputs")
    vocab = run["vocab"]
    keras.utils.set_random_seed(0)
    classifier = model_lib.Classifier(_tiny_encoder(vocab), num_labels=2)
    qa = model_lib.QuestionAnswerer(_tiny_encoder(vocab), beam_size=3, seed=0)
    for model in (classifier, qa):  # built by a call, as fine-tuning builds them
        model({k: np.zeros([1, SEQ], np.int32) for k in export.ID_INPUTS})
    classifier_dir = export.export_classifier(classifier, vocab, glue_specs.TASKS["mrpc"], SEQ,
                                              str(root / "mrpc" / "1"))
    qa_dir = export_qa.export_question_answerer(
        qa, vocab, str(root / "qa" / "1"), max_seq_length=24, lower_case=True,
        doc_stride=6, max_query_length=8, max_answer_length=4)
    # A task of one text column (SST-2) takes `text` alone.
    single_dir = export.export_classifier(classifier, vocab, glue_specs.TASKS["sst2"], SEQ,
                                          str(root / "sst2" / "1"))
    requests = _requests(exported, classifier_dir, qa_dir, single_dir, vocab.size)
    with open(root / "requests.pkl", "wb") as f:
        pickle.dump(requests, f)
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(root / "requests.pkl"), str(root / "out.pkl")],
        capture_output=True, text=True, timeout=300, env=helpers.child_env())
    assert result.returncode == 0, result.stderr[-3000:]  # -11: the server went down
    with open(root / "out.pkl", "rb") as f:
        return {"vocab": vocab, "exports": (exported, classifier_dir, qa_dir, single_dir),
                "results": pickle.load(f)}


def _error(answers, label):
    kind, message = answers["results"][label]
    assert kind == "InvalidArgumentError", (label, message)
    return message


@pytest.mark.parametrize("label, message", [
    ("default_scalar", "text must be a vector of strings, shape [batch]; got shape []"),
    ("default_matrix", "text must be a vector of strings, shape [batch]; got shape [1 2]"),
    ("encode_scalar", "text must be a vector of strings, shape [batch]; got shape []"),
    ("encode_matrix", "text must be a vector of strings, shape [batch]; got shape [1 2]"),
    ("serving_pair_matrix",
     "text_pair must be a vector of strings, shape [batch]; got shape [1 2]"),
    ("encode_pair_scalar", "text must be a vector of strings, shape [batch]; got shape []"),
    ("single_scalar", "text must be a vector of strings, shape [batch]; got shape []"),
    ("single_matrix", "text must be a vector of strings, shape [batch]; got shape [1 2]"),
    ("pair_scalar", "text_pair must be a vector of strings, shape [batch]; got shape []"),
    ("pair_matrix", "text must be a vector of strings, shape [batch]; got shape [1 2]"),
    ("pair_lengths", "text and text_pair must have the same batch size; got [2 1]"),
    ("classifier_scalar", "text must be a vector of strings, shape [batch]; got shape []"),
    ("classifier_matrix",
     "text_pair must be a vector of strings, shape [batch]; got shape [1 2]"),
    ("qa_scalar", "question must be a vector of strings, shape [batch]; got shape []"),
    ("qa_matrix", "context must be a vector of strings, shape [batch]; got shape [1 2]"),
    ("qa_lengths", "question and context must have the same batch size; got [1 2]"),
    ("eager_scalar", "text must be a vector of strings, shape [batch]; got shape []"),
])
def test_text_that_is_not_a_vector_is_refused_naming_the_input(answers, label, message):
    assert message in _error(answers, label)


def test_ids_of_the_wrong_shape_or_range_are_refused_naming_the_input(answers):
    v = answers["vocab"].size
    expected = {
        "ids_vector": f"input_ids must be an int32 matrix of shape [batch, {SEQ}]; got "
                      f"shape [{SEQ}]",
        "ids_scalar": f"input_ids must be an int32 matrix of shape [batch, {SEQ}]; got "
                      "shape []",
        "ids_long": f"input_mask must be an int32 matrix of shape [batch, {SEQ}]; got "
                    f"shape [1 {SEQ + 4}]",
        "ids_batches": "input_ids, input_mask, segment_ids must have the same shape; got "
                       "batch sizes [1 1 2]",
        "ids_past_vocab": f"input_ids must hold token ids in [0, {v}); got values from {v} "
                          f"to {v}",
        "ids_negative": f"input_ids must hold token ids in [0, {v}); got values from -1",
        "mask_range": "input_mask must hold 0 or 1; got values from 2 to 2",
        "segment_range": "segment_ids must hold 0 or 1; got values from 2 to 2",
        "classifier_ids": f"input_ids must hold token ids in [0, {v}); got values from "
                          f"{v + 100}",
        "single_ids": "segment_ids must hold 0 or 1; got values from -1 to -1",
    }
    for label, message in expected.items():
        assert message in _error(answers, label), label


def test_the_same_session_serves_good_requests_after_the_bad_ones(answers):
    results = answers["results"]
    assert results["good_text"] == ("ok", {"replaced_probability": (2, SEQ),
                                           "token_ids": (2, SEQ), "input_mask": (2, SEQ),
                                           "tokens": (2, SEQ)})
    assert results["good_ids"][0] == "ok"
    assert results["good_ids"][1]["replaced_probability"] == (2, SEQ)
    assert results["classifier_good"] == ("ok", {"probabilities": (2, 2), "label": (2,)})
    assert results["single_good"] == ("ok", {"probabilities": (2, 2), "label": (2,)})
    for label in ("good_encode", "good_pair", "good_encode_pair", "good_encode_ids"):
        assert results[label][0] == "ok", (label, results[label])
        assert all(shape[0] == 2 for shape in results[label][1].values()), label
    assert results["qa_good"] == ("ok", {"answer": (2,), "start": (2,), "end": (2,),
                                         "score": (2,)})


def test_inputs_are_declared_with_unknown_rank(answers):
    """The checks survive Grappler only on inputs of unknown rank: a declared [None]
    lets it fold the rank check away, and a scalar reaches the tokenizer."""
    for export_dir in answers["exports"]:
        proto = saved_model_pb2.SavedModel()
        with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
        for name, signature in proto.meta_graphs[0].signature_def.items():
            for key, info in signature.inputs.items():
                assert info.tensor_shape.unknown_rank, (export_dir, name, key)
