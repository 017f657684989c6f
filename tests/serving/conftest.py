"""One tiny pre-trained run and one export of it, shared by the serving tests (an export
takes ~20 s on a laptop CPU)."""

import pytest

from electra_tf.serving import export
from tests import helpers


@pytest.fixture(scope="session")
def run(tmp_path_factory):
    """A tiny pre-training run's workdir (config.json, vocab.txt, a checkpoint)."""
    workdir = tmp_path_factory.mktemp("run")
    vocab, model = helpers.write_pretrained_run(workdir, helpers.SERVING_SEQ)
    return {"workdir": str(workdir), "vocab": vocab, "model": model}


@pytest.fixture(scope="session")
def exported(run, tmp_path_factory):
    """`export_run` of `run` to MODEL_BASE/1; tests read it and never change it."""
    output = str(tmp_path_factory.mktemp("models") / "electra" / "1")
    export.export_run(run["workdir"], output)
    return output
