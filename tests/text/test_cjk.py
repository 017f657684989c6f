"""Chinese, Japanese and mixed-script text through the whole path: sentence breaking,
vocab learning, data creation, masking, and the tokenization serving runs in the graph."""

import json
import os

import numpy as np
import tensorflow as tf

from electra_tf.data import examples
from electra_tf.data import masking
from electra_tf.data import pipeline
from electra_tf.data import writer
from electra_tf.text import corpus
from electra_tf.text import packer as packer_lib
from electra_tf.text import tokenizer
from electra_tf.text import vocab as vocab_lib

DOCUMENTS = [
    "今天天气很好。我们去公园吧！你来吗？好的，我们走吧。",
    "東京は日本の首都です。人口は約1400万人です。「本当ですか？」はい。",
    "ELECTRA 是一种预训练方法。It detects replaced tokens. 置き換えられたトークンを見つけます。",
]


def test_cjk_and_mixed_text_from_sentences_to_served_tokens(tmp_path):
    # Sentences: one per line, as TFDS documents are split (corpus.split_sentences).
    lines = [s for d in DOCUMENTS * 20 for s in corpus.split_sentences(d) + [""]]
    assert "我们去公园吧！" in lines and "「本当ですか？」" in lines
    assert "It detects replaced tokens." in lines
    path = tmp_path / "corpus.txt"
    corpus.write_corpus(lines, str(path))

    # Vocab: BERT's pre-tokenizer splits CJK ideographs apart, so each is a token.
    tokens = vocab_lib.learn_vocab([l for l in lines if l], vocab_size=200)
    vocab_lib.write_vocab(tokens, str(tmp_path / "vocab.txt"))
    vocab = tokenizer.Vocab.load(str(tmp_path / "vocab.txt"))
    for char in "天气東京预训练首都":
        assert char in vocab.tokens, char

    # Data: no [UNK] where the vocab has every character; nothing cut silently.
    out = str(tmp_path / "data")
    writer.write_pretraining_data(corpus.open_corpus(str(path)), vocab, out,
                                  max_seq_length=32, log=lambda _: None)
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    files = pipeline.resolve_files(out, 32, vocab)
    records = next(iter(tf.data.TFRecordDataset(files).batch(1000)))
    ids = examples.parse(records, 32)["input_ids"].numpy()
    real = ids[ids != vocab.pad_id]
    assert vocab.unk_id not in real
    assert manifest["num_tokens"] + manifest["truncated_tokens"] == sum(
        len(t) for t in tokenizer.make_tokenizer(vocab).tokenize(
            [l for l in lines if l]).to_list())

    # Masking picks CJK tokens like any other and keeps every tensor's shape.
    batch = next(iter(pipeline.pretraining_dataset(
        files, 8, 32, pipeline.masking_config_for(vocab, 32), is_training=False, seed=0)))
    chosen = batch["masked_lm_ids"].numpy()[batch["masked_lm_weights"].numpy() > 0]
    assert any("\u3040" <= vocab.tokens[i] <= "\u9fff" for i in chosen)
    assert batch["masked_input_ids"].shape == [8, 32]
    assert masking.max_predictions_per_seq(0.15, 32) == batch["masked_lm_ids"].shape[1]

    # Whole-word masking: no CJK character comes out as a `##` piece, so each is a word
    # of its own (docs/data.md says so: word-level masking of Chinese needs a segmenter).
    emitted = tokenizer.make_tokenizer(vocab).tokenize(DOCUMENTS).flat_values.numpy()
    cjk = {i for i in emitted if "\u3040" <= vocab.tokens[i].removeprefix("##") <= "\u9fff"}
    assert cjk and not cjk & set(vocab.continuation_ids)

    # Serving tokenizes in the graph as the data was tokenized.
    packer = packer_lib.TextPacker(vocab, 32, lower_case=True)
    ids, mask, _ = packer.pack(tf.constant(["東京は日本の首都です。Tokens!"]))
    served = [t.decode() for t in packer.wordpiece_strings(ids, mask).numpy()[0] if t]
    assert served[:8] == ["[CLS]", "東", "京", "は", "日", "本", "の", "首"]
    assert served[-1] == "[SEP]" and "[UNK]" not in served[:-3]
    np.testing.assert_array_equal(
        ids.numpy()[0, 1:11],
        tokenizer.make_tokenizer(vocab).tokenize(["東京は日本の首都です。"]).to_list()[0])
