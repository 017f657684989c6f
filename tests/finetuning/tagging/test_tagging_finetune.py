"""Tagging fine-tuning: the presets, the task's reading of a CoNLL directory, and (slow) a
tiny model that learns the generated set (`generated.py`), resumes, and whose export
answers raw text with the entities' character spans."""

import json
import os
from unittest import mock

import numpy as np
import pytest

from configs import finetune as finetune_configs  # pylint: disable=g-bad-import-order
from electra_tf import errors
from electra_tf.finetuning import loop
from electra_tf.finetuning import tasks
from electra_tf.finetuning.tagging import conll
from electra_tf.finetuning.tagging import metrics
from tests import helpers
from tests.finetuning.tagging import generated

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SEQ = 32   # the generated long sentences (~50 words) need several windows


def _columns(path):
    """A predictions file's sentences as rows of (word, gold tag, predicted tag)."""
    with open(path, encoding="utf-8") as f:
        blocks = f.read().strip("\n").split("\n\n")
    return [[row.split() for row in block.splitlines()] for block in blocks]


def _config(name, pretrained, data_dir, **overrides):
    config = finetune_configs.get_config(name)
    config.init_checkpoint = pretrained
    config.data.dir = data_dir
    config.data.max_seq_length = SEQ
    config.runtime.strategy = "one_device"
    for key, value in overrides.items():
        section, field = key.split(".")
        config[section][field] = value
    return config


def test_presets_have_the_originals_hyperparameters():
    ner, chunk = (finetune_configs.get_config(n) for n in ("conll2003,large", "conll2000"))
    assert (ner.task, ner.data.max_seq_length, ner.train.epochs, ner.train.batch_size,
            ner.train.learning_rate, ner.train.layerwise_lr_decay) == (
                "conll2003", 128, 3.0, 32, 5e-5, 0.9)
    assert (chunk.data.max_seq_length, chunk.train.learning_rate,  # lr from the model
            chunk.train.warmup_proportion, chunk.train.weight_decay) == (256, 0.0, 0.1, 0.01)
    assert (ner.data.scheme, chunk.data.scheme, ner.model.label_scheme) == (
        "auto", "auto", "bioes")
    anything = finetune_configs.get_config("tagging,small")
    assert (anything.data.max_seq_length, anything.model.entity_types,
            anything.train.learning_rate, anything.train.layerwise_lr_decay) == (
                128, "", 1e-4, 0.8)
    assert tasks.get("conll2003").primary_metric == "f1"


def test_read_takes_the_types_from_the_training_file_and_labels_first_pieces(tmp_path):
    data = generated.write_set(tmp_path, 40, 10, scheme="iob1", num_test=5,
                               names=("eng.train", "eng.testa", "eng.testb"))
    config = _config("conll2003", "", data, **{"data.stride": 10})
    config.predict_test = True
    vocab = helpers.write_vocab(str(tmp_path))
    task = tasks.get("conll2003", config)
    task.check_config()
    read = task.read(vocab, lower_case=True)
    assert config.model.entity_types == "LOC,ORG,PER"   # saved with config.json
    assert task.labels[:5] == ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    assert read.train.summary.startswith("40 sentences in ")
    assert read.train.summary.endswith(f"from {data}/eng.train (0 skipped); entity types "
                                       "LOC, ORG, PER (from it, saved in config.json); tags "
                                       "IOB1 (detected from it, saved in config.json)")
    assert list(read.evals) == ["validation"] and list(read.tests) == ["test"]
    columns = read.train.columns
    sentences = conll.read(os.path.join(data, "eng.train"), "iob1")
    # Every word labelled once, in the model's scheme (BIOES), at its first piece.
    assert columns["label_mask"].sum() == sum(len(w) for w in sentences.words)
    labelled = [task.labels[i] for i in columns["labels"][columns["label_mask"] == 1]]
    # Windows follow the sentences, and their labelled positions the words: in order.
    assert labelled == [t for tags in sentences.tags
                        for t in conll.tags(conll.spans(tags), len(tags), "bioes")]
    first_pieces = [vocab.tokens[i] for i in columns["input_ids"][columns["label_mask"] == 1]]
    assert first_pieces[:3] == [w.lower() for w in sentences.words[0][:3]]
    # A dev type the training file never had: one line naming file:line.
    dev = open(os.path.join(data, "eng.testa"), encoding="utf-8").read()
    open(os.path.join(data, "eng.testa"), "w", encoding="utf-8").write(
        dev.replace("B-PER", "B-MISC", 1).replace("I-PER", "I-MISC", 1))
    config.model.entity_types = ""
    with pytest.raises(conll.TaggingDataError, match=r"eng.testa:\d+: tag '[BI]-MISC': "
                       r"the training data has no type 'MISC' \(its types: LOC, ORG, PER\)"):
        tasks.get("conll2003", config).read(vocab, lower_case=True)


def test_conll2003_from_tfds_prepared_locally_reads_as_the_files(tmp_path):
    """TFDS's own conll2003 builder, its download replaced by our files."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from etils import epath  # pylint: disable=g-import-not-at-top
    files = generated.write_set(tmp_path / "files", 30, 8, num_test=5,
                                names=("train.txt", "valid.txt", "test.txt"))
    for name in ("train.txt", "valid.txt", "test.txt"):  # CoNLL-2003's four columns
        items = conll.read(os.path.join(files, name), "iob2")
        generated.write(os.path.join(files, name),
                        [(w, conll.spans(t)) for w, t in zip(items.words, items.tags)],
                        columns=4)
    tfds_dir = str(tmp_path / "tfds")
    with mock.patch.object(tfds.download.DownloadManager, "download_and_extract",
                           return_value=epath.Path(files)):
        tfds.builder("conll2003", data_dir=tfds_dir).download_and_prepare()
    config = _config("conll2003", "", "")
    config.data.tfds_data_dir = tfds_dir
    config.predict_test = True
    task = tasks.get("conll2003", config)
    task.check_config()
    read = task.read(helpers.write_vocab(str(tmp_path)), lower_case=True)
    assert read.evals["validation"].summary.startswith("8 sentences in ")
    assert "from conll2003:dev (0 skipped)" in read.evals["validation"].summary
    assert config.data.scheme == "iob2"   # TFDS's tags
    for split, name in (("train", "train.txt"), ("validation", "valid.txt"),
                        ("test", "test.txt")):
        from_tfds = conll.read_tfds("conll2003", split, tfds_dir, "iob2")
        from_file = conll.read(os.path.join(files, name), "iob2")
        def rows(read):  # (TFDS stores the sentences shuffled)
            return sorted(zip(map(tuple, read.words), map(tuple, read.tags)))
        assert rows(from_tfds) == rows(from_file)
    with pytest.raises(conll.TaggingDataError, match="conll2003 is not prepared in"):
        conll.read_tfds("conll2003", "train", str(tmp_path / "empty"), "iob2")
    with pytest.raises(conll.TaggingDataError, match="TFDS has no conll2000 builder"):
        conll.read_tfds("conll2000", "train", tfds_dir, "iob2")


@pytest.mark.parametrize("written,configured,expected", [
    ("iob2", "auto", "iob2"), ("iob1", "auto", "iob1"), ("bioes", "auto", "bioes"),
    ("iob2", "iob1", "iob1")])   # a configured scheme wins
def test_the_files_scheme_is_detected_saved_and_written(tmp_path, written, configured,
                                                        expected):
    """CoNLL-2003's copies are IOB2 (TFDS, train.txt/valid.txt), its eng.* files IOB1:
    the training file's scheme is used (strict mode accepts the file) and the
    predictions are written in it, so a perfect prediction scores 100 accuracy."""
    data = generated.write_set(tmp_path, 20, 5, scheme=written, num_test=4)
    config = _config("conll2003", "", data, **{"data.scheme": configured,
                                               "data.strict": configured == "auto"})
    config.predict_test = True
    task = tasks.get("conll2003", config)
    task.check_config()
    read = task.read(helpers.write_vocab(str(tmp_path)), lower_case=True)
    assert config.data.scheme == expected    # saved with config.json, used by the export
    if configured == "auto":
        assert f"tags {expected.upper()} (detected from it" in read.train.summary
    rows = read.evals["validation"]
    sentences = rows.payload[0]
    logits = np.eye(len(task.labels), dtype=np.float32)[rows.columns["labels"]]  # perfect
    predicted = task.predicted_tags(rows, logits)
    assert (predicted == sentences.tags) == (written == expected)
    if written == expected:
        assert metrics.evaluate(sentences.tags, predicted)["accuracy"] == 100.0
    # The test file is scored as dev is (results.json's test_metrics), beside its file.
    tests = read.tests["test"]
    perfect = np.eye(len(task.labels), dtype=np.float32)[tests.columns["labels"]]
    tested = task.predict_test("test", tests, perfect)
    assert list(tested.files) == ["test_predictions.txt"]
    assert tested.metrics == metrics.evaluate(tests.payload[0].tags,
                                              task.predicted_tags(tests, perfect))
    assert tested.metrics["f1"] == 100.0


@pytest.mark.parametrize("overrides,message", [
    ({"data.dir": ""}, "config.data.dir is empty: give the directory of the CoNLL files"),
    ({"data.scheme": "bio"}, "config.data.scheme='bio': choose one of auto, iob1, iob2, bioes"),
    ({"data.stride": 31}, r"config.data.stride=31: must be in 1..30"),
])
def test_bad_configs_are_one_line(overrides, message):
    config = _config("tagging", "", "/data", **overrides)
    with pytest.raises(errors.UserError, match=message):
        tasks.get("tagging", config).check_config()


def test_a_missing_file_names_the_set_directory(tmp_path):
    data = generated.write_set(tmp_path / "data", 10, 0)
    pretrained = str(tmp_path / "pretrained")
    helpers.write_pretrained_run(pretrained, SEQ)
    with pytest.raises(errors.UserError, match=r"config.data.dir='.*data': no dev.txt or "
                       r"valid.txt or eng.testa \(plain or .gz\) in .*data$"):
        loop.finetune(_config("tagging", pretrained, data), str(tmp_path / "run"))
    # CoNLL-2000 ships train and test files only: the original evaluates on the test set.
    with pytest.raises(errors.UserError, match=r"in .*data \(CoNLL-2000 has no dev file: "
                       r"the original ELECTRA evaluates its chunking on the test set, "
                       r"placed as dev.txt\)$"):
        loop.finetune(_config("conll2000", pretrained, data), str(tmp_path / "run2"))


def _rest_example():
    text = open(os.path.join(ROOT, "docs", "tagging.md"), encoding="utf-8").read()
    return [json.loads(text.split(f"<!-- {marker} -->", 1)[1].split("```", 2)[1]
                       .split("\n", 1)[1])
            for marker in ("tagging-rest-request", "tagging-rest-response")]


@pytest.mark.slow  # a fine-tuning run of 375 steps (about two minutes), an export process
def test_tiny_model_learns_the_generated_set_resumes_and_its_export_answers(tmp_path):
    pretrained = str(tmp_path / "pretrained")
    helpers.write_pretrained_run(pretrained, SEQ)
    data = generated.write_set(tmp_path / "data", 4000, 200, num_test=50)
    workdir = str(tmp_path / "run")
    config = _config("tagging", pretrained, data)
    config.predict_test = True
    best = loop.finetune(config, workdir)["validation"]
    print(best)  # the figures of the closing note (pytest -s)
    assert best["f1"] > 75 and best["accuracy"] > 90, best
    assert {"PER_f1", "LOC_f1", "ORG_f1"} <= set(best)
    results = json.load(open(os.path.join(workdir, "results.json")))
    assert results["best"]["files"] == ["predictions.txt"]
    assert os.listdir(os.path.join(workdir, "logs", "validation"))
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved["model"]["entity_types"] == "LOC,ORG,PER"
    # predictions.txt: conlleval's input, whose scores are the run's.
    sentences = _columns(os.path.join(workdir, "predictions.txt"))
    dev = conll.read(os.path.join(data, "dev.txt"), "iob2")
    assert [[r[0] for r in s] for s in sentences] == dev.words
    assert metrics.evaluate([[r[1] for r in s] for s in sentences],
                            [[r[2] for r in s] for s in sentences])["f1"] == pytest.approx(
                                results["best"]["metrics"]["validation"]["f1"])
    # test_predictions.txt: the same columns for the test file, one row a word.
    tested = _columns(os.path.join(workdir, "test_predictions.txt"))
    test = conll.read(os.path.join(data, "test.txt"), "iob2")
    assert [[r[0] for r in s] for s in tested] == test.words
    assert [[r[1] for r in s] for s in tested] == test.tags
    test_scores = metrics.evaluate(test.tags, [[r[2] for r in s] for s in tested])
    print("test f1", test_scores["f1"])  # with `best` above: the figures of a closing note
    assert test_scores["f1"] > 75  # dev's threshold; measured 87.5 on test, 88.9 on dev
    # results.json scores the test file as dev is scored: its own predictions' figures.
    assert results["test_metrics"] == {"test": pytest.approx(test_scores)}

    # The same command again resumes the finished run: nothing retrained.
    assert loop.finetune(_config("tagging", pretrained, data), workdir)["validation"] == best
    with pytest.raises(errors.UserError, match="config.data.stride=5 differs"):
        loop.finetune(_config("tagging", pretrained, data, **{"data.stride": 5}), workdir)

    # The export, in TF Serving's session loader: raw text → the gold entities' spans;
    # pre-split words → predictions.txt's tags.
    texts = [" ".join(w) for w in dev.words[:30]]
    width = max(len(w) for w in dev.words[:30])
    words = np.array([w + [""] * (width - len(w)) for w in dev.words[:30]], object)
    request, response = _rest_example()
    got = helpers.session_run(results["export"], {
        "text": ("serving_default", {"text": np.array(texts, object)}),
        "words": ("words", {"words": words}),
        "rest": (request["signature_name"], {"text": np.array(
            [i["text"] for i in request["instances"]], object)})}, str(tmp_path / "out"))
    served_tags = [[t.decode() for t in row[:len(w)]]
                   for row, w in zip(got["words"]["tags"], dev.words[:30])]
    assert served_tags == [[r[2] for r in s] for s in sentences[:30]]
    right = 0
    for i, text in enumerate(texts):
        n = got["text"]["num_entities"][i]
        found = {(got["text"]["entity_type"][i, e].decode(),
                  text[got["text"]["entity_start"][i, e]:got["text"]["entity_end"][i, e]])
                 for e in range(n)}
        for e in range(n):
            assert got["text"]["entity_text"][i, e].decode() == text[
                got["text"]["entity_start"][i, e]:got["text"]["entity_end"][i, e]]
        gold = {(s.type, " ".join(dev.words[i][s.start:s.end])) for s in conll.spans(
            dev.tags[i])}
        right += found == gold
    assert right >= 20, right
    rest = got["rest"]
    print({k: v.tolist() for k, v in rest.items()})  # docs/tagging.md's response
    want = response["predictions"][0]
    n = want["num_entities"]
    assert rest["num_entities"][0] == n
    for key in ("entity_type", "entity_text"):
        assert [v.decode() for v in rest[key][0][:n]] == want[key]
    for key in ("entity_start", "entity_end"):
        assert rest[key][0][:n].tolist() == want[key]
    assert [t.decode() for t in rest["tags"][0] if t] == want["tags"]


@pytest.mark.slow  # four fine-tuning processes, two of them one run
def test_tagging_under_mirrored_and_two_workers_gives_the_one_device_results(tmp_path):
    """Mirrored over 2 logical CPUs, and two local workers: the same global batches of
    windows, every dev window once, the logits gathered in order: the same metrics and
    predictions.txt as one device."""
    pretrained = tmp_path / "pretrained"
    helpers.write_pretrained_run(pretrained, SEQ, dropout=0.0)  # runs differ in sums only
    data = generated.write_set(tmp_path / "data", 160, 30)
    command = helpers.finetune_command("tagging", None, pretrained, data,
                                       "--config.model.dropout=0", seq=SEQ)
    helpers.finetune_three_ways(command, tmp_path)
    predictions = (tmp_path / "one" / "predictions.txt").read_text(encoding="utf-8")
    for name in ("mirrored", "workers"):
        assert (tmp_path / name / "predictions.txt").read_text(encoding="utf-8") == predictions


def test_a_resume_whose_training_file_has_other_types_is_refused(tmp_path):
    """The entity types (the head's classes) are read from the data: a resume that reads
    others is one line, not a checkpoint of another shape."""
    data = generated.write_set(tmp_path / "data", 10, 5)
    pretrained = str(tmp_path / "pretrained")
    helpers.write_pretrained_run(pretrained, SEQ)
    config = _config("tagging", pretrained, data)
    # A run's config.json holds its rates filled in (not 0: the model's defaults).
    config.train.update(learning_rate=1e-3, layerwise_lr_decay=0.8)
    saved = config.to_dict()
    saved["model"]["entity_types"] = "LOC,PER"   # the run's, before ORG was added
    os.makedirs(tmp_path / "run")
    with open(tmp_path / "run" / "config.json", "w") as f:
        json.dump(saved, f)
    with pytest.raises(errors.UserError, match=r"^config.model.entity_types=LOC,ORG,PER "
                       r"\(from the data\) differs from the run in .*run \(LOC,PER\); resume"):
        loop.finetune(config, str(tmp_path / "run"))
