"""The command-line tools, run as a user runs them: the data path end to end, bad input."""

import json
import os

import pytest

from tests import helpers


def run(tool, *args):
    return helpers.run_tool(tool, *args, timeout=300)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tools")
    (directory / "corpus").mkdir()
    helpers.write_corpus(str(directory / "corpus"), num_documents=60, name="a.txt")
    helpers.write_corpus(str(directory / "corpus"), num_documents=60, seed=1, name="b.txt")
    return directory


def test_vocab_then_data_then_batches(workdir):
    vocab = workdir / "vocab.txt"
    result = run("build_vocab.py", f"--input={workdir}/corpus/*.txt", "--vocab_size=200",
                 f"--output={vocab}")
    assert result.returncode == 0, result.stderr
    assert "learning from all" in result.stdout
    # Progress: reading (MB of the corpus), then counting words, then learning.
    assert "reading: " in result.stdout and "(100.0%)" in result.stdout
    assert "counting words: " in result.stdout and "learning a 200-token" in result.stdout
    tokens = vocab.read_text().split("\n")
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

    result = run("create_pretraining_data.py", f"--input={workdir}/corpus/*.txt",
                 f"--vocab_file={vocab}", f"--output_dir={workdir}/data",
                 "--max_seq_length=64", "--num_shards=2")
    assert result.returncode == 0, result.stderr
    assert "MB/s" in result.stdout  # progress and the summary show the rate
    manifest = json.loads((workdir / "data" / "manifest.json").read_text())
    assert manifest["num_documents"] == 120 and len(manifest["shards"]) == 2

    # With a config's masking: large's 25%, whole words.
    result = run("inspect_data.py", f"--data={workdir}/data", f"--vocab_file={vocab}",
                 "--config=configs/electra.py:large", "--config.data.whole_word_masking=true")
    assert result.returncode == 0, result.stderr
    assert "masking: mask_prob=0.25, [MASK] 85%, random token 0%, whole words: True" \
        in result.stdout
    assert "'masked_lm_positions': [2, 16]" in result.stdout  # int(0.255 * 64) = 16
    assert "[MASK](" in result.stdout


def test_vocab_sampling_is_announced(workdir):
    result = run("build_vocab.py", f"--input={workdir}/corpus/a.txt", "--vocab_size=100",
                 "--sample_lines=50", f"--output={workdir}/small_vocab.txt")
    assert result.returncode == 0, result.stderr
    assert "uniform sample of 50 of 480 lines" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--input=/nonexistent/*.txt"], "error: --input: no file matches '/nonexistent/*.txt'"),
    (["--input={w}/corpus/a.txt", "--vocab_file={w}/no_mask.txt"],
     "error: {w}/no_mask.txt: the vocab lacks the special token(s) [MASK]"),
    (["--input={w}/corpus/a.txt", "--tfds=foo"], "error: give exactly one of --input"),
])
def test_bad_input_is_one_line_and_exit_code_2(workdir, args, message):
    (workdir / "no_mask.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    if not any(a.startswith("--vocab_file") for a in args):
        args = args + [f"--vocab_file={workdir}/vocab.txt"]
    args = [a.format(w=workdir) for a in args]
    result = run("create_pretraining_data.py", *args, f"--output_dir={workdir}/bad_out")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [message.format(w=workdir)] or lines[0].startswith(
        message.format(w=workdir))
    assert "Traceback" not in result.stderr
    assert not os.path.exists(workdir / "bad_out" / "manifest.json")


def test_data_made_for_another_length_is_refused(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    data = helpers.make_data(str(tmp_path), vocab, max_seq_length=64, num_shards=1)
    result = run("inspect_data.py", f"--data={data}", f"--vocab_file={vocab.path}",
                 "--max_seq_length=128")
    assert result.returncode == 2
    assert "max_seq_length is 64 but the run uses max_seq_length=128" in result.stderr


@pytest.mark.slow  # three tool processes; the view has fast tests (training/test_predictions.py,
# and the tiny run's TensorBoard text in test_train.py)
def test_show_predictions_of_text_and_data(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    vocab, _ = helpers.write_pretrained_run(str(run_dir), max_seq_length=16)
    data = helpers.make_data(str(tmp_path), vocab, max_seq_length=16, num_shards=1)
    page = tmp_path / "view.html"
    result = run("show_predictions.py", f"--workdir={run_dir}",
                 "--text=the cat sat on the mat .", "--text=a big red house",
                 f"--html={page}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("ckpt-1")      # the checkpoint it read
    assert [l.split(":")[0] for l in lines if l.startswith("sequence")] == [
        "sequence 1", "sequence 2"]
    # A pipe gets no colour: the probabilities are written out, replaced tokens marked.
    assert "\033[" not in result.stdout
    shown = [lines[i + 1] for i, l in enumerate(lines) if l.startswith("sequence")]
    # (An untrained model's P(replaced) is near 0.5, so [CLS] may carry its "[0.50]".)
    assert all(s.startswith("[CLS]") and "[SEP]" in s for s in shown), shown
    # Every sequence has a masked token (marked _kept_ or *original→sample*), with its
    # probability.
    assert all(("_[" in s or "*[" in s) for s in shown), shown
    html = page.read_text()
    # One shaded span (with its probability in the tooltip) and one table row per token.
    tokens = sum(len(s.split()) for s in shown)
    assert html.count("<span style='background: rgba(220, 30, 30, ") == tokens
    assert html.count("title='P(replaced) ") == tokens and html.count("<tr><td>") == tokens

    result = run("show_predictions.py", f"--workdir={run_dir}", f"--data={data}",
                 "--num_examples=2", "--colour=always")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\nsequence ") == 2 and "\033[" in result.stdout


@pytest.mark.slow  # three tool processes, for a documentation tool
def test_plot_run_writes_a_png_of_train_and_eval_curves(tmp_path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    # Two runs of one folder name (quickstart.sh's layout): two curves, told apart.
    for run_name in ("a", "b"):
        for which, steps in (("train", range(10, 101, 10)), ("eval", (50, 100))):
            writer = tf.summary.create_file_writer(
                str(tmp_path / run_name / "run" / "logs" / which))
            with writer.as_default():
                # "b" as a run logged before `objective_loss` (the panel falls back).
                tags = ("loss", "mlm_loss", "rtd_loss", "disc_auc") + (
                    ("objective_loss",) if run_name == "a" else ())
                for step in steps:
                    for tag in tags:
                        tf.summary.scalar(tag, 1.0 / step, step=step)
                tf.summary.text("predictions", "not a scalar", step=steps[-1])
            writer.close()
    output = tmp_path / "curves.png"
    result = run("plot_run.py", f"--workdir={tmp_path / 'a' / 'run'}",
                 f"--workdir={tmp_path / 'b' / 'run'}/", f"--output={output}")
    assert result.returncode == 0, result.stderr
    assert "2 run(s): a/run, b/run; up to step 100" in result.stdout
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and output.stat().st_size > 20_000

    result = run("plot_run.py", f"--workdir={tmp_path / 'none'}", f"--output={output}")
    assert result.returncode == 2 and "no training summaries" in result.stderr
    # A fine-tuning run's `loss` is its task's: not drawn as pre-training's objective.
    (tmp_path / "a" / "run" / "config.json").write_text('{"task": "sst2"}')
    line = helpers.one_line_error(run("plot_run.py", f"--workdir={tmp_path / 'a' / 'run'}",
                                      f"--output={output}"))
    assert "a fine-tuning run (sst2); plot_run plots pre-training runs" in line


def test_make_reranking_set_changes_texts_as_an_uncased_model_reads_them(tmp_path):
    """No pair differs only in case or accents (an uncased model would score both alike,
    a tie); a line over --max_words (one document a line: a change past max_seq_length
    ties) is left out, and counted."""
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("The the THE thé\nthé THE the The\n")
    line = helpers.one_line_error(run("make_reranking_set.py", f"--input={heldout}",
                                      f"--output={tmp_path / 'none.txt'}"))
    assert "no sentence of 4 words or more that the corruptions change" in line

    kept = " ".join(f"w{i % 70}" for i in range(150))
    heldout.write_text(f"The cat saw the dog\n{kept}\n{'x ' * 5000}\n")
    pairs = tmp_path / "pairs.txt"
    made = run("make_reranking_set.py", f"--input={heldout}", f"--output={pairs}",
               "--max_words=200")
    assert made.returncode == 0 and "1 line(s) of more than --max_words=200" in made.stderr
    groups = [g.split("\n") for g in pairs.read_text().strip().split("\n\n")]
    assert [g[0] for g in groups] == ["The cat saw the dog"] * 2 + [kept] * 2
    assert all(a.casefold() != b.casefold() for a, b in groups)


@pytest.mark.slow  # the whole quickstart, seven processes (~2.5 minutes on 2 cores)
def test_quickstart_runs_end_to_end(tmp_path):
    """README's first command, as a user runs it: the stdlib docs' corpus, the vocabulary,
    the data, a few steps, the evaluation and the curves (a re-run rebuilds the same
    vocabulary, tests/text/test_vocab.py, and resumes the run, tests/test_train.py)."""
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top
    workdir = tmp_path / "quickstart"
    env = helpers.child_env(PATH=os.pathsep.join([os.path.dirname(sys.executable),
                                                  os.environ.get("PATH", "")]))
    result = subprocess.run(["bash", "tools/quickstart.sh", str(workdir), "2"],
                            cwd=helpers.ROOT, capture_output=True, text=True, timeout=600,
                            env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert [f"== {k}/5" in output for k in range(1, 6)] == [True] * 5
    assert "eval at step 2" in output and "\nDone." in result.stdout
    assert len((workdir / "vocab.txt").read_text().split()) > 1000
    assert (workdir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tools_set_no_environment_of_their_own():
    """A tool's environment is the user's: the TF settings a binary needs are
    `cli.prepare_process()`'s (compat.TF_ENVIRONMENT), and a tool only defaults
    KERAS_BACKEND before Keras is imported. No other write to os.environ (e.g. the
    profiler's XLA_FLAGS, which BENCHMARKS.md tells the user to set)."""
    import ast  # pylint: disable=g-import-not-at-top
    writes = []
    tools = os.path.join(helpers.ROOT, "tools")
    for name in sorted(os.listdir(tools)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(tools, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            target = None
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t for t in targets if isinstance(t, ast.Subscript)
                               and ast.unparse(t.value) == "os.environ"), None)
            elif (isinstance(node, ast.Call) and ast.unparse(node.func) in (
                    "os.environ.update", "os.putenv", "os.environ.setdefault")
                  and ast.unparse(node) != "os.environ.setdefault('KERAS_BACKEND', "
                                           "'tensorflow')"):
                target = node
            if target is not None:
                writes.append(f"{name}:{node.lineno} {ast.unparse(target)}")
    assert not writes, writes
