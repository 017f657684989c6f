"""One original-style TF1 checkpoint of the tiny shape, its table and our model loaded
from it, shared by the conversion tests (none of them changes them)."""

import pytest

from electra_tf.convert import table
from electra_tf.convert import tf1
from tests.convert import originals


@pytest.fixture(scope="session")
def original(tmp_path_factory):
    return originals.write_original(tmp_path_factory.mktemp("tf1"))


@pytest.fixture(scope="session")
def weights(original):
    return tf1.TF1().read(original["dir"])


@pytest.fixture(scope="session")
def model(weights):
    model = table.build_pretrainer(weights.spec)
    table.load_into(table.pretrainer_slots(model), weights)
    return model
