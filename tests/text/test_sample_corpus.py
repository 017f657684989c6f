"""Tests of `electra_tf.text.sample_corpus`: documentation text to sentences, and the
standard library's prose as a corpus."""

import pytest

from electra_tf.text import corpus
from electra_tf.text import sample_corpus


# ---------------------------------------------------------------------------- sentences_from_text


def test_sentences_from_text_drops_doctest_paragraphs():
    text = ("Intro text here.\n\n>>> x = 1\n>>> print(x)\n1\n\n"
            "... continued\n\nAfter the example.")
    assert sample_corpus.sentences_from_text(text) == ["Intro text here.", "After the example."]


def test_sentences_from_text_drops_indented_literal_blocks():
    text = ("An example::\n\n    for i in range(3):\n        print(i)\n\n"
            "    More literal text. It is code.\n\nBack to prose.")
    assert sample_corpus.sentences_from_text(text) == ["An example::", "Back to prose."]


def test_sentences_from_text_drops_rst_rules_but_keeps_titles():
    text = ("The title\n=========\n\nBody text is here.\n\n----\n\nSubtitle\n~~~~~~~~\n"
            "More body.\n\n*****\n\nEnd.")
    sentences = sample_corpus.sentences_from_text(text)
    assert sentences == ["The title", "Body text is here.", "Subtitle", "More body.", "End."]
    assert not any(ch in s for s in sentences for ch in "=~*-")


def test_sentences_from_text_drops_tables_and_shell_lines():
    text = ("+-----+-----+\n| a   | b   |\n+-----+-----+\n\n$ python run.py\n\n"
            "| line block\n\nReal prose.")
    assert sample_corpus.sentences_from_text(text) == ["Real prose."]


def test_sentences_from_text_joins_wrapped_lines():
    text = "This sentence is\nwrapped over\n   three lines. The next one\nis too.\n"
    assert sample_corpus.sentences_from_text(text) == [
        "This sentence is wrapped over three lines.", "The next one is too."]


def test_sentences_from_text_paragraphs_do_not_merge():
    # No period at the end of the first paragraph: the blank line still separates them.
    assert sample_corpus.sentences_from_text("First paragraph\n\nSecond paragraph.") == [
        "First paragraph", "Second paragraph."]


def test_sentences_from_text_expands_tabs_and_handles_empty_text():
    assert sample_corpus.sentences_from_text("") == []
    assert sample_corpus.sentences_from_text("\n\n   \n") == []
    # A tab-indented block is a literal block too.
    assert sample_corpus.sentences_from_text("Prose.\n\n\tcode()\n\tmore()") == ["Prose."]


# ---------------------------------------------------------------------------- sample corpus


@pytest.fixture(scope="module")
def stdlib_docs():
    return list(sample_corpus.stdlib_documents())


def test_stdlib_documents_are_many_documents_of_sentences(stdlib_docs):
    assert len(stdlib_docs) > 300
    assert sum(len(doc) for doc in stdlib_docs) > 5000
    for doc in stdlib_docs:
        assert doc, "an empty document was yielded"
        for sentence in doc:
            assert isinstance(sentence, str)
            assert sentence == sentence.strip() and sentence
            assert "\n" not in sentence
            assert corpus._LETTER.search(sentence)


def test_stdlib_documents_are_prose_not_code(stdlib_docs):
    sentences = [s for doc in stdlib_docs for s in doc]
    assert not [s for s in sentences if s.startswith(">>>")]
    # English prose: "the" is everywhere.
    with_the = sum(1 for s in sentences if " the " in f" {s.lower()} ")
    assert with_the > len(sentences) / 4


def test_stdlib_documents_include_the_pydoc_assert_topic(stdlib_docs):
    hits = [(i, s) for i, doc in enumerate(stdlib_docs) for s in doc
            if "debugging assertions" in s]
    assert hits
    index, sentence = hits[0]
    assert sentence.startswith("Assert statements are a convenient way")
    # The grammar line of that topic is an indented literal block: dropped.
    assert not any("assert_stmt ::=" in s for s in stdlib_docs[index])
