"""Fixtures the test modules share."""

import pytest

from tests import helpers


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """`helpers.write_training_data`: vocab, train and eval shards at sequence 32 (a
    module that needs other data defines its own `data`)."""
    return helpers.write_training_data(tmp_path_factory.mktemp("data"))
