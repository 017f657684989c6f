"""An ELECTRIC run's discriminator fine-tunes as an ELECTRA run's does: fine-tuning
starts from its discriminator, and a toy SST-2 beats chance from a random-weight
ELECTRIC workdir."""

import numpy as np
import pytest

from electra_tf.finetuning import loop
from tests import helpers
from tests.finetuning import test_finetune


@pytest.fixture(scope="module")
def electric(tmp_path_factory):
    pretrained = tmp_path_factory.mktemp("electric")
    _, model = helpers.write_pretrained_run(pretrained, test_finetune.SEQ,
                                            objective="electric")
    return str(pretrained), model


def test_fine_tuning_starts_from_the_electric_discriminator(electric):
    pretrained, model = electric
    _, loaded, _, _ = loop.load_pretrained(pretrained)
    assert loaded.objective.name == "electric"
    assert len(loaded.discriminator.weights) == len(model.discriminator.weights) > 0
    for want, got in zip(model.discriminator.weights, loaded.discriminator.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.slow  # a minute or two: six epochs and an export
def test_an_electric_run_fine_tunes_a_toy_task(electric, tmp_path):
    # The ELECTRA run's toy SST-2 (test_finetune), at its size: on half of it and four
    # epochs, one clean-clone run ended at 0.53.
    data = test_finetune._toy_data(tmp_path, "sst2", 192, 64)  # pylint: disable=protected-access
    config = test_finetune._config("sst2", electric[0], str(data))  # pylint: disable=protected-access
    best = loop.finetune(config, str(tmp_path / "run"))
    print("electric sst2", best)  # pytest -s
    assert best["validation"]["accuracy"] > 0.75, best
