"""Careless input to every tool: one `error: ...` line naming the input, exit code 2, no
traceback, and nothing already written is lost (tests/test_tools.py has the corpus and
vocab cases of create_pretraining_data)."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from electra_tf import errors
from electra_tf import flags as common_flags
from electra_tf.data import examples
from electra_tf.data import writer
from electra_tf.text import corpus
from tests import helpers


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """A corpus, a blank and a Latin-1 corpus, a vocab, a finished dataset and an empty
    directory."""
    directory = tmp_path_factory.mktemp("tool_errors")
    vocab = helpers.write_vocab(str(directory))
    helpers.make_data(str(directory), vocab, max_seq_length=32, num_shards=1)
    (directory / "blank.txt").write_text("\n  \n\n")
    (directory / "latin1.txt").write_bytes("Café.\nNaïve.\n".encode("latin-1"))
    (directory / "emptydir").mkdir()
    return directory


# (tool, arguments, what the error line says, paths that must be as they were); {w} is
# the fixture's directory; a tool is tools/NAME.py, or a package binary run with -m.
# Each case is one tool process (~5 s of TF start-up, but for the tools of
# BEFORE_TENSORFLOW).
CASES = {
    "vocab_blank_corpus": (
        "build_vocab.py", ["--input={w}/blank.txt", "--output={w}/vocab.txt", "--overwrite"],
        ["--input={w}/blank.txt", "every line is empty"], ["vocab.txt"]),
    "vocab_corpus_not_utf8": (
        "build_vocab.py", ["--input={w}/latin1.txt", "--output={w}/vocab.txt", "--overwrite"],
        ["--input={w}/latin1.txt: no text to learn from (2 line(s) of invalid UTF-8 skipped, "
         "first at {w}/latin1.txt:1)"], ["vocab.txt"]),
    "vocab_exists": (
        "build_vocab.py", ["--input={w}/corpus.txt", "--output={w}/vocab.txt"],
        ["--output={w}/vocab.txt exists", "--overwrite"], ["vocab.txt"]),
    "vocab_input_is_a_directory": (
        "build_vocab.py", ["--input={w}/emptydir", "--output={w}/new_vocab.txt"],
        ["{w}/emptydir is a directory", "--input='{w}/emptydir/*.txt'"], ["new_vocab.txt"]),
    "vocab_no_characters": (
        "build_vocab.py", ["--input={w}/corpus.txt", "--output={w}/new_vocab.txt",
                           "--max_unique_chars=0"],
        ["--max_unique_chars=0: 0 is not a positive integer"], ["new_vocab.txt"]),
    "vocab_output_is_a_directory": (
        "build_vocab.py", ["--input={w}/corpus.txt", "--output={w}/data"],
        ["--output={w}/data: a directory"], ["data"]),
    "data_too_short": (
        "create_pretraining_data.py", ["--input={w}/corpus.txt", "--vocab_file={w}/vocab.txt",
                                       "--output_dir={w}/data", "--overwrite",
                                       "--max_seq_length=3"],
        ["--max_seq_length=3", f"at least {writer.MIN_SEQ_LENGTH}"], ["data"]),
    "data_no_shards": (
        "create_pretraining_data.py", ["--input={w}/corpus.txt", "--vocab_file={w}/vocab.txt",
                                       "--output_dir={w}/data", "--overwrite",
                                       "--num_shards=0"],
        ["--num_shards=0"], ["data"]),
    "data_output_is_a_file": (
        "create_pretraining_data.py", ["--input={w}/corpus.txt", "--vocab_file={w}/vocab.txt",
                                       "--output_dir={w}/vocab.txt"],
        ["--output_dir={w}/vocab.txt: a file, not a directory"], ["vocab.txt"]),
    "export_under_a_file": (
        "export_savedmodel.py", ["--workdir={w}/no_run", "--output={w}/vocab.txt/1"],
        ["--output={w}/vocab.txt/1: {w}/vocab.txt is a file"], ["vocab.txt"]),
    "inspect_too_few": (
        "inspect_data.py", ["--data={w}/data", "--vocab_file={w}/vocab.txt",
                            "--num_examples=100000"],
        ["--data={w}/data: fewer than --num_examples=100000"], ["data"]),
    "predictions_html_is_a_directory": (
        "show_predictions.py", ["--workdir={w}/no_run", "--text=a cat", "--html={w}/data"],
        ["--html={w}/data: a directory"], ["data"]),
    "sample_corpus_under_a_file": (
        "build_sample_corpus.py", ["--output={w}/vocab.txt/corpus.txt"],
        ["--output={w}/vocab.txt/corpus.txt: {w}/vocab.txt is a file"], ["vocab.txt"]),
    "sample_corpus_exists": (
        "build_sample_corpus.py", ["--output={w}/corpus.txt"],
        ["--output={w}/corpus.txt exists", "--overwrite"], ["corpus.txt"]),
    "reranking_set_exists": (
        "make_reranking_set.py", ["--input={w}/corpus.txt", "--output={w}/corpus.txt"],
        ["--output={w}/corpus.txt exists", "--overwrite"], ["corpus.txt"]),
    "reranking_set_to_a_directory": (
        "make_reranking_set.py", ["--input={w}/corpus.txt", "--output={w}/data"],
        ["--output={w}/data: a directory"], ["data"]),
    "plot_output_is_a_directory": (
        "plot_run.py", ["--workdir={w}/no_run", "--output={w}/data"],
        ["--output={w}/data: a directory"], ["data"]),
    "convert_under_a_file": (
        "convert_checkpoint.py", ["--from=electra_tf", "--to=hf", "--input={w}/no_run",
                                  "--output={w}/vocab.txt/hf"],
        ["--output={w}/vocab.txt/hf: {w}/vocab.txt is a file"], ["vocab.txt"]),
    "convert_into_a_full_directory": (
        "convert_checkpoint.py", ["--from=electra_tf", "--to=hf", "--input={w}/data",
                                  "--output={w}/data"],
        ["--output={w}/data: exists and is not empty; choose a new --output"], ["data"]),
    "convert_empty_output": (  # not the parent of the current folder, nor ./..tmp
        "convert_checkpoint.py", ["--from=tf1", "--to=hf", "--input={w}/data", "--output="],
        ["--output='': empty; give a path"], ["data"]),
    "convert_no_input": (
        "convert_checkpoint.py", ["--from=tf1", "--to=hf", "--input={w}/no_ckpt",
                                  "--output={w}/hf"],
        ["--input={w}/no_ckpt: not found"], ["hf"]),
    "convert_heads_of_hf_input": (
        "convert_checkpoint.py", ["--from=hf", "--to=tf1", "--input={w}/data",
                                  "--output={w}/tf1", "--num_heads=4"],
        ["--num_heads and --generator_num_heads are for --from=tf1"], ["tf1"]),
    "convert_casing_of_keras_hub": (
        "convert_checkpoint.py", ["--from=tf1", "--to=keras_hub", "--input={w}/data",
                                  "--output={w}/preset", "--nolower_case"],
        ["--nolower_case is for --to=hf and --to=electra_tf: --to=keras_hub writes no "
         "tokenizer setting"], ["preset"]),
    "compare_missing_task_text": (
        "compare_objectives.py", ["--output_dir={w}/compare", "--task_text={w}/missing.txt",
                                  "--config.data.vocab_file={w}/vocab.txt"],
        ["--task_text={w}/missing.txt: no such file"], ["compare"]),
    "compare_bad_variant": (
        "compare_objectives.py", ["--output_dir={w}/compare", "--task_text={w}/vocab.txt",
                                  "--config.data.vocab_file={w}/vocab.txt",
                                  "--preset=adversarial",
                                  "--variant=hot:model.temprature=2"],
        ["--variant=hot:model.temprature=2: config.model has no key 'temprature'"],
        ["compare"]),
    "compare_budget_objective_is_gone": (
        "compare_objectives.py", ["--output_dir={w}/compare", "--task_text={w}/vocab.txt",
                                  "--config.data.vocab_file={w}/vocab.txt",
                                  "--objectives=electra,mlm", "--budget_objective=mlm"],
        ["--budget_objective is gone: use --budget_variant=mlm"], ["compare"]),
    "a_glob_the_shell_expanded": (  # every binary: `cli.run_main` refuses the files
        "build_sample_corpus.py", ["--output={w}/new_corpus.txt", "{w}/corpus.txt"],
        ["unexpected argument(s): {w}/corpus.txt", "--input='corpus/*.txt'"],
        ["new_corpus.txt"]),
    "benchmark_workdir_is_a_file": (
        "benchmark.py", ["--mode=input", "--workdir={w}/vocab.txt"],
        ["--workdir={w}/vocab.txt: a file, not a directory"], ["vocab.txt"]),
    "benchmark_no_batch": (
        "benchmark.py", ["--config=configs/electra.py:tiny", "--batch_size=0",
                         "--workdir={w}/bench"],
        ["--batch_size, --steps and --steps_per_loop must be positive"], ["bench"]),
    "benchmark_bad_config": (
        "benchmark.py", ["--config=configs/electra.py:tiny", "--config.train.remat=all",
                         "--workdir={w}/bench"],
        ["config.train.remat='all': choose one of"], ["bench"]),
    "benchmark_resume_steps_not_numbers": (
        "benchmark.py", ["--mode=resume", "--resume_steps=0,1e6", "--workdir={w}/bench"],
        ["--resume_steps=0,1e6: give whole numbers"], ["bench"]),
    "inspect_no_data": (
        "inspect_data.py", ["--data={w}/no_data", "--vocab_file={w}/vocab.txt"],
        ["--data={w}/no_data: not found"], ["no_data"]),
    "inspect_bad_masking": (
        "inspect_data.py", ["--data={w}/data", "--vocab_file={w}/vocab.txt",
                            "--config.data.mask_prob=1.5"],
        ["config.data.mask_prob=1.5: must be"], ["data"]),
    "score_no_run": (
        "score_text.py", ["--workdir={w}/no_run", "--input={w}/corpus.txt"],
        ["--workdir={w}/no_run: not found"], ["no_run"]),
    "score_input_is_a_directory": (
        "score_text.py", ["--workdir={w}/data", "--input={w}/emptydir"],
        ["--input={w}/emptydir: a directory"], ["emptydir"]),
    "reranking_set_no_input": (
        "make_reranking_set.py", ["--input={w}/held_out.txt", "--output={w}/pairs.txt"],
        ["--input={w}/held_out.txt: not found"], ["pairs.txt"]),
    "finetune_unknown_task": (
        "electra_tf.finetune", ["--config=configs/finetune.py:foo", "--workdir={w}/ft"],
        ["error: --config=configs/finetune.py:foo: unknown task 'foo'; choose one of cola, "
         "sst2, mrpc, stsb, qqp, mnli, qnli, rte, squad1, squad2, conll2003, conll2000, "
         "tagging"], ["ft"]),
    "finetune_unknown_size": (
        "electra_tf.finetune", ["--config=configs/finetune.py:mrpc,huge", "--workdir={w}/ft"],
        ["error: --config=configs/finetune.py:mrpc,huge: unknown size 'huge'; choose one of "
         "tiny, small, base, large"], ["ft"]),
}


# Cases a tool answers before it imports TensorFlow (in ~0.6 s, not after TF's start-up):
# they run with a `tensorflow` on the path that cannot be imported.
BEFORE_TENSORFLOW = ("export_under_a_file", "sample_corpus_under_a_file",
                     "plot_output_is_a_directory", "predictions_html_is_a_directory",
                     "compare_budget_objective_is_gone", "a_glob_the_shell_expanded",
                     "sample_corpus_exists", "finetune_unknown_task", "finetune_unknown_size",
                     "vocab_exists", "vocab_output_is_a_directory", "vocab_no_characters",
                     "data_too_short",
                     "data_no_shards", "data_output_is_a_file", "reranking_set_exists",
                     "reranking_set_to_a_directory", "reranking_set_no_input",
                     "convert_under_a_file", "convert_into_a_full_directory",
                     "convert_empty_output",
                     "convert_no_input", "convert_heads_of_hf_input",
                     "convert_casing_of_keras_hub",
                     "benchmark_workdir_is_a_file", "benchmark_no_batch",
                     "benchmark_bad_config", "benchmark_resume_steps_not_numbers",
                     "inspect_no_data", "inspect_bad_masking", "score_no_run", "score_input_is_a_directory")


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory):
    """A folder whose `tensorflow` package fails to import."""
    package = tmp_path_factory.mktemp("no_tensorflow") / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(
        "raise ImportError('TensorFlow imported before the flags were checked')\n")
    return str(package.parent)


def _run(tool, *args, first_on_path=None):
    """`helpers.run_tool` for tools/TOOL, else `python -m TOOL` with the same path."""
    if tool.endswith(".py"):
        return helpers.run_tool(tool, *args, timeout=300, first_on_path=first_on_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (first_on_path, helpers.ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", tool, *args], capture_output=True,
                          text=True, timeout=300, cwd=helpers.ROOT, env=env)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_loses_nothing(w, no_tensorflow, case):
    tool, args, expected, kept = CASES[case]
    before = {path: helpers.snapshot(w / path) if (w / path).exists() else None
              for path in kept}
    result = _run(tool, *(a.format(w=w) for a in args),
                  first_on_path=no_tensorflow if case in BEFORE_TENSORFLOW else None)
    line = helpers.one_line_error(result)
    for fragment in expected:
        assert fragment.format(w=w) in line, line
    for path, snapshot in before.items():
        if snapshot is None:
            assert not (w / path).exists(), path
        else:
            assert helpers.snapshot(w / path) == snapshot, path


def test_a_directory_as_input_suggests_its_files(w):
    with pytest.raises(corpus.CorpusError, match="emptydir is a directory; give its files"):
        corpus.open_corpus(str(w / "emptydir"))


def test_a_blank_corpus_names_the_input_and_writes_nothing(w, tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    with pytest.raises(writer.EmptyOutputError, match=f"^--input={w}/blank.txt: .*no examples"):
        writer.write_pretraining_data(corpus.open_corpus(str(w / "blank.txt")), vocab,
                                      str(tmp_path / "out"), log=lambda _: None)
    assert os.listdir(tmp_path / "out") == []


def test_a_corpus_of_invalid_utf8_says_so_and_writes_nothing(w, tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    with pytest.raises(writer.EmptyOutputError) as info:
        writer.write_pretraining_data(corpus.open_corpus(str(w / "latin1.txt")), vocab,
                                      str(tmp_path / "out"), log=lambda _: None)
    assert str(info.value) == (
        f"--input={w}/latin1.txt: the corpus produced no examples (2 line(s) of invalid "
        f"UTF-8 skipped, first at {w}/latin1.txt:1); nothing was written to {tmp_path}/out")
    assert os.listdir(tmp_path / "out") == []


def test_min_seq_length_is_the_packers():
    examples.ExampleBuilder(writer.MIN_SEQ_LENGTH, cls_id=2, sep_id=3)
    with pytest.raises(ValueError, match="max_seq_length"):
        examples.ExampleBuilder(writer.MIN_SEQ_LENGTH - 1, cls_id=2, sep_id=3)


def test_check_output_path(tmp_path):
    (tmp_path / "file").write_text("x")
    common_flags.check_output_path("output", str(tmp_path / "new" / "deeper" / "vocab.txt"))
    common_flags.check_output_path("output_dir", str(tmp_path), directory=True)
    common_flags.check_output_path("output", "gs://bucket/vocab.txt")  # not checked here
    for empty in ("", "  "):
        with pytest.raises(errors.UserError, match=f"^--output='{empty}': empty; give a path$"):
            common_flags.check_output_path("output", empty, directory=True)
    with pytest.raises(errors.UserError, match="^--output=.*: a directory"):
        common_flags.check_output_path("output", str(tmp_path))
    with pytest.raises(errors.UserError, match="^--output_dir=.*: a file, not a directory"):
        common_flags.check_output_path("output_dir", str(tmp_path / "file"), directory=True)
    with pytest.raises(errors.UserError, match=f"^--output=.*: {tmp_path}/file is a file"):
        common_flags.check_output_path("output", str(tmp_path / "file" / "a" / "b.txt"))
    # A file already there: refused without --overwrite, locally and on a URL.
    common_flags.check_output_path("output", str(tmp_path / "file"))
    with pytest.raises(errors.UserError, match=r"^--output=.*/file exists; pass --overwrite "
                                               r"to replace it or choose another --output$"):
        common_flags.check_output_path("output", str(tmp_path / "file"), overwrite=False)
    url = f"ram://check_output_path_{os.getpid()}/file"
    common_flags.check_output_path("output", url, overwrite=False)
    tf.io.gfile.makedirs(os.path.dirname(url))
    with tf.io.gfile.GFile(url, "w") as f:
        f.write("x")
    with pytest.raises(errors.UserError, match=f"^--output={url} exists"):
        common_flags.check_output_path("output", url, overwrite=False)


def test_write_corpus_makes_its_folder(tmp_path):
    path = tmp_path / "new" / "corpus.txt"
    assert corpus.write_corpus(["One sentence.", ""], str(path)) == 1
    assert path.read_text() == "One sentence.\n\n" and os.listdir(path.parent) == ["corpus.txt"]
