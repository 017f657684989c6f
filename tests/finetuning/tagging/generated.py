"""A generated tagging set: entities drawn from lists, placed in sentence templates, so
that every sentence's spans are known. Its words are `helpers.WORDS` (the tiny
pre-trained runs' vocab), joined by single spaces; the entity types are PER, LOC, ORG."""

import gzip
import os
import random

from electra_tf.finetuning.tagging import conll

ENTITIES = {"PER": ("cat", "big cat", "small red dog", "dog"),
            "LOC": ("house", "blue tree", "big red house", "mat"),
            "ORG": ("log", "sad log", "happy tree house")}
TEMPLATES = ("{PER} sat on the {LOC} .",
             "then {PER} ran under the {LOC} and it was happy .",
             "the {ORG} was very sad , then {PER} ran .",
             "{PER} and {PER} sat under the {LOC} .",
             "it was {ORG} .",
             "the {LOC} was small and {ORG} was on it .")


def sentence(rng) -> tuple[list[str], list[conll.Span]]:
    """(words, spans) of one sentence of a random template."""
    words, spans = [], []
    for part in rng.choice(TEMPLATES).split():
        if part.startswith("{"):
            kind = part[1:-1]
            entity = rng.choice(ENTITIES[kind]).split()
            spans.append(conll.Span(kind, len(words), len(words) + len(entity)))
            words += entity
        else:
            words.append(part)
    return words, spans


def sentences(n: int, seed: int, long_every: int = 0):
    """`n` sentences; with `long_every`, every such one is several joined (for windows)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words, spans = sentence(rng)
        for _ in range(6 if long_every and i % long_every == 0 else 0):
            more, more_spans = sentence(rng)
            spans += [conll.Span(s.type, s.start + len(words), s.end + len(words))
                      for s in more_spans]
            words += more
        out.append((words, spans))
    return out


def write(path: str, items, scheme: str = "iob2", columns: int = 2, docstart=True):
    """A CoNLL file (gzipped if `path` ends in .gz): `columns` per row, the tag last (the
    columns between: a POS tag and a chunk tag, as CoNLL-2003's files have them)."""
    lines = ["-DOCSTART- -X- O", ""] if docstart else []
    for words, spans in items:
        for word, tag in zip(words, conll.tags(spans, len(words), scheme)):
            lines.append(" ".join([word] + ["NN", "O"][:columns - 2] + [tag]))
        lines.append("")
    data = ("\n".join(lines) + "\n").encode("utf-8")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(data)
    return path


def write_set(directory, num_train: int, num_dev: int, scheme: str = "iob2",
              num_test: int = 0, names=("train.txt", "dev.txt", "test.txt")) -> str:
    """train/dev(/test) files of the generated set in `directory`; returns it."""
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    for name, n, seed in zip(names, (num_train, num_dev, num_test), (0, 1, 2)):
        if n:
            write(os.path.join(directory, name), sentences(n, seed, long_every=10), scheme)
    return directory
