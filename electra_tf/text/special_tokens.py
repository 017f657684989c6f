"""The special tokens of a BERT-format vocab, by name (`tokenizer.Vocab` looks each up),
in the order `tools/build_vocab.py` writes them first. Here, without TensorFlow, so that a
tool's flags are checked against them before TF loads."""

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = [PAD, UNK, CLS, SEP, MASK]
