"""A BERT-format vocab file and the tf.text tokenizer built on it.

Any BERT `vocab.txt` works (one token per line, the line number is the id, `##` marks
a word continuation), whether learned by `tools/build_vocab.py` (special tokens at ids
0-4) or released with BERT/ELECTRA (`[PAD]`=0, `[UNK]`=100, `[CLS]`=101, ...): special
tokens are looked up by name, never assumed at fixed ids.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w").write("\\n".join(SPECIAL_TOKENS + ["hello", "world"]) + "\\n")
>>> vocab = Vocab.load(path)
>>> vocab.size, vocab.mask_id, vocab.special_ids
(7, 4, (0, 2, 3))
>>> make_tokenizer(vocab).tokenize(["Hello WORLD"]).to_list()
[[5, 6]]
"""

import dataclasses
import hashlib

import tensorflow as tf
import tensorflow_text as text

from electra_tf import errors
from electra_tf.text import special_tokens

PAD, UNK, CLS, SEP, MASK = (special_tokens.PAD, special_tokens.UNK, special_tokens.CLS,
                            special_tokens.SEP, special_tokens.MASK)
SPECIAL_TOKENS = special_tokens.SPECIAL_TOKENS


# A vocab for lower-cased text has no token with a capital; a few strays are tolerated,
# more (at least this many, and this share of the tokens with cased letters) mean it
# was made from cased text. A vocab for cased text with none at all, past this many
# tokens with cased letters, was most likely lower-cased.
CASED_MIN_CAPITALISED = 10
CASED_MIN_SHARE = 0.02
UNCASED_MIN_TOKENS = 100


class VocabError(errors.UserError):
    """A vocab file that cannot be used: the message names the file and the problem."""


@dataclasses.dataclass(frozen=True)
class Vocab:
    """The tokens of a vocab file, the ids of the special tokens and the file's hash."""

    path: str
    tokens: tuple[str, ...]
    sha256: str

    @classmethod
    def load(cls, path: str) -> "Vocab":
        if tf.io.gfile.isdir(path):
            raise VocabError(f"{path}: a directory, not a vocab file (its vocab.txt?)")
        try:
            with tf.io.gfile.GFile(path, "rb") as f:
                data = f.read()
        except (tf.errors.OpError, OSError) as e:
            reason = getattr(e, "message", None) or str(e)
            raise VocabError(f"{path}: cannot read the vocab file ({reason})") from e
        try:
            # Only "\n" separates tokens (str.splitlines would also split at \u2028 etc.).
            lines = data.decode("utf-8").split("\n")
            if not lines[-1].strip(" \t\r"):
                lines.pop()  # the final newline
            tokens = tuple(line.strip(" \t\r") for line in lines)
        except UnicodeDecodeError as e:
            raise VocabError(f"{path}: not UTF-8 at byte {e.start}") from e
        vocab = cls(path=path, tokens=tokens, sha256=hashlib.sha256(data).hexdigest())
        vocab._validate()
        return vocab

    def _validate(self):
        missing = [t for t in SPECIAL_TOKENS if t not in self.tokens]
        if missing:
            raise VocabError(f"{self.path}: the vocab lacks the special token(s) "
                             f"{', '.join(missing)}; every vocab needs "
                             f"{' '.join(SPECIAL_TOKENS)}")
        for i, token in enumerate(self.tokens):
            if not token:
                raise VocabError(f"{self.path}: line {i + 1} is empty; a vocab has one "
                                 "token per line")
        seen = {}
        for i, token in enumerate(self.tokens):
            if token in seen:
                raise VocabError(f"{self.path}: line {i + 1} repeats the token {token!r} "
                                 f"of line {seen[token] + 1}")
            seen[token] = i

    @property
    def size(self) -> int:
        return len(self.tokens)

    def id(self, token: str) -> int:
        return self.tokens.index(token)

    @property
    def pad_id(self) -> int:
        return self.id(PAD)

    @property
    def unk_id(self) -> int:
        return self.id(UNK)

    @property
    def cls_id(self) -> int:
        return self.id(CLS)

    @property
    def sep_id(self) -> int:
        return self.id(SEP)

    @property
    def mask_id(self) -> int:
        return self.id(MASK)

    @property
    def special_ids(self) -> tuple[int, int, int]:
        """Ids that masking never selects: `[PAD]`, `[CLS]`, `[SEP]`."""
        return (self.pad_id, self.cls_id, self.sep_id)

    @property
    def continuation_ids(self) -> tuple[int, ...]:
        """Ids of the `##` pieces, which continue a word (whole-word masking)."""
        return tuple(i for i, token in enumerate(self.tokens) if token.startswith("##"))


def make_tokenizer(vocab: Vocab, lower_case: bool = True) -> text.FastBertTokenizer:
    """BERT tokenization (normalize, split on whitespace and punctuation, WordPiece).

    `lower_case=True` is BERT-uncased: NFD, lower-case, strip accents. Ids are int32.
    """
    return text.FastBertTokenizer(
        vocab=list(vocab.tokens),
        suffix_indicator="##",
        max_bytes_per_word=100,
        token_out_type=tf.int32,
        unknown_token=UNK,
        no_pretokenization=False,
        support_detokenization=False,
        lower_case_nfd_strip_accents=lower_case,
    )


def check_lower_case(vocab: Vocab, lower_case: bool) -> str | None:
    """Raises `VocabError` if `lower_case` lower-cases text for a cased vocab (its tokens
    with capitals could never match); returns a warning if `lower_case` is off for a
    vocab without a capital (right only for text lower-cased beforehand), else None.
    Caseless scripts (Chinese, Japanese, Thai, ...) pass either way.

    Special tokens (`[CLS]`, `[unused0]`) are left out, and `##` is not part of a token.
    """
    words = [t[2:] if t.startswith("##") else t for t in vocab.tokens
             if not (len(t) > 2 and t.startswith("[") and t.endswith("]"))]
    # A letter of a script that capitalises words (not Georgian, whose capitals are
    # an all-caps style).
    cased = [w for w in words if w.lower() != w.title()]
    with_capitals = [w for w in cased if w != w.lower()]
    # What lower-cased (case-folded) text never matches: Cherokee folds to capitals.
    capitalised = sum(w != w.casefold() for w in with_capitals)
    if lower_case:
        if capitalised >= max(CASED_MIN_CAPITALISED, CASED_MIN_SHARE * len(cased)):
            raise VocabError(
                f"{vocab.path}: a cased vocab ({capitalised:,} of its tokens have capitals, "
                "which lower-cased text never matches); pass --nolower_case to match it")
    elif not with_capitals and len(cased) >= UNCASED_MIN_TOKENS:
        return (f"{vocab.path}: no token has a capital (a lower-cased vocab?), yet "
                "--nolower_case keeps the text's capitals and accents: words with them "
                "become [UNK] unless the text is lower-cased already; if build_vocab.py "
                "made it without --nolower_case, leave --nolower_case out")
    return None
