"""create_pretraining_data on Apache Beam: the same examples as the in-process writer,
with any number of workers; named corpus errors; a killed run leaves no dataset."""

import collections
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from electra_tf.data import beam
from electra_tf.data import examples
from electra_tf.data import pipeline
from electra_tf.data import writer
from electra_tf.text import corpus
from tests import helpers

SEQ = 32
TWO_WORKERS = "runner=DirectRunner,direct_num_workers=2,direct_running_mode=multi_processing"
IN_MEMORY = "runner=DirectRunner,direct_num_workers=1"
# Whatever the manifest says of the data (not when it was made, nor how it is sharded).
SAME = ("num_examples", "num_documents", "num_sentences", "num_tokens", "truncated_tokens",
        "truncated_examples", "max_seq_length", "seed", "vocab", "tokenizer", "source")
SAME_INPUT = ("files", "bytes", "lines", "invalid_utf8_lines", "truncated_lines",
              "empty_files", "letterless_sentences")


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    """Several files: plain, gzipped, empty, one with a bad line, one split into ranges."""
    root = tmp_path_factory.mktemp("corpus")
    vocab = helpers.write_vocab(str(root))
    paths = [helpers.write_corpus(str(root), num_documents=30, seed=i, name=f"c{i}.txt")
             for i in range(3)]
    big = helpers.write_corpus(str(root), num_documents=400, seed=7, name="big.txt")
    with open(big, "ab") as f:
        f.write(b"the cat \xff\xfe sat .\n\nthe dog ran .\n")
    with open(paths[0], "rb") as f, gzip.open(str(root / "c0.txt.gz"), "wb") as g:
        g.write(f.read())
    os.remove(paths[0])
    (root / "c3.txt").write_bytes(b"")
    pattern = ",".join([str(root / "c*.txt*"), big])
    return vocab, pattern, big


def write(out, vocab, pattern, options=None, **kwargs):
    source = corpus.open_corpus(pattern)
    kwargs = dict(max_seq_length=SEQ, seed=3, log=lambda _: None, **kwargs)
    if options is None:
        return writer.write_pretraining_data(source, vocab, str(out), num_shards=2, **kwargs)
    return beam.write_pretraining_data(source, vocab, str(out),
                                       beam.pipeline_options(options), **kwargs)


def read(directory):
    with open(os.path.join(directory, writer.MANIFEST)) as f:
        manifest = json.load(f)
    files = [os.path.join(directory, shard["file"]) for shard in manifest["shards"]]
    rows = []
    for batch in tf.data.TFRecordDataset(files).batch(4096):
        parsed = examples.parse(batch, SEQ)
        rows += [tuple(map(tuple, row)) for row in
                 zip(*(parsed[name].numpy().tolist() for name in examples.FEATURE_NAMES))]
    return manifest, collections.Counter(rows)


def assert_same_data(one, other):
    (m1, rows1), (m2, rows2) = read(one), read(other)
    assert rows1 == rows2 and sum(rows1.values()) == m1["num_examples"] > 0
    assert {k: m1[k] for k in SAME} == {k: m2[k] for k in SAME}
    assert ({k: m1["input"][k] for k in SAME_INPUT} ==
            {k: m2["input"][k] for k in SAME_INPUT})
    return m1, m2


def test_two_workers_write_the_examples_of_the_in_process_writer(
        tmp_path, corpus_files, monkeypatch):
    vocab, pattern, big = corpus_files
    # The big file in ranges that start inside documents (read on the driver).
    monkeypatch.setattr(beam, "RANGE_BYTES", os.path.getsize(big) // 5 + 1)
    write(tmp_path / "in_process", vocab, pattern)
    result = write(tmp_path / "beam", vocab, pattern, TWO_WORKERS)
    in_process, on_beam = assert_same_data(tmp_path / "in_process", tmp_path / "beam")
    assert on_beam["input"]["invalid_utf8_lines"] == 1 and on_beam["num_documents"] == 491
    assert on_beam["input"]["empty_files"] == [str(os.path.dirname(big)) + "/c3.txt"]
    assert result.num_examples == on_beam["num_examples"] and result.num_shards >= 1
    # Nothing of the job is left beside the dataset, and training reads it as it is.
    assert sorted(os.listdir(tmp_path / "beam")) == sorted(
        [writer.MANIFEST] + [s["file"] for s in on_beam["shards"]])
    assert pipeline.resolve_files(str(tmp_path / "beam"), SEQ, vocab)
    assert in_process["num_examples"] == on_beam["num_examples"]


def test_in_memory_runner_and_another_split_write_the_same(tmp_path, corpus_files,
                                                           monkeypatch):
    vocab, pattern, _ = corpus_files
    write(tmp_path / "in_process", vocab, pattern)
    monkeypatch.setattr(beam, "RANGE_BYTES", 2000)  # many ranges, of every file
    write(tmp_path / "beam", vocab, pattern, IN_MEMORY)
    assert_same_data(tmp_path / "in_process", tmp_path / "beam")


def test_tfds_source(tmp_path):
    texts = [f"Sentence {i} is here. And another one, {i}!\nA paragraph.".encode()
             for i in range(50)]
    # Skipped input is named by its example, as the in-process reader numbers them.
    texts[11], texts[30] = b"Not \xff UTF-8.", b"A sentence. 1234. Another."
    texts[40] = b"\xfe no."
    data_dir = helpers.write_tfds_dataset(str(tmp_path / "tfds"), "beam_text_corpus", texts,
                                          num_shards=3)
    vocab = helpers.write_vocab(str(tmp_path), words=helpers.WORDS + ["sentence", "is",
                                                                        "here", "another"])
    for name, options in (("in_process", None), ("beam", IN_MEMORY)):
        source = corpus.open_corpus(tfds_name="beam_text_corpus:train",
                                    tfds_data_dir=data_dir)
        kwargs = dict(max_seq_length=SEQ, seed=3, log=lambda _: None)
        if options:
            beam.write_pretraining_data(source, vocab, str(tmp_path / name),
                                        beam.pipeline_options(options), **kwargs)
        else:
            writer.write_pretraining_data(source, vocab, str(tmp_path / name), **kwargs)
    in_process, on_beam = assert_same_data(tmp_path / "in_process", tmp_path / "beam")
    assert on_beam["num_documents"] == 48 and on_beam["input"]["documents"] == 50
    # Example n is the n-th of the split's shards read one after another (TFDS shuffles
    # on writing), on both paths, and so is the first one skipped.
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    builder = tfds.builder("beam_text_corpus", data_dir=data_dir)
    assert len(builder.info.splits["train"].shard_lengths) == 3
    read = [x["text"] for x in tfds.as_numpy(builder.as_dataset(
        split="train", read_config=tfds.ReadConfig(interleave_cycle_length=1)))]
    first_bad = 1 + min(read.index(texts[11]), read.index(texts[40]))
    for key, n in (("first_invalid_utf8", first_bad),
                   ("first_letterless", 1 + read.index(texts[30]))):
        assert on_beam["input"][key] == in_process["input"][key] == \
            f"beam_text_corpus:train:example {n}"


def test_merged_stats_name_the_first_place_in_any_grouping():
    """A Beam combiner merges partial merges: the first place is still the lowest."""
    def part(order, place):
        return {"order": [order], "invalid_utf8_lines": 1, "first_invalid_utf8": place}
    late, early, clean = part(9, "late"), part(2, "early"), {"order": [1], "lines": 3}
    for grouping in ([[late, clean], [early]], [[early], [clean, late]], [[late, early, clean]]):
        merged = beam._merge_stats([beam._merge_stats(group) for group in grouping])  # pylint: disable=protected-access
        assert merged["first_invalid_utf8"] == "early" and merged["invalid_utf8_lines"] == 2


def test_a_bad_file_is_named_and_nothing_is_written(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    good = helpers.write_corpus(str(tmp_path), num_documents=5)
    bad = tmp_path / "bad.txt.gz"
    bad.write_bytes(b"not gzip at all\n")
    with pytest.raises(corpus.CorpusError, match=r"bad\.txt\.gz: cannot read line 1"):
        write(tmp_path / "out", vocab, f"{good},{bad}", IN_MEMORY)
    assert os.listdir(tmp_path / "out") == []  # no shard, no manifest, no staging


def test_a_cased_vocab_for_lower_cased_text_is_refused_before_the_job(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path), [w.title() for w in helpers.WORDS])
    good = helpers.write_corpus(str(tmp_path), num_documents=5)
    with pytest.raises(helpers.tokenizer.VocabError, match="pass --nolower_case"):
        write(tmp_path / "out", vocab, good, IN_MEMORY)
    assert not os.path.exists(tmp_path / "out")


def test_a_killed_runs_leftovers_are_removed_and_an_existing_dataset_kept(
        tmp_path, corpus_files):
    vocab, pattern, _ = corpus_files
    out = tmp_path / "out"
    write(out, vocab, pattern, IN_MEMORY)
    before = helpers.snapshot(str(out))
    # What a run killed half-way leaves: staged shards and progress, no new manifest.
    leftovers = out / beam.STAGING / "shards"
    leftovers.mkdir(parents=True)
    (leftovers / "0123.tfrecord").write_bytes(b"half a record")
    with pytest.raises(writer.OutputExistsError):
        write(out, vocab, pattern, IN_MEMORY)
    assert (leftovers / "0123.tfrecord").exists()  # refused: nothing touched
    write(out, vocab, pattern, IN_MEMORY, overwrite=True)
    after = helpers.snapshot(str(out))
    assert not any(name.startswith(beam.STAGING) for name in after)
    assert ({k: v for k, v in before.items() if k != writer.MANIFEST} ==
            {k: v for k, v in after.items() if k != writer.MANIFEST})
    shutil.rmtree(out)


def test_pipeline_options_are_checked():
    assert beam.pipeline_options(TWO_WORKERS).get_all_options()["direct_num_workers"] == 2
    # Dataflow's options, some stored under another name than the flag's.
    dataflow = beam.pipeline_options("runner=DataflowRunner,project=p,region=r,"
                                     "worker_machine_type=n1-standard-4,no_use_public_ips")
    assert dataflow.get_all_options()["machine_type"] == "n1-standard-4"
    for spec, reason in (("runner=DirectRunner,num_wrkers=2", "unknown option 'num_wrkers'"),
                         ("direct_num_workers=abc", "invalid int value: 'abc'"),
                         ("runner=NoSuchRunner", "Unexpected pipeline runner: NoSuchRunner"),
                         (" , ", "empty")):
        with pytest.raises(beam.errors.UserError, match=reason):
            beam.pipeline_options(spec)


def test_tool_runs_on_beam_and_refuses_num_shards(tmp_path, corpus_files):
    vocab, pattern, _ = corpus_files
    args = [f"--input={pattern}", f"--vocab_file={vocab.path}", f"--max_seq_length={SEQ}",
            f"--beam_pipeline_options={IN_MEMORY}"]
    result = helpers.run_tool("create_pretraining_data.py", *args,
                              f"--output_dir={tmp_path / 'out'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "shard(s) to" in result.stdout and "MB/s" in result.stdout
    # What reading skipped is told as in process (the workers' stats, merged).
    assert "warning: 1 line(s) of invalid UTF-8 skipped, first at " in result.stdout
    assert "warning: 1 empty file(s) skipped" in result.stdout
    refused = helpers.run_tool("create_pretraining_data.py", *args, "--num_shards=3",
                               f"--output_dir={tmp_path / 'other'}")
    assert "--num_shards" in helpers.one_line_error(refused)
    assert not (tmp_path / "other").exists()


@pytest.mark.slow  # a Beam job killed with its workers, then the same command again
def test_sigkill_leaves_no_manifest_and_the_rerun_starts_clean(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    for i in range(4):
        helpers.write_corpus(str(tmp_path), num_documents=3000, seed=i, name=f"c{i}.txt")
    out = tmp_path / "out"
    command = [sys.executable, os.path.join(helpers.ROOT, "tools",
                                            "create_pretraining_data.py"),
               f"--input={tmp_path / 'c*.txt'}", f"--vocab_file={vocab.path}",
               f"--output_dir={out}", f"--max_seq_length={SEQ}",
               f"--beam_pipeline_options={TWO_WORKERS}"]
    job = subprocess.Popen(command, env=helpers.child_env(), start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shards = out / beam.STAGING / "shards"
    deadline = time.monotonic() + 300
    while not (shards.exists() and any(p.stat().st_size for p in shards.iterdir())):
        assert job.poll() is None and time.monotonic() < deadline, "no shard was written"
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)  # the driver and its worker processes
    job.wait()
    assert not (out / writer.MANIFEST).exists()
    rerun = subprocess.run(command, env=helpers.child_env(), capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    manifest, rows = read(out)
    assert sum(rows.values()) == manifest["num_examples"] > 0
    assert sorted(os.listdir(out)) == sorted(
        [writer.MANIFEST] + [s["file"] for s in manifest["shards"]])


def test_tool_names_a_bad_file_met_by_a_worker_process(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    good = helpers.write_corpus(str(tmp_path), num_documents=5)
    (tmp_path / "bad.txt.gz").write_bytes(b"not gzip at all\n")
    result = helpers.run_tool(
        "create_pretraining_data.py", f"--input={good},{tmp_path / 'bad.txt.gz'}",
        f"--vocab_file={vocab.path}", f"--output_dir={tmp_path / 'out'}",
        f"--beam_pipeline_options={TWO_WORKERS}")
    assert "bad.txt.gz: cannot read line 1" in helpers.one_line_error(result)
    assert os.listdir(tmp_path / "out") == []


_HELD_SCRIPT = r"""
import logging as std_logging, os, sys, tempfile, types
from absl import logging
from electra_tf import compat
from electra_tf.data import beam
beam_logger = std_logging.getLogger("apache_beam")
beam_logger.setLevel(std_logging.INFO)
with tempfile.TemporaryFile() as held:
    with beam._workers_stderr_held(held):
        os.system("echo worker-line >&2")  # a process started meanwhile: held
        logging.warning("driver-warning")  # the driver's own: shown
        print("driver-print", file=sys.stderr)
    held.seek(0)
    print("HELD", held.read().decode().split())
print("after", file=sys.stderr)
levels = []
job = types.SimpleNamespace(run=lambda: types.SimpleNamespace(
    wait_until_finish=lambda: levels.append(beam_logger.level)))
beam._run(job, None, None)
print("LEVELS", levels, beam_logger.level)

# A job that ends while the thread owning a worker process is still alive: the thread
# raises as its process ends with an abort, after the job has returned (the later of the
# two moments Beam's thread may raise; test_compat runs Beam's own).
import threading, time
def worker():
    time.sleep(0.5)
    raise RuntimeError("Worker subprocess exited with return code 134")
def pipeline(fails):
    def run():
        threading.Thread(target=worker, name=compat.BEAM_WORKER_THREAD).start()
        if fails:
            raise RuntimeError("the job failed")
        return types.SimpleNamespace(wait_until_finish=lambda: None)
    return types.SimpleNamespace(run=run)
staging = tempfile.mkdtemp()
os.mkdir(os.path.join(staging, "errors"))
job = types.SimpleNamespace(path=lambda *names: os.path.join(staging, *names))
for case in ("corpus", "other", "success"):
    if case == "corpus":
        with open(os.path.join(staging, "errors", "0"), "w") as f:
            f.write("bad.txt.gz: cannot read line 1")
    elif case == "other":
        os.remove(os.path.join(staging, "errors", "0"))
    print("CASE", case, file=sys.stderr, flush=True)
    try:
        beam._run(pipeline(fails=case != "success"), job, None)
        print("RAISED", case, None)
    except Exception as e:
        print("RAISED", case, type(e).__name__, str(e))
    sys.stderr.flush()
    time.sleep(1.0)  # a thread's traceback printed late would land here, in its case
print("HOOK", threading.excepthook is threading.__excepthook__)
"""


def test_only_the_runs_workers_are_quiet():
    """Beam's logger is quiet and the worker processes' stderr held aside while the
    pipeline runs, and only then: the driver's own warnings reach stderr meanwhile, and
    the process's logging, file descriptors and thread excepthook are as they were after.
    The exception of Beam's thread owning a worker process is held with the workers'
    stderr."""
    result = subprocess.run([sys.executable, "-c", _HELD_SCRIPT], cwd=helpers.ROOT,
                            capture_output=True, text=True, timeout=300,
                            env=helpers.child_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "HELD ['worker-line']" in result.stdout
    assert "worker-line" not in result.stderr
    for line in ("driver-warning", "driver-print", "after"):
        assert line in result.stderr, line
    # CRITICAL (50) while it ran, INFO (20) again after.
    assert "LEVELS [50] 20" in result.stdout, result.stdout
    # A worker's thread that raises as the failed job ends: held with the workers'
    # stderr, so a bad corpus file is still one line; another failure shows it.
    assert "RAISED corpus CorpusError bad.txt.gz: cannot read line 1" in result.stdout
    assert "RAISED other RuntimeError the job failed" in result.stdout
    # A job that succeeds all the same: the traceback printed as without the hold.
    assert "RAISED success None" in result.stdout
    corpus_case, rest = result.stderr.split("CASE corpus")[1].split("CASE other")
    other_case, success_case = rest.split("CASE success")
    assert "return code 134" not in corpus_case and "Traceback" not in corpus_case, \
        corpus_case
    for shown in (other_case, success_case):
        assert "Exception in thread run_worker" in shown, shown
        assert "RuntimeError: Worker subprocess exited with return code 134" in shown
    assert "HOOK True" in result.stdout
