"""Fine-tuning end to end on toy GLUE-format TSVs, layer-wise rates, the classifier export."""

import csv
import json
import os
import shutil
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from configs import finetune as finetune_configs  # pylint: disable=g-bad-import-order
from electra_tf import errors
from electra_tf.finetuning import loop
from electra_tf.finetuning import tasks
from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning.glue import specs as glue_specs
from electra_tf.model import encoder
from tests import helpers
from tests.serving.test_export import _session_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ = 16
FILLER = [w for w in helpers.WORDS if w not in ("happy", "sad", "big", "small")]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny 'pre-trained' run (random weights): config.json, vocab.txt, a checkpoint."""
    workdir = tmp_path_factory.mktemp("pretrained")
    helpers.write_pretrained_run(workdir, SEQ)
    return str(workdir)


def _sentence(rng, keyword):
    words = [rng.choice(FILLER) for _ in range(rng.randint(2, 6))]
    words.insert(rng.randint(0, len(words)), keyword)
    return " ".join(words)


def _write(path, header, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
        if header:
            out.writerow(header)
        out.writerows(rows)


def _toy_task(directory, task, n, seed):
    """GLUE-layout TSVs of a separable toy task: the label is a keyword's presence."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        positive = rng.random() < 0.5
        if task == "sst2":
            rows.append([_sentence(rng, "happy" if positive else "sad"), int(positive)])
        elif task == "rte":
            rows.append([i, _sentence(rng, rng.choice(FILLER)),
                         _sentence(rng, "big" if positive else "small"),
                         "entailment" if positive else "not_entailment"])
        else:  # stsb: a score, 4.5-5 with the keyword, 0-0.5 without
            score = rng.uniform(4.5, 5.0) if positive else rng.uniform(0.0, 0.5)
            rows.append(["0", "g", "f", "y", "0", "s1", "s2", _sentence(rng, "red"),
                         _sentence(rng, "big" if positive else "small"), f"{score:.2f}"])
    return rows


def _toy_data(tmp_path, task, num_train, num_dev, num_test=0):
    """DIR/train.tsv, DIR/dev.tsv (and DIR/test.tsv, unlabelled, in GLUE's test layout)
    of a toy task; returns DIR."""
    data = tmp_path / "data"
    data.mkdir()
    _write(data / "train.tsv", HEADERS[task], _toy_task(data, task, num_train, seed=0))
    _write(data / "dev.tsv", HEADERS[task], _toy_task(data, task, num_dev, seed=1))
    if num_test:
        header = TEST_HEADERS[task]
        text_columns = [i for i, name in enumerate(header) if name.startswith("sentence")]
        rows = []
        for i, row in enumerate(_toy_task(data, task, num_test, seed=2)):
            test_row = [str(1000 + i)] + ["x"] * (len(header) - 1)  # GLUE's other columns
            for column, text in zip(text_columns, _texts(task, row)):
                test_row[column] = text
            rows.append(test_row)
        _write(data / "test.tsv", header, rows)
    return data


# Where a toy row (GLUE's train/dev layout) has its texts and its label.
_TEXTS = {"sst2": slice(0, 1), "rte": slice(1, 3), "stsb": slice(7, 9)}
_LABEL = {"sst2": 1, "rte": 3, "stsb": 9}


def _texts(task, row):
    return row[_TEXTS[task]]


def _label(task, row):
    return str(row[_LABEL[task]])


TEST_HEADERS = {"sst2": ["index", "sentence"], "rte": ["index", "sentence1", "sentence2"],
                "stsb": ["index", "genre", "filename", "year", "old_index", "source1",
                         "source2", "sentence1", "sentence2"]}
HEADERS = {"sst2": ["sentence", "label"], "rte": ["index", "sentence1", "sentence2", "label"],
           "stsb": ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                    "sentence1", "sentence2", "score"]}


def _config(task, pretrained, data_dir, **train):
    config = finetune_configs.get_config(task)
    config.init_checkpoint = pretrained
    config.data.dir = data_dir
    config.data.max_seq_length = SEQ
    config.train.batch_size = 16  # the learning rate: the tiny model's default (1e-3)
    config.train.epochs = 6
    config.runtime.strategy = "one_device"
    for key, value in train.items():
        config.train[key] = value
    return config


# RTE (sentence pairs) and STS-B (regression) are slow: the exported-classifier test
# below covers pairs quickly, glue/test_data.py and glue/test_metrics.py the regression task
# and its metric.
@pytest.mark.parametrize("task, metric, chance", [
    ("sst2", "accuracy", 0.5),
    pytest.param("rte", "accuracy", 0.5, marks=pytest.mark.slow),
    pytest.param("stsb", "spearman", 0.0, marks=pytest.mark.slow)])
def test_toy_task_beats_chance_and_writes_results(task, metric, chance, pretrained, tmp_path):
    data = _toy_data(tmp_path, task, 192, 64, num_test=40)
    workdir = str(tmp_path / "run")
    config = _config(task, pretrained, str(data))
    config.predict_test = True
    best = loop.finetune(config, workdir)
    print(task, best)  # the figures of the closing note (pytest -s)
    assert best["validation"][metric] > chance + 0.25, best

    saved = json.load(open(os.path.join(workdir, "config.json")))["train"]
    assert (saved["learning_rate"], saved["layerwise_lr_decay"]) == (1e-3, 0.8)  # tiny's
    results = json.load(open(os.path.join(workdir, "results.json")))
    assert results["task"] == task and len(results["evaluations"]) == 6  # once per epoch
    assert results["best"]["metrics"] == best
    best_step = results["best"]["step"]  # only the best checkpoint is kept
    assert sorted(os.listdir(os.path.join(workdir, "best"))) == [
        f"ckpt-{best_step}.data-00000-of-00001", f"ckpt-{best_step}.index"]
    assert results["export"].endswith(os.path.join("export", str(best_step)))
    assert os.path.exists(os.path.join(results["export"], "saved_model.pb"))

    # The best model's test predictions in GLUE's submission format, every row in order.
    name = {"sst2": "SST-2.tsv", "rte": "RTE.tsv", "stsb": "STS-B.tsv"}[task]
    assert "test_metrics" not in results  # GLUE's test labels are hidden
    assert results["test_predictions"] == {"test": os.path.join(workdir, "test_predictions",
                                                                name)}
    lines = open(results["test_predictions"]["test"], encoding="utf-8").read().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 41  # 40 = 2 batches + 8
    ids, predicted = zip(*(line.split("\t") for line in lines[1:]))
    assert ids == tuple(str(1000 + i) for i in range(40))
    truth = [_label(task, row) for row in _toy_task(data, task, 40, seed=2)]
    if task == "stsb":
        assert all(0.0 <= float(p) <= 5.0 for p in predicted)
        assert np.corrcoef([float(p) for p in predicted], [float(t) for t in truth])[0, 1] > 0.5
    else:  # the label as GLUE writes it (0/1, entailment/not_entailment)
        assert set(predicted) <= set(glue_specs.TASKS[task].label_names)
        assert np.mean([p == t for p, t in zip(predicted, truth)]) > chance + 0.25


def test_layerwise_rates_for_every_variable():
    embeddings = encoder.Embeddings(vocabulary_size=30, embedding_size=8)
    enc = encoder.Encoder(embeddings, hidden_size=16, num_layers=3, num_heads=2,
                          intermediate_size=32)
    model = model_lib.Classifier(enc, num_labels=2)
    model({"input_ids": np.zeros((1, 4), "int32"), "input_mask": np.ones((1, 4), "int32"),
           "segment_ids": np.zeros((1, 4), "int32")})
    rates = model_lib.learning_rate_multipliers(model, decay=0.5)
    assert set(rates) == {v.path for v in model.trainable_weights}
    # By object, not by path: Keras numbers layer names per process (embeddings_5).
    def owns(layer, v):
        return any(v is w for w in layer.trainable_weights)
    for v in model.trainable_weights:
        blocks = [i for i, block in enumerate(enc.blocks) if owns(block, v)]
        if owns(enc.embeddings, v) or owns(enc.projection, v):
            want = 0.5 ** 5  # depth 0: decay^(3 + 2)
        elif blocks:
            want = 0.5 ** (3 + 1 - blocks[0])  # depth layer + 1
        else:
            assert not owns(enc, v) and "task_output" in v.path, v.path
            want = 1.0
        assert rates[v.path] == pytest.approx(want), v.path

    # The optimizer applies them: Adam's first step moves each weight by ~lr·rate.
    optimizer = model_lib.LayerwiseAdamW(rates, learning_rate=1e-2, weight_decay=0.0)
    optimizer.build(model.trainable_variables)
    before = [v.numpy() for v in model.trainable_variables]
    optimizer.apply_gradients(zip([tf.ones_like(v) for v in model.trainable_variables],
                                  model.trainable_variables))
    for v, old in zip(model.trainable_variables, before):
        np.testing.assert_allclose(old - v.numpy(), 1e-2 * rates[v.path], rtol=1e-3,
                                   err_msg=v.path)


def test_exported_classifier_runs_in_the_session_loader(pretrained, tmp_path):
    data = _toy_data(tmp_path, "rte", 32, 16)
    workdir = str(tmp_path / "run")
    loop.finetune(_config("rte", pretrained, str(data), epochs=1), workdir)
    export_dir = json.load(open(os.path.join(workdir, "results.json")))["export"]
    texts, pairs = ["the cat sat", ""], ["it was big", "small"]
    got = _session_run(export_dir, {"serving_default": {"text": texts, "text_pair": pairs}},
                       str(tmp_path / "out"))["serving_default"]
    assert got["probabilities"].shape == (2, 2)
    np.testing.assert_allclose(got["probabilities"].sum(-1), 1.0, rtol=1e-5)
    assert set(got["label"].astype(str)) <= {"entailment", "not_entailment"}
    loaded = tf.saved_model.load(export_dir)
    direct = loaded.signatures["serving_default"](text=tf.constant(texts),
                                                  text_pair=tf.constant(pairs))
    np.testing.assert_allclose(got["probabilities"], direct["probabilities"], atol=1e-6)

    # The run exports again from its own files (tools/export_savedmodel.py --workdir=RUN),
    # the same model, whatever becomes of the pre-training run.
    again = tf.saved_model.load(loop.export_run(workdir, str(tmp_path / "models" / "2")))
    redone = again.signatures["serving_default"](text=tf.constant(texts),
                                                 text_pair=tf.constant(pairs))
    np.testing.assert_allclose(redone["probabilities"], direct["probabilities"], atol=1e-6)
    with pytest.raises(errors.UserError, match="no such checkpoint"):
        loop.export_run(workdir, str(tmp_path / "models" / "3"), checkpoint=workdir + "/x")
    (tmp_path / "bad.index").write_bytes(b"x" * 100)  # damaged: one line, no traceback
    with pytest.raises(errors.UserError, match=r"bad: cannot restore the rte model \(not "
                       "an sstable"):
        loop.export_run(workdir, str(tmp_path / "models" / "3"),
                        checkpoint=str(tmp_path / "bad"))


def test_the_config_knows_every_task_without_tensorflow():
    """configs/finetune.py names the tasks before it imports them (they import TF), so
    that a bad one is answered at once (tests/test_tool_errors.py): the registry's."""
    assert finetune_configs.TASK_NAMES == tuple(tasks.TASKS)


def test_the_binary_ends_with_the_tensorboard_command(tmp_path):
    """TensorBoard at the workdir, where the HParams tab lists the metrics (at
    WORKDIR/logs it lists none: training/summaries.py); the run itself is stubbed."""
    stub = ("from electra_tf import cli, finetune\n"
            "from electra_tf.finetuning import loop\n"
            "loop.finetune = lambda config, workdir: {'validation': {'accuracy': 0.5}}\n"
            "cli.app_run(finetune.main)\n")
    result = subprocess.run(
        [sys.executable, "-c", stub, "--config=configs/finetune.py:sst2",
         f"--workdir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=helpers.child_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "best validation: accuracy=0.5000", f"results: {tmp_path}/results.json",
        f"TensorBoard: tensorboard --logdir={tmp_path}"]


@pytest.mark.slow  # three fine-tuning processes
def test_binary_resumes_and_refuses_bad_input(pretrained, tmp_path):
    data = _toy_data(tmp_path, "sst2", 48, 16)
    workdir = str(tmp_path / "run")
    command = helpers.finetune_command("sst2", workdir, pretrained, data,
                                       "--config.train.batch_size=16",
                                       "--config.runtime.strategy=one_device", seq=SEQ)
    result = subprocess.run(command + ["--config.train.epochs=2"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "best validation: accuracy=" in result.stdout
    # The same command, as if the run had stopped after its first epoch, resumes there
    # and trains the second (another schedule is refused: test_validate.py).
    workdir = helpers.rewind(workdir, str(tmp_path / "resumed"), 3)
    result = subprocess.run(command + ["--config.train.epochs=2", f"--workdir={workdir}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Resumed from" in result.stderr and "at step 3" in result.stderr
    steps = [e["step"] for e in json.load(open(os.path.join(workdir, "results.json")))
             ["evaluations"]]
    assert steps == [3, 6]
    export = helpers.run_tool("export_savedmodel.py", f"--workdir={workdir}",
                              f"--output={tmp_path}/models/7")
    assert export.returncode == 0, export.stderr[-3000:]
    assert "signatures: serving_default, serving_ids" in export.stdout
    assert "sst2's model from" in export.stderr

    with open(data / "train.tsv", "a", encoding="utf-8") as f:
        f.write("a sentence with a bad label\t7\n")
    bad = subprocess.run(command + [f"--workdir={tmp_path / 'bad'}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2, bad.stderr[-2000:]
    last = bad.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "train.tsv" in last and ":50" in last, last


@pytest.mark.slow  # three fine-tuning processes, two of them one run
def test_two_local_workers_fine_tune_as_one_worker_does(tmp_path):
    """multi_worker: the same global batches, every dev example evaluated once (20 with
    batch 16: the last batch padded), the same metrics; only the chief writes."""
    # Without dropout: the runs differ only in the order of sums.
    pretrained = tmp_path / "pretrained"
    helpers.write_pretrained_run(pretrained, SEQ, dropout=0.0)
    data = _toy_data(tmp_path, "sst2", 96, 20)
    command = helpers.finetune_command("sst2", None, pretrained, data,
                                       "--config.train.batch_size=16",
                                       "--config.train.epochs=3",
                                       "--config.model.dropout=0.0", seq=SEQ)
    one = subprocess.run(command + [f"--workdir={tmp_path}/one",
                                    "--config.runtime.strategy=one_device"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=helpers.child_env())
    assert one.returncode == 0, one.stderr[-3000:]

    two = str(tmp_path / "two")
    for text in helpers.run_local_workers(
            command + [f"--workdir={two}", "--config.runtime.strategy=multi_worker"],
            str(tmp_path)):
        assert "MultiWorkerMirroredStrategy: 2 replica(s)" in text
        assert text.count("eval validation at step ") == 3, text[-3000:]
        assert "eval validation at step 18 (20 rows): accuracy" in text  # none twice

    a = json.load(open(tmp_path / "one" / "results.json"))
    b = json.load(open(os.path.join(two, "results.json")))
    assert [e["step"] for e in a["evaluations"]] == [e["step"] for e in b["evaluations"]] == [
        6, 12, 18]
    for ea, eb in zip(a["evaluations"], b["evaluations"]):
        assert eb["metrics"]["validation"] == pytest.approx(ea["metrics"]["validation"],
                                                            abs=1e-6), (ea, eb)
    print("one worker:", a["best"], "two workers:", b["best"])  # the closing note's figures
    assert a["best"]["step"] == b["best"]["step"]
    # The same batches and the same updates: the weights agree to float rounding.
    one_ckpt = tf.train.load_checkpoint(str(tmp_path / "one" / "checkpoints"))
    two_ckpt = tf.train.load_checkpoint(os.path.join(two, "checkpoints"))
    names = [n for n, _ in tf.train.list_variables(str(tmp_path / "one" / "checkpoints"))
             if n.startswith(("model/", "optimizer/_trainable_variables/"))
             and "OPTIMIZER_SLOT" not in n]  # every weight (the encoder's via the optimizer)
    assert len(names) > 10
    for name in names:
        x, y = one_ckpt.get_tensor(name), two_ckpt.get_tensor(name)
        # + 1e-6: the attention key biases get only rounding (their gradient is 0 in exact
        # arithmetic), ~1e-10 after Adam, in another order on each side.
        np.testing.assert_allclose(y, x, rtol=1e-3, atol=1e-5 * np.abs(x).max() + 1e-6,
                                   err_msg=name)
    assert os.path.exists(os.path.join(b["export"], "saved_model.pb"))
    assert not os.path.exists(os.path.join(two, "tmp"))  # the other worker's, removed
    assert sorted(os.listdir(os.path.join(two, "best"))) == sorted(
        os.listdir(tmp_path / "one" / "best"))


@pytest.mark.parametrize("override, message", [
    ({"init_checkpoint": "/nonexistent/ckpt-3"}, "neither a run directory"),
    ({"train.batch_size": 0}, "config.train.batch_size=0: must be a whole number >= 1"),
    ({"train.epochs": 0.0}, "config.train.epochs=0.0: must be a number > 0"),
    ({"data.max_seq_length": 2}, "config.data.max_seq_length=2: must be a whole number >= 3"),
    ({"train.learning_rate": -1e-3}, "config.train.learning_rate=-0.001: must be a number >= 0"),
    ({"data.dir": "/nonexistent/glue"}, "config.data.dir='/nonexistent/glue'"),
])
def test_bad_config_is_a_one_line_error(override, message, pretrained, tmp_path):
    data = _toy_data(tmp_path, "sst2", 32, 16)
    config = _config("sst2", pretrained, str(data))
    for key, value in override.items():
        if "." in key:
            section, name = key.split(".")
            config[section][name] = value
        else:
            config[key] = value
    with pytest.raises(errors.UserError, match=message):
        loop.finetune(config, str(tmp_path / "run"))


def test_resume_with_a_different_batch_size_is_refused(pretrained, tmp_path):
    data = _toy_data(tmp_path, "sst2", 32, 16)
    workdir = str(tmp_path / "run")
    loop.finetune(_config("sst2", pretrained, str(data), epochs=1), workdir)
    with pytest.raises(errors.UserError, match="config.train.batch_size=8 differs"):
        loop.finetune(_config("sst2", pretrained, str(data), epochs=1, batch_size=8), workdir)
    # A rate left to the pre-trained model (0) is compared once filled: here the run's
    # was given (5e-4), the model's default is tiny's 1e-3.
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved["train"]["learning_rate"] == 1e-3
    json.dump(dict(saved, train=dict(saved["train"], learning_rate=5e-4)),
              open(os.path.join(workdir, "config.json"), "w"))
    with pytest.raises(errors.UserError, match=r"^config.train.learning_rate=0.001 \(the "
                       r"pre-trained model's default\) differs from the run in .* \(0.0005\)"):
        loop.finetune(_config("sst2", pretrained, str(data), epochs=1), workdir)
    # A run of an earlier version (no adam_bias_correction in its config.json) was
    # bias-corrected: it does not take the new default silently.
    del saved["train"]["adam_bias_correction"]
    json.dump(saved, open(os.path.join(workdir, "config.json"), "w"))
    with pytest.raises(errors.UserError, match=r"config.train.adam_bias_correction=False "
                                               r"differs from the run in .* \(True\)"):
        loop.finetune(_config("sst2", pretrained, str(data), epochs=1), workdir)
    # The same pre-trained run however its path is spelt resumes.
    again = _config("sst2", pretrained + "/", str(data), epochs=1)
    again.train.adam_bias_correction = True
    loop._check_resume_config(again, workdir, tasks.get("sst2", again))  # pylint: disable=protected-access
    # Nor from another pre-trained model: it would report this run's model as its own.
    other = str(tmp_path / "other_pretrained")
    shutil.copytree(pretrained, other)
    with pytest.raises(errors.UserError, match=f"config.init_checkpoint={other} differs"):
        loop.finetune(_config("sst2", other, str(data), epochs=1), workdir)
    # A fine-tuning run is not a pre-training run, nor the other way round.
    with pytest.raises(errors.UserError, match="not a pre-training run"):
        loop.finetune(_config("sst2", workdir, str(data)), str(tmp_path / "run2"))
    with pytest.raises(errors.UserError, match=f"^{pretrained} holds a run that is not a "
                       "fine-tuning run"):
        loop.finetune(_config("sst2", pretrained, str(data)), pretrained)
