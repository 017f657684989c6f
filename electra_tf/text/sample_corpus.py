"""The built-in sample corpus: English prose that every Python installation carries (the
`pydoc_data` topics and the standard library's docstrings, read from the source files
with `ast`, never imported), cleaned of code, doctests, literal blocks and tables into
sentences (`corpus.split_sentences`). `tools/build_sample_corpus.py` writes it in the
corpus format; the quickstart and the benchmark's real-data mode read it.

>>> sentences_from_text("Hello world.  It works!\\n\\n>>> print(1)\\n1")
['Hello world.', 'It works!']
"""

import ast
import os
import re
import sysconfig
from typing import Iterator

from electra_tf.text import corpus

_RULE_LINE = re.compile(r"^\s*([=*\-~^#+_.])\1{2,}\s*$")  # reST heading underlines


def _is_prose(paragraph_lines: list[str]) -> bool:
    """False for code examples, doctests, literal blocks and tables."""
    first = paragraph_lines[0]
    if first.startswith((">>>", "...", "$ ", "+--", "+==", "|")):
        return False
    # reST literal blocks and examples are indented below their introducing paragraph.
    if all(line[:1].isspace() for line in paragraph_lines):
        return False
    return True


def sentences_from_text(text: str) -> list[str]:
    """Cleans documentation text (reST or plain) into a list of sentences."""
    sentences = []
    paragraph: list[str] = []

    def flush():
        if paragraph and _is_prose(paragraph):
            # A doctest can follow prose without a blank line: its lines are no sentence.
            sentences.extend(s for s in corpus.split_sentences(" ".join(paragraph))
                             if not s.startswith((">>>", "...")))
        paragraph.clear()

    for line in text.expandtabs().splitlines():
        if not line.strip() or _RULE_LINE.match(line):
            flush()
        else:
            paragraph.append(line.rstrip())
    flush()
    return sentences


def _stdlib_sources() -> list[str]:
    """The standard library's own .py files, without tests and installed packages."""
    root = sysconfig.get_paths()["stdlib"]
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        paths.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    return paths


def _module_docstrings(path: str) -> list[str]:
    """Docstrings of a module, its classes and functions, in source order."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []  # a few stdlib files are deliberately broken test data
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = [(getattr(n, "lineno", 0), ast.get_docstring(n, clean=True))
            for n in ast.walk(tree) if isinstance(n, nodes)]
    return [doc for _, doc in sorted(docs, key=lambda d: d[0]) if doc]


def stdlib_documents() -> Iterator[list[str]]:
    """Yields the sample corpus, one document (a list of sentences) at a time.

    Each `pydoc_data` topic is one document; each standard-library module (its own, its
    classes' and its functions' docstrings) is another. About 2 MB of English text.
    """
    from pydoc_data import topics  # pylint: disable=g-import-not-at-top

    for name in sorted(topics.topics):
        document = sentences_from_text(topics.topics[name])
        if document:
            yield document
    for path in _stdlib_sources():
        document = [s for doc in _module_docstrings(path) for s in sentences_from_text(doc)]
        if document:
            yield document
