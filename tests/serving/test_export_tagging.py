"""The tagging SavedModel on an untrained tiny tagger: its in-graph words, windows and
tags agree with the fine-tuning's evaluation (`TaggingTask.predicted_tags`), its
entities' character spans are the input's substrings, malformed requests are refused,
and TF Serving's session loader runs both signatures."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from configs import finetune as finetune_configs  # pylint: disable=g-bad-import-order
from electra_tf.finetuning import tasks
from electra_tf.finetuning.tagging import conll
from electra_tf.model import encoder
from electra_tf.serving import export_tagging
from tests import helpers

SEQ, STRIDE = 12, 4
TEXTS = ["the big cat sat on the mat , then the dog ran under a tree . " * 3,  # windows
         "", "Théâtre : 北京 the big mat . Москва and العربية , the happy dog .",
         "  red\tcats   ran\n", "it", "北京\u3000市 ,\u00a0Zürich  Straße . 東京タワー"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    vocab = helpers.write_vocab(str(tmp_path_factory.mktemp("vocab")))
    config = finetune_configs.get_config("tagging")
    config.data.max_seq_length, config.data.stride = SEQ, STRIDE
    config.model.entity_types = "LOC,ORG,PER"
    config.data.scheme = "iob2"   # as `TaggingTask.read` sets "auto" from the files
    task = tasks.get("tagging", config)
    keras.utils.set_random_seed(0)  # the same weights, hence the same tags, every run
    embeddings = encoder.Embeddings(vocabulary_size=vocab.size, embedding_size=16)
    enc = encoder.Encoder(embeddings, hidden_size=16, num_layers=1, num_heads=2,
                          intermediate_size=32)
    model = task.build_model(enc)
    model({"input_ids": np.zeros([1, SEQ], "int32"), "input_mask": np.ones([1, SEQ], "int32"),
           "segment_ids": np.zeros([1, SEQ], "int32")})  # built, as the loop builds it
    output = str(tmp_path_factory.mktemp("models") / "tagger" / "1")
    task.export(model, vocab, SEQ, output, lower_case=True)
    return vocab, task, model, output


def _text(values):
    return [[v.decode("utf-8") for v in row] for row in values]


def test_text_gives_entities_whose_spans_are_the_inputs_characters(setup):
    vocab, task, model, output = setup
    served = tf.saved_model.load(output).signatures["serving_default"](
        text=tf.constant(TEXTS))
    words, tags = _text(served["words"].numpy()), _text(served["tags"].numpy())
    # Every word's [start, end) in characters, by the graph's own functions: each is the
    # input's substring (whatever the head emits), and an entity runs from its first
    # word's start to its last word's end.
    tagging = export_tagging.Tagging(model, vocab, SEQ, True, STRIDE, task.labels, "iob2")
    text_tensor = tf.constant(TEXTS)
    split, byte_start, byte_end = export_tagging.split_words(
        tagging.windows.tokenizer, tagging.is_continuation, text_tensor)
    sentence = split.value_rowids()
    char_start, char_end = (export_tagging.to_chars(text_tensor, sentence, b).numpy()
                            for b in (byte_start, byte_end))
    first_word = np.cumsum([0] + [len(r) for r in _text(split.to_list())])
    for i, text in enumerate(TEXTS):
        row_words = [w for w in words[i] if w]
        at = range(first_word[i], first_word[i + 1])
        assert [text[char_start[j]:char_end[j]] for j in at] == row_words, text
    assert first_word[-1] > 40
    total = 0
    for i, text in enumerate(TEXTS):
        row_words = [w for w in words[i] if w]
        row_tags = tags[i][:len(row_words)]
        assert tags[i][len(row_words):] == [""] * (len(tags[i]) - len(row_words))
        # Words: whitespace and punctuation split, the input's own characters.
        assert "".join(row_words) == "".join(text.split())
        spans = conll.spans(row_tags)
        n = int(served["num_entities"][i])
        assert n == len(spans) and conll.first_invalid(row_tags, "iob2") is None
        for e in range(n):
            start, end = int(served["entity_start"][i, e]), int(served["entity_end"][i, e])
            entity = served["entity_text"][i, e].numpy().decode("utf-8")
            assert text[start:end] == entity and entity.strip() == entity and entity
            assert (start, end) == (char_start[first_word[i] + spans[e].start],
                                    char_end[first_word[i] + spans[e].end - 1])
            assert served["entity_type"][i, e].numpy().decode() == spans[e].type
            assert 0 < served["entity_score"][i, e] <= 1
            # The entity's text runs from its first word to its last.
            assert entity.startswith(row_words[spans[e].start])
            assert entity.endswith(row_words[spans[e].end - 1])
        total += n
    assert total >= 5  # an untrained head tags plenty: the spans were checked
    assert served["entity_start"].shape[1] == max(int(x) for x in served["num_entities"])


def test_words_signature_tags_as_the_finetuning_evaluation_does(setup):
    """The served tags of pre-split words equal `TaggingTask.predicted_tags` on the
    host's windows of the same model's logits (the dev set's predictions.txt)."""
    vocab, task, model, output = setup
    sentences = [t.split() for t in TEXTS if t.split()]
    gold = [["O"] * len(s) for s in sentences]
    rows = task._rows(conll.Sentences(sentences, gold, [1] * len(sentences), "test"),  # pylint: disable=protected-access
                      export_tagging.Tagging(model, vocab, SEQ, True, STRIDE, task.labels,
                                             "iob2").windows)
    logits = model({k: rows.columns[k] for k in ("input_ids", "input_mask", "segment_ids")},
                   training=False).numpy()
    expected = task.predicted_tags(rows, logits)
    width = max(map(len, sentences))
    padded = np.array([s + [""] * (width - len(s)) for s in sentences], object)
    served = tf.saved_model.load(output).signatures["words"](words=tf.constant(padded))
    tags = _text(served["tags"].numpy())
    assert [row[:len(s)] for row, s in zip(tags, sentences)] == expected
    assert all(row[len(s):] == [""] * (width - len(s)) for row, s in zip(tags, sentences))
    scores = served["tag_score"].numpy()
    assert np.all((scores > 0) == (padded != ""))


def test_malformed_requests_are_refused_and_serving_runs_both_signatures(setup, tmp_path):
    _, _, _, output = setup
    loaded = tf.saved_model.load(output)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"text must be a vector of strings, shape \[batch\]"):
        loaded.signatures["serving_default"](text=tf.constant("one string"))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"words must be a matrix of strings, shape \[batch, words\]"):
        loaded.signatures["words"](words=tf.constant(["a", "b"]))
    got = helpers.session_run(output, {
        "text": ("serving_default", {"text": np.array(TEXTS, object)}),
        "words": ("words", {"words": np.array([["the", "cat", ""], ["Москва", "", ""]],
                                              object)})}, str(tmp_path))
    direct = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    for key in ("entity_start", "entity_end", "num_entities", "tags"):
        np.testing.assert_array_equal(got["text"][key], direct[key].numpy(), key)
    assert got["words"]["tags"].shape == (2, 3) and got["words"]["tags"][1, 1] == b""
    # An empty batch, and a row of padding only, answer with nothing.
    empty = loaded.signatures["serving_default"](text=tf.constant([], tf.string))
    assert empty["num_entities"].shape == [0] and empty["entity_start"].shape == [0, 0]
    padding = loaded.signatures["words"](words=tf.constant([["", ""]]))
    assert padding["tags"].numpy().tolist() == [[b"", b""]]


def test_byte_offsets_become_character_offsets_in_every_text():
    """`to_chars` against Python's own count, offsets of every text of a batch (one
    empty), at character boundaries and each text's end, in any order."""
    texts = TEXTS + ["🙂 a\u0301b ﬁ İ\u200bz"]
    sentence, offsets, expected = [], [], []
    for i, text in enumerate(texts):
        for chars in range(len(text) + 1):
            sentence.append(i)
            offsets.append(len(text[:chars].encode("utf-8")))
            expected.append(chars)
    order = np.random.default_rng(0).permutation(len(offsets))
    got = export_tagging.to_chars(tf.constant(texts), tf.constant(np.array(sentence)[order]),
                                  tf.constant(np.array(offsets, np.int64)[order]))
    assert got.dtype == tf.int32
    np.testing.assert_array_equal(got.numpy(), np.array(expected)[order])
