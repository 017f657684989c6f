"""Tests of `electra_tf.finetuning.glue.task`: a GLUE task's test splits become GLUE's
submission files (no fine-tuning: the outputs are made up)."""

import numpy as np

from configs import finetune as finetune_configs  # pylint: disable=g-bad-import-order
from electra_tf.finetuning import tasks
from tests import helpers
from tests.finetuning.glue.test_data import _DIAGNOSTIC
from tests.finetuning.glue.test_data import _LAYOUTS
from tests.finetuning.glue.test_data import _MNLI_DEV_HEADER
from tests.finetuning.glue.test_data import _glue_download
from tests.finetuning.glue.test_data import _mnli_row
from tests.finetuning.glue.test_data import _write


def _mnli_read(tmp_path, diagnostic):
    """MNLI's task read from a glue_data/ of ours, with its test splits."""
    glue = tmp_path / "glue_data"
    _glue_download(glue, diagnostic)
    _write(glue / "MNLI" / "train.tsv", _LAYOUTS["mnli"][0])
    for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
        _write(glue / "MNLI" / name, [_MNLI_DEV_HEADER,
                                      _mnli_row(0, "the cat sat .", "a cat sat .", "entailment",
                                                dev=True)])
    config = finetune_configs.get_config("mnli")
    config.data.dir = str(glue / "MNLI")
    config.data.max_seq_length = 16
    config.predict_test = True
    task = tasks.get("mnli", config)
    return task, task.read(helpers.write_vocab(str(tmp_path)), lower_case=True)


def test_mnli_writes_ax_from_the_diagnostic_set_with_mnlis_labels(tmp_path):
    task, read = _mnli_read(tmp_path, _DIAGNOSTIC)
    assert list(read.tests) == ["test_matched", "test_mismatched", "diagnostic"]
    rows = read.tests["diagnostic"]
    assert len(rows) == 2 and rows.summary.startswith("2 examples from ")
    logits = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], np.float32)  # neutral, contradiction
    evaluation = task.predict_test("diagnostic", rows, logits)
    assert evaluation.metrics == {}
    assert evaluation.files == {"test_predictions/AX.tsv":
                                "index\tprediction\n0\tneutral\n1\tcontradiction\n"}
    matched = task.predict_test("test_matched", read.tests["test_matched"], logits[:1])
    assert list(matched.files) == ["test_predictions/MNLI-m.tsv"]


def test_mnli_without_the_diagnostic_set_writes_no_ax(tmp_path, caplog):
    with caplog.at_level("WARNING"):
        _, read = _mnli_read(tmp_path, diagnostic=None)
    assert list(read.tests) == ["test_matched", "test_mismatched"]
    assert any("no AX.tsv written" in r.getMessage() for r in caplog.records)

