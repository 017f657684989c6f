"""SavedModel export: every signature through TF Serving's session-based loader.

The loader is the one `saved_model_cli run` uses (`tf.compat.v1` session + `loader.load`),
run in a subprocess after `import tensorflow_text`, as TF Serving would run the graph; its
outputs are compared with the in-process model.
"""

import glob
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as text

from electra_tf import errors
from electra_tf.serving import export
from electra_tf.text import packer as packer_lib
from tests import helpers

SEQ = helpers.SERVING_SEQ
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXTS = ["the cat sat on the mat", "", "   ", "Dog RAN under a log 🐕 и 猫 " * 40,
         "red blue"]
PAIRS = ["it was big", "a", "", "then the small dog sat", "cat " * 30]


def _session_run(export_dir, requests, outdir):
    """Runs {signature: {input: list}} through `saved_model_cli`'s session runner."""
    def array(values):
        return np.array(values, dtype=object if isinstance(values[0], str) else np.int32)
    return helpers.session_run(
        export_dir, {name: (name, {k: array(v) for k, v in feeds.items()})
                     for name, feeds in requests.items()}, outdir)


def test_tf_serving_layout(exported):
    names = set(os.listdir(exported))
    assert {"saved_model.pb", "variables", "assets", "assets.extra"} <= names
    assert os.listdir(os.path.join(exported, "assets")) == ["vocab.txt"]
    assert sorted(os.listdir(os.path.dirname(exported))) == [os.path.basename(exported)]
    # Only the product is exported: no generator variable.
    reader = tf.train.load_checkpoint(os.path.join(exported, "variables", "variables"))
    assert not [k for k in reader.get_variable_to_shape_map() if "generator" in k]


def test_every_signature_in_the_session_loader_matches_the_model(run, exported, tmp_path):
    model, vocab = run["model"], run["vocab"]
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    ids, mask, segments = (t.numpy() for t in packer.pack(tf.constant(TEXTS)))
    pair_ids, pair_mask, pair_segments = (t.numpy() for t in packer.pack(
        tf.constant(TEXTS), tf.constant(PAIRS)))
    id_feeds = {"input_ids": ids.tolist(), "input_mask": mask.tolist(),
                "segment_ids": segments.tolist()}
    results = _session_run(exported, {
        "serving_default": {"text": TEXTS}, "serving_pair": {"text": TEXTS,
                                                             "text_pair": PAIRS},
        "encode": {"text": TEXTS}, "encode_pair": {"text": TEXTS, "text_pair": PAIRS},
        "serving_ids": id_feeds, "encode_ids": id_feeds}, str(tmp_path))

    expected = export.discriminate(model, ids, mask, segments)
    expected_pair = export.discriminate(model, pair_ids, pair_mask, pair_segments)
    for name, want, want_ids, want_mask in (
            ("serving_default", expected, ids, mask), ("serving_ids", expected, ids, mask),
            ("serving_pair", expected_pair, pair_ids, pair_mask)):
        got = results[name]
        assert got["replaced_probability"].shape == (len(TEXTS), SEQ)
        np.testing.assert_allclose(got["replaced_probability"],
                                   want["replaced_probability"], atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(got["token_ids"], want_ids)
        np.testing.assert_array_equal(got["input_mask"], want_mask)
        tokens = got["tokens"].astype(str)
        np.testing.assert_array_equal(tokens != "", want_mask > 0)
        assert all(vocab.tokens[i] == t for i, t in zip(want_ids[want_mask > 0],
                                                       tokens[want_mask > 0]))
    for name, want in (("encode", expected), ("encode_ids", expected),
                       ("encode_pair", expected_pair)):
        got = results[name]
        assert got["sequence_output"].shape == (len(TEXTS), SEQ, 64)
        np.testing.assert_allclose(got["sequence_output"], want["sequence_output"],
                                   atol=1e-4, err_msg=name)
        np.testing.assert_allclose(got["cls_output"], want["sequence_output"][:, 0],
                                   atol=1e-4, err_msg=name)


def test_packing_matches_the_training_layout_and_tf_text_round_robin(run):
    vocab = run["vocab"]
    packer = packer_lib.TextPacker(vocab, SEQ, lower_case=True)
    ids, mask, segments = (t.numpy() for t in packer.pack(
        tf.constant(["the cat", ""]), tf.constant(["sat", "dog"])))
    cls, sep, pad = vocab.cls_id, vocab.sep_id, vocab.pad_id
    the, cat, sat, dog = (vocab.id(w) for w in ("the", "cat", "sat", "dog"))
    np.testing.assert_array_equal(ids[0, :6], [cls, the, cat, sep, sat, sep])
    np.testing.assert_array_equal(segments[0, :6], [0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(ids[1, :4], [cls, sep, dog, sep])
    assert (ids[0, 6:] == pad).all() and mask[0].sum() == 6 and segments[0, 6:].sum() == 0

    # Truncation equals tf.text's RoundRobinTrimmer for every mix of lengths.
    rng = np.random.default_rng(0)
    words = vocab.tokens[5:]
    first = [" ".join(rng.choice(words, n)) for n in rng.integers(0, 20, 40)]
    second = [" ".join(rng.choice(words, n)) for n in rng.integers(0, 20, 40)]
    got, _, got_segments = packer.pack(tf.constant(first), tf.constant(second))
    pieces = [packer.tokenizer.tokenize(tf.constant(s)) for s in (first, second)]
    assert all(p.shape.rank == 2 for p in pieces)  # [B, (wordpieces)]
    trimmed = text.RoundRobinTrimmer(SEQ - 3).trim(pieces)
    want, want_segments = text.combine_segments(trimmed, cls, sep)
    want, _ = text.pad_model_inputs(want, SEQ, pad_value=pad)
    want_segments, _ = text.pad_model_inputs(want_segments, SEQ)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_segments, want_segments)


def test_warmup_requests_are_valid_predict_requests(run, exported):
    from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
    path = os.path.join(exported, "assets.extra", export.WARMUP_FILE)
    loaded = tf.saved_model.load(exported)
    names = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        names.append(request.model_spec.signature_name)
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        outputs = loaded.signatures[request.model_spec.signature_name](
            **{k: tf.constant(v) for k, v in inputs.items()})
        assert all(v.shape[0] == len(inputs["text"]) for v in outputs.values())
    assert names == ["serving_default", "serving_pair", "encode", "score"]


def test_bad_output_and_workdir_are_one_line_errors(run, tmp_path):
    with pytest.raises(errors.UserError, match="integer version"):
        export.export_run(run["workdir"], str(tmp_path / "models" / "latest"))
    existing = tmp_path / "models" / "2"
    existing.mkdir(parents=True)
    with pytest.raises(errors.UserError, match="exists"):
        export.export_run(run["workdir"], str(existing))
    with pytest.raises(errors.UserError, match="config.json"):
        export.export_run(str(tmp_path), str(tmp_path / "m" / "1"))
    (tmp_path / "other").mkdir()
    small = helpers.write_vocab(str(tmp_path / "other"), words=helpers.WORDS[:5])
    with pytest.raises(errors.UserError, match="--vocab_file=.* tokens; the run was trained"):
        export.export_run(run["workdir"], str(tmp_path / "m" / "1"), vocab_file=small.path)
    empty = tmp_path / "run"
    shutil.copytree(run["workdir"], empty)
    shutil.rmtree(empty / "checkpoints")
    with pytest.raises(errors.UserError, match="no checkpoint"):
        export.export_run(str(empty), str(tmp_path / "m" / "1"))


def test_a_damaged_checkpoint_is_one_line_naming_it(run, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(run["workdir"], workdir)
    prefix = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
    with open(prefix + ".index", "wb") as f:
        f.write(b"x" * 100)  # an OpError of no subclass, unlike a missing file's NotFound
    with pytest.raises(errors.UserError) as e:
        export.load_run(str(workdir))
    assert str(e.value) == (f"{prefix}: cannot restore the model (not an sstable (bad "
                            "magic number))")
    shutil.copy(os.path.join(run["workdir"], "checkpoints", os.path.basename(prefix))
                + ".index", prefix + ".index")
    (data,) = glob.glob(prefix + ".data-*")
    with open(data, "r+b") as f:
        f.truncate(1000)  # cut: an IndexError inside TF's reader
    with pytest.raises(errors.UserError, match=f"^{re.escape(prefix)}: cannot restore the "
                       "model"):
        export.load_run(str(workdir))


@pytest.mark.slow  # two export processes
def test_a_crash_mid_export_leaves_no_version_and_the_next_export_works(run, tmp_path,
                                                                        monkeypatch):
    output = tmp_path / "models" / "electra" / "3"

    def crash(path, requests, **kwargs):  # the archive is written: the crash comes late
        raise KeyboardInterrupt("killed while writing the warm-up file")
    monkeypatch.setattr(export, "write_warmup", crash)
    with pytest.raises(KeyboardInterrupt):
        export.export_run(run["workdir"], str(output))
    # TF Serving loads numeric version directories only: ".3.partial" is never loaded.
    assert not output.exists()
    assert sorted(os.listdir(output.parent)) == [".3.partial"]
    monkeypatch.undo()
    export.export_run(run["workdir"], str(output))
    assert sorted(os.listdir(output.parent)) == ["3"]
    assert (output / "saved_model.pb").exists()


@pytest.mark.slow  # an export process; export_run itself is tested in process above
def test_export_tool(run, tmp_path):
    output = str(tmp_path / "models" / "electra" / "3")
    result = helpers.run_tool("export_savedmodel.py", f"--workdir={run['workdir']}",
                              f"--output={output}", "--max_seq_length=12", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "needs TF Serving >= 2.12" in result.stdout
    # Progress: each signature traced, with an ETA, then the write.
    assert "export: traced score: 7/7 signatures (100.0%)" in result.stderr
    assert "encode_ids, score;" in result.stdout  # ELECTRA scores texts in one pass
    assert "export: wrote the SavedModel and its warm-up requests in" in result.stderr
    loaded = tf.saved_model.load(output)
    out = loaded.signatures["serving_default"](text=tf.constant(["the cat"]))
    assert out["replaced_probability"].shape == (1, 12)
    bad = helpers.run_tool("export_savedmodel.py", f"--workdir={run['workdir']}",
                           f"--output={output}", timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error:")


def _readme_block(marker):
    """The fenced code block after `<!-- marker -->` in docs/serving.md."""
    with open(os.path.join(ROOT, "docs", "serving.md"), encoding="utf-8") as f:
        readme = f.read()
    after = readme.split(f"<!-- {marker} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


def test_readme_rest_and_grpc_requests_run_through_the_signature(exported):
    loaded = tf.saved_model.load(exported)

    # REST, "instances" (row) form: one input per signature, so each instance is the text.
    body = json.loads(_readme_block("serving-rest-request"))
    signature = loaded.signatures[body["signature_name"]]
    rest = signature(text=tf.constant(body["instances"]))
    assert set(rest) == {"replaced_probability", "token_ids", "input_mask", "tokens"}
    assert rest["replaced_probability"].shape == (len(body["instances"]), SEQ)

    # gRPC: the guide's client code up to the network call builds the PredictRequest.
    client = _readme_block("serving-grpc-client")
    namespace = {}
    exec(client.split("stub =")[0], namespace)  # pylint: disable=exec-used
    request = namespace["request"]
    assert request.model_spec.name == "electra"
    inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
    grpc_out = loaded.signatures[request.model_spec.signature_name](**inputs)
    np.testing.assert_allclose(grpc_out["replaced_probability"],
                               rest["replaced_probability"], atol=1e-6)
    assert "replaced_probability" in client.split("stub =")[1]


def test_lower_case_is_the_datas_however_train_files_names_it(tmp_path, monkeypatch):
    """A cased run exports cased: the casing its config.json recorded when it trained,
    else its manifest, read whether train_files names the directory, the manifest or a
    glob of the shards; a converted run (no train_files) has its source's setting; with
    none of them, the default, said in the log."""
    from configs import electra as electra_configs  # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    from electra_tf.data import writer  # pylint: disable=g-import-not-at-top
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-00000.tfrecord").write_bytes(b"")
    (data / writer.MANIFEST).write_text(json.dumps({
        "max_seq_length": 32, "vocab": "v", "shards": [],
        "tokenizer": writer.tokenizer_settings(False)}))
    config = electra_configs.get_config("tiny")
    for train_files in (str(data), str(data / writer.MANIFEST), f"{data}/shard-*"):
        config.data.train_files = train_files
        assert export.lower_case_of(config) is False, train_files
    warnings = []
    monkeypatch.setattr(export.logging, "warning", lambda *a: warnings.append(a))
    config.data.train_files = ""
    run = str(tmp_path / "converted")
    workdir_lib.write_json(run, workdir_lib.CONVERTED, {"lower_case": False})
    assert export.lower_case_of(config, workdir=run) is False and not warnings
    # What a run's config.json recorded when it trained comes first: the data's casing.
    workdir_lib.write_json(run, workdir_lib.CONFIG, {"lower_case": True})
    assert export.lower_case_of(config, workdir=run) is True and not warnings
    assert export.lower_case_of(config, workdir=str(tmp_path)) is True
    assert "assuming lower_case=True" in warnings[0][0] % warnings[0][1:]
