"""What every writer shares (`convert.files`): a new output directory, whole or not at
all, and a vocabulary of the table's size."""

import os

import pytest

from electra_tf import workdir as workdir_lib
from electra_tf.convert import files
from electra_tf.convert import hf
from electra_tf.convert import table
from tests import helpers


def test_outputs_are_checked(original, weights, tmp_path):
    with pytest.raises(table.ConversionError, match="exists and is not empty"):
        hf.HuggingFace().write(weights, original["dir"])
    other = helpers.write_vocab(str(tmp_path), words=["only", "three", "words"])
    with pytest.raises(table.ConversionError, match=r"vocab.txt: 12 tokens, but the "
                       r"checkpoint's embeddings have 32 rows"):
        hf.HuggingFace().write(weights, str(tmp_path / "hf"), other.path)
    assert os.listdir(tmp_path) == ["vocab.txt"]  # no hf, no .hf.tmp


def test_a_leftover_temporary_output_does_not_stop_a_conversion(tmp_path):
    """A failed run's .OUTPUT.tmp (a file or a directory) is replaced, not an error."""
    for leftover in ("file", "directory"):
        output = tmp_path / leftover
        tmp = tmp_path / f".{leftover}.tmp"
        if leftover == "file":
            tmp.write_text("half")
        else:
            tmp.mkdir()
            (tmp / "part").write_text("half")
        with files.new_directory(str(output)) as directory:
            (tmp_path / directory / "config.json").write_text("{}")
        assert os.listdir(output) == ["config.json"] and not tmp.exists()


def test_a_failed_conversion_leaves_nothing_and_a_failed_rename_keeps_it(tmp_path,
                                                                         monkeypatch):
    """What fails inside the block leaves no .out.tmp; a rename that fails keeps it (on
    a URL it moves file by file: what is not moved yet is only there)."""
    with pytest.raises(ValueError, match="bad tensor"):
        with files.new_directory(str(tmp_path / "out")) as directory:
            (tmp_path / directory / "config.json").write_text("{}")
            raise ValueError("bad tensor")
    assert os.listdir(tmp_path) == []  # no out, no .out.tmp

    def fail(source, target, last=None):
        raise OSError("disk full")
    monkeypatch.setattr(workdir_lib, "rename_folder", fail)
    with pytest.raises(table.ConversionError, match=f"^{tmp_path}/out: cannot move the "
                       rf"conversion there \(disk full\); what is not there yet is in "
                       f"{tmp_path}/.out.tmp "):
        with files.new_directory(str(tmp_path / "out")) as directory:
            (tmp_path / directory / "config.json").write_text("{}")
    assert os.listdir(tmp_path) == [".out.tmp"]
    assert os.listdir(tmp_path / ".out.tmp") == ["config.json"]


def test_an_output_without_a_name_is_refused(tmp_path, monkeypatch):
    """"" would write ./..tmp, then fail to rename it to ""."""
    monkeypatch.chdir(tmp_path)
    for path in ("", ".", "..", "a/.."):
        with pytest.raises(table.ConversionError, match=f"^--output='{path}': give the "
                           "path of a new directory$"):
            with files.new_directory(path):
                pass
    assert os.listdir(tmp_path) == []
