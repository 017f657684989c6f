"""Tests of `electra_tf.finetuning.glue`'s specs and data: task specs, GLUE's TSV layouts,
bad input, TFDS."""

import dataclasses
import os
import shutil
from unittest import mock

import numpy as np
import pytest

from configs import finetune as finetune_configs  # pylint: disable=g-bad-import-order
from electra_tf import errors
from electra_tf.finetuning import hparams
from electra_tf.finetuning.glue import data as glue_data
from electra_tf.finetuning.glue import metrics
from electra_tf.finetuning.glue import specs
from electra_tf.model import sizes


def _write(path, lines, encoding="utf-8", end="\n") -> str:
    """A TSV file from rows (lists of columns) or raw lines (str)."""
    text = "".join(("\t".join(line) if isinstance(line, list) else line) + end
                   for line in lines)
    with open(path, "wb") as f:
        f.write(text.encode(encoding))
    return str(path)


# GLUE's real header lines; the rows are ours.
_MNLI_TRAIN_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                      "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                      "sentence1", "sentence2", "label1", "gold_label"]
_MNLI_DEV_HEADER = _MNLI_TRAIN_HEADER[:-1] + ["label2", "label3", "label4", "label5",
                                              "gold_label"]
_STSB_HEADER = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                "sentence1", "sentence2", "score"]


def _mnli_row(i, premise, hypothesis, label, dev=False):
    labels = [label] * (5 if dev else 1)
    return [str(i), "31193", f"{i}e", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)",
            premise, hypothesis] + labels + [label]


# task → (rows, expected text_a, expected text_b, expected labels)
_LAYOUTS = {
    "cola": ([["gj04", "1", "", "The cat sat on the mat ."],
              ["gj04", "0", "*", "Mat the on sat cat the ."]],
             ["The cat sat on the mat .", "Mat the on sat cat the ."], None, [1, 0]),
    "sst2": ([["sentence", "label"],
              ["a \"warm , funny film ", "1"],
              ["dull and too long ", "0"]],
             ["a \"warm , funny film ", "dull and too long "], None, [1, 0]),
    "mrpc": ([["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
              ["1", "101", "102", "He said \" yes .", "He agreed ."],
              ["0", "103", "104", "Prices rose .", "It rained ."]],
             ["He said \" yes .", "Prices rose ."], ["He agreed .", "It rained ."], [1, 0]),
    "stsb": ([_STSB_HEADER,
              ["0", "main-captions", "MSRvid", "2012test", "0001", "none", "none",
               "A dog runs .", "A dog is running .", "4.750"],
              ["1", "main-news", "headlines", "2013", "0002", "none", "none",
               "Stocks fell .", "A cat sleeps .", "0.000"]],
             ["A dog runs .", "Stocks fell ."], ["A dog is running .", "A cat sleeps ."],
             [4.75, 0.0]),
    "qqp": ([["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
             ["7", "13", "14", "How do I cook rice?", "What is the way to cook rice?", "1"],
             ["8", "15", "16", "Why is the sky blue?", "Who won the cup?", "0"]],
            ["How do I cook rice?", "Why is the sky blue?"],
            ["What is the way to cook rice?", "Who won the cup?"], [1, 0]),
    "mnli": ([_MNLI_TRAIN_HEADER,
              _mnli_row(0, "The man sleeps .", "A person rests .", "entailment"),
              _mnli_row(1, "The man sleeps .", "The man runs .", "contradiction"),
              _mnli_row(2, "The man sleeps .", "The man dreams .", "neutral")],
             ["The man sleeps ."] * 3,
             ["A person rests .", "The man runs .", "The man dreams ."], [1, 0, 2]),
    "qnli": ([["index", "question", "sentence", "label"],
              ["0", "Where is Paris?", "Paris is in France .", "entailment"],
              ["1", "Where is Rome?", "Bread is baked .", "not_entailment"]],
             ["Where is Paris?", "Where is Rome?"],
             ["Paris is in France .", "Bread is baked ."], [0, 1]),
    "rte": ([["index", "sentence1", "sentence2", "label"],
             ["0", "Ann bought a car .", "Ann owns a car .", "entailment"],
             ["1", "Ann bought a car .", "Ann sold a car .", "not_entailment"]],
            ["Ann bought a car .", "Ann bought a car ."],
            ["Ann owns a car .", "Ann sold a car ."], [0, 1]),
}


# ---------------------------------------------------------------------------- specs


def test_every_task_is_described():
    assert sorted(specs.TASKS) == sorted(_LAYOUTS) == sorted(glue_data._LAYOUTS)
    for name, spec in specs.TASKS.items():
        assert spec.name == name and spec.tfds_name == f"glue/{name}"
        assert len(spec.text_columns) in (1, 2)
        assert set(spec.metrics) <= set(metrics.METRICS)
        assert spec.primary_metric in spec.metrics
        assert len(spec.tfds_label_names) == len(spec.label_names)
        assert spec.num_labels == (1 if spec.is_regression else len(spec.label_names))
        # Both texts of a pair task are in its TSV layout.
        assert len(glue_data._LAYOUTS[name].text) == len(spec.text_columns)


def test_the_original_electras_labels_and_defaults():
    assert specs.TASKS["mnli"].label_names == ("contradiction", "entailment", "neutral")
    assert specs.TASKS["rte"].label_names == ("entailment", "not_entailment")
    assert specs.TASKS["cola"].label_names == ("0", "1")
    assert specs.TASKS["stsb"].num_labels == 1 and specs.TASKS["stsb"].is_regression
    epochs = {name: spec.num_train_epochs for name, spec in specs.TASKS.items()}
    assert epochs == {name: 10.0 if name in ("rte", "stsb") else 3.0 for name in epochs}
    for spec in specs.TASKS.values():
        assert (spec.train_batch_size, spec.max_seq_length, spec.warmup_proportion,
                spec.weight_decay_rate) == (32, 128, 0.1, 0.01)
    assert {n for n, s in specs.TASKS.items() if s.double_unordered} == {"mrpc", "stsb"}
    assert specs.TASKS["mnli"].eval_splits == ("validation_matched", "validation_mismatched")


def test_specs_are_read_only():
    spec = specs.TASKS["cola"]
    with pytest.raises(Exception):
        spec.num_train_epochs = 1.0
    with pytest.raises(TypeError):
        hparams.LEARNING_RATE["small"] = 1.0


def test_learning_rate_and_decay_come_from_the_model_unless_a_size_is_named():
    # The original's per size (its configure_finetuning.py); tiny is ours.
    assert dict(hparams.LEARNING_RATE) == {"tiny": 1e-3, "small": 1e-4, "base": 1e-4,
                                           "large": 5e-5}
    assert dict(hparams.LAYERWISE_LR_DECAY) == {"tiny": 0.8, "small": 0.8, "base": 0.8,
                                                "large": 0.9}
    config = finetune_configs.get_config("mrpc")  # 0: filled from the pre-trained run
    assert (config.train.learning_rate, config.train.layerwise_lr_decay) == (0.0, 0.0)
    config = finetune_configs.get_config("mrpc,large")
    assert (config.train.learning_rate, config.train.layerwise_lr_decay) == (5e-5, 0.9)
    with pytest.raises(ValueError, match="unknown size 'huge'; choose one of tiny, small"):
        finetune_configs.get_config("mrpc,huge")
    # A preset's shape gets the preset's values; a custom one lies between its neighbours.
    for name, size in sizes.SIZES.items():
        assert hparams.for_shape(size) == hparams.for_size(name)
    wide = dataclasses.replace(sizes.SIZES["base"], hidden_size=896, num_heads=14)
    assert 5e-5 < hparams.for_shape(wide).learning_rate < 1e-4
    assert hparams.for_shape(wide).layerwise_lr_decay == 0.8
    narrow = dataclasses.replace(sizes.SIZES["tiny"], hidden_size=32, num_heads=1)
    assert hparams.for_shape(narrow).learning_rate == 1e-3  # clamped to the presets' range


def test_label_index():
    assert glue_data.label_index("cola", "1") == 1
    assert glue_data.label_index("mnli", "neutral") == 2
    assert glue_data.label_index("qnli", "not_entailment\r") == 1
    assert glue_data.label_index("stsb", "5.000") == 5.0
    for task, raw, problem in [("cola", "2", "not one of 0, 1"),
                               ("mnli", "entails", "not one of contradiction"),
                               ("stsb", "high", "not a number"),
                               ("stsb", "5.2", "outside 0..5"),
                               ("stsb", "nan", "outside 0..5")]:
        with pytest.raises(specs.GlueDataError, match=problem):
            glue_data.label_index(task, raw)


def test_unknown_task_and_split():
    with pytest.raises(specs.GlueDataError, match="unknown GLUE task 'wnli'"):
        specs.get_task("wnli")
    with pytest.raises(specs.GlueDataError, match="no split 'validation' .*validation_matched"):
        glue_data.split_file("mnli", "validation")
    with pytest.raises(specs.GlueDataError, match="no split 'test'"):
        glue_data.load("cola", "test", data_dir="/nowhere")
    assert isinstance(specs.GlueDataError("x"), errors.UserError)


def test_split_files():
    assert glue_data.split_file("cola", "train") == "train.tsv"
    assert glue_data.split_file("rte", "validation") == "dev.tsv"
    assert glue_data.split_file("mnli", "validation_matched") == "dev_matched.tsv"
    assert glue_data.split_file("mnli", "validation_mismatched") == "dev_mismatched.tsv"


# ---------------------------------------------------------------------------- TSV layouts


@pytest.mark.parametrize("task", sorted(_LAYOUTS))
def test_read_tsv_layout(tmp_path, task):
    rows, text_a, text_b, labels = _LAYOUTS[task]
    path = _write(tmp_path / "dev.tsv", rows)
    examples = glue_data.read_tsv(task, path)
    assert examples.text_a == text_a
    assert examples.text_b == text_b
    assert examples.labels.tolist() == labels
    assert examples.labels.dtype == (np.float32 if task == "stsb" else np.int32)
    assert (len(examples), examples.source, examples.skipped) == (len(labels), path, 0)


def test_mnli_dev_layout_has_five_annotator_labels(tmp_path):
    path = _write(tmp_path / "dev_matched.tsv", [
        _MNLI_DEV_HEADER, _mnli_row(0, "A b .", "C d .", "neutral", dev=True)])
    examples = glue_data.read_tsv("mnli", path)
    assert (examples.text_a, examples.text_b, examples.labels.tolist()) == (
        ["A b ."], ["C d ."], [2])


def test_read_tsv_windows_line_ends_bom_and_blank_lines(tmp_path):
    rows = _LAYOUTS["sst2"][0]
    path = _write(tmp_path / "a.tsv", ["\ufeff" + "\t".join(rows[0]), rows[1], "", rows[2],
                                       "   "], end="\r\n")
    examples = glue_data.read_tsv("sst2", path)
    assert examples.text_a == _LAYOUTS["sst2"][1] and examples.labels.tolist() == [1, 0]


# ---------------------------------------------------------------------------- bad input


def _error(task, path, **kwargs) -> str:
    with pytest.raises(specs.GlueDataError) as info:
        glue_data.read_tsv(task, path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("task, bad_row, problem", [
    ("cola", ["gj04", "1", ""], "3 column(s), cola rows have at least 4"),
    ("cola", ["gj04", "yes", "", "A sentence ."], "label 'yes' is not one of 0, 1"),
    ("cola", ["", "", "", ""], "label '' is not one of 0, 1"),
    ("rte", ["2", "Ann ran .", "entailment"], "3 column(s), rte rows have at least 4"),
    ("mnli", _mnli_row(3, "A .", "B .", "contradictory"), 
     "label 'contradictory' is not one of contradiction, entailment, neutral"),
    ("mnli", _mnli_row(3, "A .", "B .", "neutral")[:10], 
     "10 column(s), mnli rows have at least 11"),
    ("stsb", _STSB_HEADER[:-1] + ["n/a"], "score 'n/a' is not a number"),
    ("stsb", _STSB_HEADER[:-1] + ["5.5"], "score '5.5' is outside 0..5"),
])
def test_bad_rows_name_file_and_line(tmp_path, task, bad_row, problem):
    rows = list(_LAYOUTS[task][0])
    rows.insert(2, bad_row)  # line 3 (counting a header where there is one)
    path = _write(tmp_path / "train.tsv", rows)
    assert _error(task, path) == f"{path}:3: {problem}" + errors.SKIP_HINT

    examples = glue_data.read_tsv(task, path, on_bad="skip")
    assert len(examples) == len(_LAYOUTS[task][3]) and examples.skipped == 1
    assert examples.labels.tolist() == pytest.approx(_LAYOUTS[task][3])
    assert examples.first_skipped == f"{path}:3: {problem}"


@pytest.mark.parametrize("task, row, texts, empty", [
    ("qqp", ["9", "17", "18", "Why?", "", "0"], ("Why?", ""), "question2"),
    ("rte", ["2", "", " ", "entailment"], ("", " "), "sentence1 and sentence2"),
    ("cola", ["gj04", "1", "", "  "], ("  ", None), "sentence"),
])
def test_empty_texts_are_examples_of_no_tokens(tmp_path, caplog, task, row, texts, empty):
    """GLUE's QQP train.tsv has empty question2s; the original trains on them as
    [CLS] a [SEP] [SEP]. Kept in either on_bad, with one warning per file."""
    rows = list(_LAYOUTS[task][0])
    rows.insert(2, row)  # line 3
    path = _write(tmp_path / "train.tsv", rows)
    with caplog.at_level("WARNING"):
        examples = glue_data.read_tsv(task, path)
    assert len(examples) == len(_LAYOUTS[task][3]) + 1 and examples.skipped == 0
    text_b = examples.text_b or [None] * len(examples)
    assert texts in list(zip(examples.text_a, text_b))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [f"{path}: 1 example(s) with an empty text, kept (no tokens); "
                        f"first: {path}:3: {empty}"]


def test_invalid_utf8_is_an_error_even_when_skipping(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\ngood\t1\nbad \xff\xfe byte\t0\n")
    for on_bad in ("error", "skip"):
        message = _error("sst2", str(path), on_bad=on_bad)
        assert message.startswith(f"{path}:3: invalid UTF-8")


def test_latin1_file_is_reported(tmp_path):
    path = _write(tmp_path / "dev.tsv", [["sentence", "label"], ["café au lait", "1"]],
                  encoding="latin-1")
    assert _error("sst2", path).startswith(f"{path}:2: invalid UTF-8")


@pytest.mark.parametrize("lines", [[], [""], [["sentence", "label"]]])
def test_a_file_without_examples_is_an_error(tmp_path, lines):
    path = _write(tmp_path / "dev.tsv", lines)
    assert _error("sst2", path) == f"{path}: no sst2 examples"


def test_all_rows_bad_is_an_error_when_skipping(tmp_path):
    path = _write(tmp_path / "dev.tsv", [["sentence", "label"], ["a", "x"], ["b", "y"]])
    message = _error("sst2", path, on_bad="skip")
    assert message == f"{path}: no sst2 examples (2 bad rows skipped)"


def test_another_tasks_file_is_caught_by_its_header(tmp_path):
    cola = _write(tmp_path / "dev.tsv", _LAYOUTS["cola"][0])
    message = _error("sst2", cola, on_bad="skip")
    assert message.startswith(f"{cola}:1: not the header of GLUE's sst2 files")
    assert "'sentence' at column 1" in message
    rte = _write(tmp_path / "rte.tsv", _LAYOUTS["rte"][0])
    assert "'question' at column 2" in _error("qnli", rte)
    assert "'score' at column last" in _error("stsb", rte)


def test_on_bad_must_be_error_or_skip(tmp_path):
    path = _write(tmp_path / "dev.tsv", _LAYOUTS["sst2"][0])
    assert "on_bad='ignore'" in _error("sst2", path, on_bad="ignore")


def test_missing_file(tmp_path):
    assert _error("sst2", str(tmp_path / "nope.tsv")).startswith(
        f"{tmp_path / 'nope.tsv'}: cannot read it")


# ---------------------------------------------------------------------------- load (TSV)


@pytest.mark.parametrize("folder", ["", "RTE", "rte"])
def test_load_finds_the_file_in_glues_layouts(tmp_path, folder):
    os.makedirs(tmp_path / folder, exist_ok=True)
    path = _write(tmp_path / folder / "dev.tsv", _LAYOUTS["rte"][0])
    examples = glue_data.load("rte", "validation", data_dir=str(tmp_path))
    assert examples.source == path and examples.labels.tolist() == [0, 1]


def test_load_mnli_matched_and_mismatched(tmp_path):
    _write(tmp_path / "dev_matched.tsv",
           [_MNLI_DEV_HEADER, _mnli_row(0, "A .", "B .", "entailment", dev=True)])
    _write(tmp_path / "dev_mismatched.tsv",
           [_MNLI_DEV_HEADER, _mnli_row(0, "C .", "D .", "neutral", dev=True)])
    matched = glue_data.load("mnli", "validation_matched", data_dir=str(tmp_path))
    mismatched = glue_data.load("mnli", "validation_mismatched", data_dir=str(tmp_path))
    assert (matched.text_a, matched.labels.tolist()) == (["A ."], [1])
    assert (mismatched.text_a, mismatched.labels.tolist()) == (["C ."], [2])


def test_load_names_where_it_looked(tmp_path):
    with pytest.raises(specs.GlueDataError) as info:
        glue_data.load("sst2", "train", data_dir=str(tmp_path))
    assert str(info.value) == (f"no train.tsv for sst2 in {tmp_path} (looked for "
                               f"train.tsv, SST-2/train.tsv, sst/train.tsv)")
    with pytest.raises(specs.GlueDataError, match="does not exist"):
        glue_data.load("sst2", "train", data_dir=str(tmp_path / "missing"))


# GLUE's diagnostic set (glue_data/diagnostic/diagnostic.tsv): its real header, our rows.
_DIAGNOSTIC = [["index", "sentence1", "sentence2"],
               ["0", "The cat sat .", "A cat sat ."],
               ["1", "No dog ran .", "A dog ran ."]]


# ---------------------------------------------------------------------------- TFDS


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    """glue/cola and glue/mnli prepared by TFDS's own builder from tiny TSVs of ours.

    The builder's download is replaced by a folder of GLUE's layout; everything else is
    TFDS's real code, so the files are those a real `download_and_prepare` writes.
    """
    tfds = pytest.importorskip("tensorflow_datasets")
    source = tmp_path_factory.mktemp("glue_download")
    os.makedirs(source / "CoLA")
    os.makedirs(source / "MNLI")
    cola = _LAYOUTS["cola"][0]
    _write(source / "CoLA" / "train.tsv", cola)
    _write(source / "CoLA" / "dev.tsv", cola + [["gj04", "1", "", "It works ."],
                                                ["gj04", "0", "", ""]])  # empty: kept
    _write(source / "CoLA" / "test.tsv", [["index", "sentence"], ["0", "No label here ."]])
    mnli = [_mnli_row(0, "P one .", "H one .", "entailment", dev=True),
            _mnli_row(1, "P two .", "H two .", "neutral", dev=True),
            _mnli_row(2, "P three .", "H three .", "contradiction", dev=True)]
    _write(source / "MNLI" / "train.tsv", _LAYOUTS["mnli"][0])
    _write(source / "MNLI" / "dev_matched.tsv", [_MNLI_DEV_HEADER] + mnli)
    _write(source / "MNLI" / "dev_mismatched.tsv", [_MNLI_DEV_HEADER] + mnli[:1])
    for name in ("test_matched.tsv", "test_mismatched.tsv"):
        _write(source / "MNLI" / name, [["index", "promptID", "pairID", "genre",
                                        "sentence1", "sentence2"],
                                       ["0", "1", "1n", "fiction", "A .", "B ."]])
    diagnostic = _write(source / "diagnostic.tsv", _DIAGNOSTIC)
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    with mock.patch.object(tfds.download.DownloadManager, "download_and_extract",
                           return_value=str(source)), \
            mock.patch.object(tfds.download.DownloadManager, "download",
                              return_value=diagnostic):  # glue/ax: one TSV
        for name in ("glue/cola", "glue/mnli", "glue/ax"):
            tfds.builder(name, data_dir=data_dir).download_and_prepare()
    return data_dir


@pytest.fixture
def no_download(monkeypatch):
    """Fails the test if anything calls download_and_prepare."""
    tfds = pytest.importorskip("tensorflow_datasets")

    def refuse(*args, **kwargs):
        raise AssertionError("download_and_prepare called")
    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", refuse)


def _rows(examples):
    text_b = examples.text_b or [None] * len(examples)
    return sorted(zip(examples.text_a, text_b, examples.labels.tolist()))


def test_tfds_cola(tfds_dir, no_download):
    examples = glue_data.load("cola", "validation", tfds_data_dir=tfds_dir)
    assert examples.source == "glue/cola:validation" and examples.skipped == 0
    assert examples.text_b is None and examples.labels.dtype == np.int32
    assert _rows(examples) == sorted([("The cat sat on the mat .", None, 1),
                                      ("Mat the on sat cat the .", None, 0),
                                      ("It works .", None, 1), ("", None, 0)])


def test_tfds_mnli_labels_map_by_name(tfds_dir, no_download, tmp_path):
    # TFDS orders MNLI's classes entailment, neutral, contradiction; ours (the original
    # ELECTRA's) is contradiction, entailment, neutral. Both sources must agree.
    examples = glue_data.load("mnli", "validation_matched", tfds_data_dir=tfds_dir)
    assert _rows(examples) == sorted([("P one .", "H one .", 1), ("P two .", "H two .", 2),
                                      ("P three .", "H three .", 0)])
    tsv = _write(tmp_path / "dev_matched.tsv", [_MNLI_DEV_HEADER] + [
        _mnli_row(i, a, b, label, dev=True) for i, (a, b, label) in enumerate([
            ("P one .", "H one .", "entailment"), ("P two .", "H two .", "neutral"),
            ("P three .", "H three .", "contradiction")])])
    assert _rows(glue_data.read_tsv("mnli", tsv)) == _rows(examples)
    assert len(glue_data.load("mnli", "validation_mismatched", tfds_data_dir=tfds_dir)) == 1


def test_tfds_test_split_has_no_labels(tfds_dir, no_download):
    with pytest.raises(specs.GlueDataError) as info:
        glue_data._read_tfds(specs.TASKS["cola"], "test", tfds_dir, on_bad="error")
    assert str(info.value) == "glue/cola:test example 1: no label (-1)" + errors.SKIP_HINT


def test_tfds_not_prepared_is_one_line(tmp_path, no_download):
    with pytest.raises(specs.GlueDataError) as info:
        glue_data.load("rte", "train", tfds_data_dir=str(tmp_path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"glue/rte is not prepared in {tmp_path}")
    assert "--config.data.dir" in message


# ---------------------------------------------------------------------------- test splits

_MNLI_TEST_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                     "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                     "sentence1", "sentence2"]


def test_test_files_read_by_header_with_their_ids(tmp_path):
    (tmp_path / "MNLI").mkdir()
    _write(tmp_path / "MNLI" / "test_matched.tsv", [
        _MNLI_TEST_HEADER, ["0", "1", "1n", "fiction", "(A)", "(B)", "(A)", "(B)", "A .", "B ."],
        ["1", "2", "2e", "travel", "(C)", "(D)", "(C)", "(D)", "C .", "D ."]])
    examples = glue_data.load_test("mnli", "test_matched", data_dir=str(tmp_path))
    assert (examples.ids, examples.text_a, examples.text_b) == (["0", "1"], ["A .", "C ."],
                                                                 ["B .", "D ."])
    assert examples.labels.tolist() == [0, 0]
    qqp = _write(tmp_path / "test.tsv", [["id", "question1", "question2"], ["7", "a ?", "b ?"]])
    assert glue_data.read_test_tsv("qqp", qqp).ids == ["7"]
    assert glue_data.test_splits("mnli") == {"test_matched": "MNLI-m.tsv",
                                             "test_mismatched": "MNLI-mm.tsv",
                                             "diagnostic": "AX.tsv"}
    assert {glue_data.test_splits(t)["test"] for t in specs.TASKS if t != "mnli"} == {
        "CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "QNLI.tsv", "RTE.tsv"}


def test_bad_test_files_are_one_line_errors(tmp_path):
    train_file = _write(tmp_path / "train.tsv", [["sentence", "label"], ["a", "1"]])
    with pytest.raises(specs.GlueDataError, match=r"train.tsv:1: not the header of GLUE's "
                       r"sst2 test file \(no 'index' column\)"):
        glue_data.read_test_tsv("sst2", train_file)
    short = _write(tmp_path / "short.tsv", [["index", "sentence1", "sentence2"], ["0", "a"]])
    with pytest.raises(specs.GlueDataError, match="short.tsv:2: 2 column"):
        glue_data.read_test_tsv("rte", short)
    with pytest.raises(specs.GlueDataError, match="no rte test examples"):
        glue_data.read_test_tsv("rte", _write(tmp_path / "e.tsv", [["index", "sentence1",
                                                                     "sentence2"]]))
    with pytest.raises(specs.GlueDataError, match="no test split 'test'; choose one of "
                       "test_matched, test_mismatched, diagnostic$"):
        glue_data.load_test("mnli", "test", data_dir=str(tmp_path))
    with pytest.raises(specs.GlueDataError, match="no test.tsv for cola"):
        glue_data.load_test("cola", "test", data_dir=str(tmp_path))


def test_submission_rows_are_glues_format():
    assert glue_data.submission_rows("mnli", ["0", "1"], np.array([2, 0])) == [
        "index\tprediction", "0\tneutral", "1\tcontradiction"]
    assert glue_data.submission_rows("cola", ["5"], np.array([1])) == ["index\tprediction", "5\t1"]
    assert glue_data.submission_rows("stsb", ["0", "1", "2"], np.array([5.7, -0.2, 2.5])) == [
        "index\tprediction", "0\t5.000", "1\t0.000", "2\t2.500"]


def test_tfds_test_splits_with_their_ids(tfds_dir, no_download):
    cola = glue_data.load_test("cola", "test", tfds_data_dir=tfds_dir)
    assert (cola.ids, cola.text_a, cola.text_b) == (["0"], ["No label here ."], None)
    mnli = glue_data.load_test("mnli", "test_mismatched", tfds_data_dir=tfds_dir)
    assert (mnli.ids, mnli.text_a, mnli.text_b) == (["0"], ["A ."], ["B ."])
    ax = glue_data.load_test("mnli", "diagnostic", tfds_data_dir=tfds_dir)  # glue/ax
    assert ax.source == "glue/ax:test"
    assert sorted(zip(ax.ids, ax.text_a, ax.text_b)) == [tuple(r) for r in _DIAGNOSTIC[1:]]


# ---------------------------------------------------------------------------- diagnostic set


def _glue_download(root, diagnostic=_DIAGNOSTIC) -> str:
    """glue_data/ with MNLI's test files and, unless None, diagnostic/diagnostic.tsv."""
    (root / "MNLI").mkdir(parents=True)
    for name in ("test_matched.tsv", "test_mismatched.tsv"):
        _write(root / "MNLI" / name, [_MNLI_TEST_HEADER, ["0", "1", "1n", "fiction", "(A)",
                                                          "(B)", "(A)", "(B)", "A .", "B ."]])
    if diagnostic is not None:
        (root / "diagnostic").mkdir()
        _write(root / "diagnostic" / "diagnostic.tsv", diagnostic)
    return str(root)


@pytest.mark.parametrize("task_folder", [False, True])
def test_diagnostic_set_is_a_test_split_of_mnli_beside_its_folder(tmp_path, task_folder):
    glue = _glue_download(tmp_path / "glue_data")
    data_dir = os.path.join(glue, "MNLI") if task_folder else glue
    tests = glue_data.load_tests("mnli", data_dir=data_dir)
    assert list(tests) == ["test_matched", "test_mismatched", "diagnostic"]
    ax = tests["diagnostic"]
    assert ax.source == os.path.join(glue, "diagnostic", "diagnostic.tsv")
    assert (ax.ids, ax.text_a, ax.text_b) == (["0", "1"], ["The cat sat .", "No dog ran ."],
                                              ["A cat sat .", "A dog ran ."])
    # Its submission lines are MNLI's: the same label names as MNLI-m.tsv.
    assert glue_data.submission_rows("mnli", ax.ids, np.array([1, 0])) == [
        "index\tprediction", "0\tentailment", "1\tcontradiction"]


def test_a_bad_diagnostic_row_is_an_error_naming_file_and_line(tmp_path):
    glue = _glue_download(tmp_path, _DIAGNOSTIC[:2] + [["1", "No dog ran ."]])
    with pytest.raises(specs.GlueDataError) as info:
        glue_data.load_tests("mnli", data_dir=glue)
    path = os.path.join(glue, "diagnostic", "diagnostic.tsv")
    assert str(info.value) == f"{path}:3: 2 column(s), mnli test rows have 3"
    _write(path, [["index", "premise", "hypothesis"]] + _DIAGNOSTIC[1:])
    with pytest.raises(specs.GlueDataError, match=f"{path}:1: not the header of GLUE's mnli "
                       "test file"):
        glue_data.load_tests("mnli", data_dir=glue)


def test_without_the_diagnostic_set_mnli_says_where_it_looked(tmp_path, caplog):
    glue = _glue_download(tmp_path / "glue_data", diagnostic=None)
    data_dir = os.path.join(glue, "MNLI")
    with caplog.at_level("WARNING"):
        tests = glue_data.load_tests("mnli", data_dir=data_dir)
    assert list(tests) == ["test_matched", "test_mismatched"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "mnli: no AX.tsv written (diagnostic test split): no diagnostic.tsv for mnli in "
        f"{data_dir} (looked for diagnostic.tsv, diagnostic/diagnostic.tsv, "
        "../diagnostic/diagnostic.tsv)"]
    # MNLI's own test files are not optional.
    os.remove(os.path.join(data_dir, "test_mismatched.tsv"))
    with pytest.raises(specs.GlueDataError, match="no test_mismatched.tsv for mnli"):
        glue_data.load_tests("mnli", data_dir=data_dir)


def test_tfds_without_glue_ax_gives_mnlis_test_splits_and_a_warning(tfds_dir, no_download,
                                                                    tmp_path, caplog):
    shutil.copytree(os.path.join(tfds_dir, "glue", "mnli"), tmp_path / "glue" / "mnli")
    with caplog.at_level("WARNING"):
        tests = glue_data.load_tests("mnli", tfds_data_dir=str(tmp_path))
    assert list(tests) == ["test_matched", "test_mismatched"]
    warnings = [r.getMessage() for r in caplog.records  # (TFDS warns of its own folders)
                if r.levelname == "WARNING" and "AX.tsv" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"mnli: no AX.tsv written (diagnostic test split): glue/ax is not prepared in {tmp_path}")
