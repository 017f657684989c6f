"""A whole run with every path a URL, as a TPU run has them on gs://, twice: on TF's
`ram://` in one process (no Python `open()` or `os.path` call reads it), and on `gs://`
through TF's own GCS client, over HTTPS to an emulator (tests/gcs_emulator.py).
Create data → pre-train → resume → export → fine-tune → convert, through the functions
the binaries call, on the tiny model for a few steps."""

import csv
import io
import os

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs  # pylint: disable=g-bad-import-order
from configs import finetune as finetune_configs
from electra_tf import convert
from electra_tf import workdir as workdir_lib
from electra_tf.data import writer
from electra_tf.finetuning import loop as finetune_loop
from electra_tf.serving import export
from electra_tf.text import corpus
from electra_tf.text import tokenizer
from electra_tf.training import loop
from tests import gcs_emulator
from tests import helpers

# On each file system two trainings, an export and a fine-tuning, each compiled: ~60 s a
# file system on 2 cores.
pytestmark = pytest.mark.slow

SEQ = 16


def _write(path, text):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def _tsv(rows):
    out = io.StringIO()
    csv.writer(out, delimiter="\t", lineterminator="\n").writerows(rows)
    return out.getvalue()


@pytest.fixture(scope="module", params=["ram", "gs"])
def root(request, tmp_path_factory):
    """The folder that holds every path of the run: ram://…, or gs://BUCKET/… emulated."""
    if request.param == "gs":
        pytest.importorskip("gcp_storage_emulator", reason="pip install -r requirements-test.txt")
        with gcs_emulator.bucket(tmp_path_factory.mktemp("gcs")) as bucket:
            yield f"{bucket}/url_paths"
        return
    url = f"ram://url_paths_{os.getpid()}"
    yield url
    try:
        tf.io.gfile.rmtree(url)
    except tf.errors.NotFoundError:  # `ram://` lists DIR/a.b/F under DIR/a as ".b"
        pass


@pytest.fixture(scope="module")
def pretrained(root):
    """The pre-training run, resumed once: ROOT/run."""
    _write(f"{root}/vocab.txt", "\n".join(tokenizer.SPECIAL_TOKENS + list(helpers.WORDS)) + "\n")
    vocab = tokenizer.Vocab.load(f"{root}/vocab.txt")
    corpus.write_corpus(corpus.documents_to_lines(
        helpers.sentences(6, seed=i) for i in range(30)), f"{root}/text/corpus.txt")
    writer.write_pretraining_data(corpus.open_corpus(f"{root}/text/*.txt"), vocab,
                                  f"{root}/data", max_seq_length=SEQ, num_shards=2,
                                  log=lambda _: None)
    config = electra_configs.get_config("tiny")
    config.data.update(train_files=f"{root}/data", eval_files=f"{root}/data",
                       vocab_file=vocab.path, max_seq_length=SEQ, shuffle_buffer=100)
    config.train.update(batch_size=4, steps=2, warmup_steps=1, log_every=1,
                        checkpoint_every=2, eval_every=2, eval_steps=1, eval_predictions=1)
    config.runtime.strategy = "one_device"
    run = f"{root}/run"
    loop.train_and_evaluate(config, run)
    config.train.steps = 4
    loop.train_and_evaluate(config, run)  # resumes from ckpt-2
    return run


def test_pretraining_resumes_and_exports(pretrained, root):
    checkpoints = workdir_lib.checkpoints(pretrained)
    assert tf.train.latest_checkpoint(checkpoints) == f"{checkpoints}/ckpt-4"
    assert sorted(n.rstrip("/") for n in tf.io.gfile.listdir(pretrained)) == [
        "checkpoints", "config.json", "logs", "vocab.txt"]
    # The second run went on from step 2: each step trained and was logged once.
    logged = helpers.summaries(workdir_lib.logs(pretrained, workdir_lib.TRAIN_LOGS), "loss")
    assert [step for step, _ in logged] == [1, 2, 3, 4]
    exported = export.export_run(pretrained, f"{root}/models/1")
    assert [n.rstrip("/") for n in tf.io.gfile.listdir(f"{root}/models")] == ["1"]
    assert helpers.assert_export_holds(exported, checkpoints).shape == (1, SEQ)


def test_fine_tuning_reads_writes_and_exports_there(pretrained, root):
    rows = [["sentence", "label"]] + [[f"the {w} sat", i % 2] for i, w in
                                      enumerate(helpers.WORDS * 2)]
    for split in ("train", "dev"):
        _write(f"{root}/glue/{split}.tsv", _tsv(rows))
    config = finetune_configs.get_config("sst2")
    config.init_checkpoint = pretrained
    config.data.dir = f"{root}/glue"
    config.data.max_seq_length = SEQ
    config.train.update(batch_size=16, epochs=1)
    config.runtime.strategy = "one_device"
    workdir = f"{root}/sst2"
    finetune_loop.finetune(config, workdir)
    results = workdir_lib.read_json(workdir, workdir_lib.RESULTS)
    step = results["best"]["step"]
    served = tf.saved_model.load(f"{workdir}/export/{step}").signatures["serving_default"](
        text=tf.constant(["the cat sat", "the dog"]))["probabilities"].numpy()
    assert served.shape == (2, 2)
    np.testing.assert_allclose(served.sum(-1), 1.0, rtol=1e-5)
    assert not [name for name in tf.io.gfile.listdir(workdir) if name.startswith(".")]


def test_the_run_converts_to_every_format_there(pretrained, root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a writer that used `open()` on the URL would write here
    weights = convert.read("electra_tf", pretrained)
    config = workdir_lib.read_json(pretrained, workdir_lib.CONFIG)
    vocab = f"{pretrained}/vocab.txt"
    for fmt in convert.FORMATS_OUT:
        options = {"config": config} if fmt == "electra_tf" else {}
        convert.write(fmt, weights, f"{root}/converted/{fmt}", vocab, **options)
    assert os.listdir(tmp_path) == []
    listed = {fmt: sorted(n.rstrip("/") for n in tf.io.gfile.listdir(f"{root}/converted/{fmt}"))
              for fmt in convert.FORMATS_OUT}
    assert listed["keras_hub"] == ["config.json", "metadata.json", "model.weights.h5"]
    assert listed["hf"] == ["discriminator", "generator"]
    for part in listed["hf"]:
        assert sorted(tf.io.gfile.listdir(f"{root}/converted/hf/{part}")) == [
            "config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    # `ram://` takes any prefix of a file's name for a folder, so TF's checkpoint reader
    # looks for DIR/model.ckpt/checkpoint there: the TF1 checkpoint is read back on gs://.
    readable = [f for f in convert.FORMATS_IN if f != "tf1" or root.startswith("gs://")]
    for fmt in readable:
        again = convert.read(fmt, f"{root}/converted/{fmt}")
        assert again.spec == weights.spec, fmt
        assert again.tensors.keys() == weights.tensors.keys(), fmt
        for name, array in weights.tensors.items():
            np.testing.assert_array_equal(again.tensors[name], array, err_msg=f"{fmt} {name}")
