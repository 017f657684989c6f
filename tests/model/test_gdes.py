"""tie='gdes' (DeBERTaV3's gradient-disentangled embedding sharing): which loss trains
which table, and what export and conversion see (the summed table)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from configs import electra as electra_configs
from electra_tf import convert
from electra_tf import errors
from electra_tf import model_config
from electra_tf.model import objectives
from electra_tf.serving import export
from tests import helpers
from tests.model import test_objectives


def gdes_model(objective="electra"):
    config = electra_configs.get_config("tiny")
    config.model.tie, config.model.objective = "gdes", objective
    config.model.dropout = config.model.attention_dropout = 0.0
    model = model_config.pretrainer(model_config.resolve(config), test_objectives.V)
    return config, model.build_for(test_objectives.S, test_objectives.P)


@pytest.mark.parametrize("objective,generator_loss", [("electra", "mlm_loss"),
                                                      ("electric", "cloze_loss")])
def test_delta_starts_at_zero_and_each_loss_trains_its_own_table(objective, generator_loss):
    _, model = gdes_model(objective)
    shared = model.embeddings.token_embedding.embeddings
    delta = model.discriminator.embeddings.delta.embeddings
    assert model.generator.embeddings is model.embeddings
    assert not np.any(delta.numpy())
    batch = test_objectives.batch()
    ids, segments = batch["input_ids"], batch["segment_ids"]
    np.testing.assert_array_equal(model.discriminator.embeddings(ids, segments).numpy(),
                                  model.embeddings(ids, segments).numpy())
    with tf.GradientTape(persistent=True) as tape:
        outputs = helpers.forward(model, batch, uniform=np.full((2, test_objectives.P), 0.5, "float32"),
                        training=True)
        _, values = objectives.OBJECTIVES.create(objective).loss(outputs, batch)
    mlm_shared, mlm_delta = tape.gradient(values[generator_loss], [shared, delta])
    rtd_shared, rtd_delta = tape.gradient(values["rtd_loss"], [shared, delta])
    assert np.any(tf.convert_to_tensor(mlm_shared).numpy()) and mlm_delta is None
    assert np.any(tf.convert_to_tensor(rtd_delta).numpy())
    assert not np.any(tf.convert_to_tensor(rtd_shared).numpy())  # zero, not None


def test_export_and_conversion_see_the_summed_table(tmp_path):
    config, model = gdes_model()
    delta = model.discriminator.embeddings.delta.embeddings
    delta.assign(np.random.default_rng(0).normal(0, 0.05, delta.shape).astype("float32"))
    vocab = helpers.write_vocab(str(tmp_path))
    assert vocab.size == test_objectives.V
    tf.train.Checkpoint(step=tf.Variable(3, dtype=tf.int64), model=model).save(
        os.path.join(tmp_path, "checkpoints", "ckpt"))
    config.data.max_seq_length = test_objectives.S
    with open(tmp_path / "config.json", "w") as f:
        json.dump(model_config.resolve(config).to_dict(), f)

    weights = convert.workdir.ElectraTF().read(str(tmp_path))
    assert weights.spec.shape.tie == "none"
    summed = (model.embeddings.token_embedding.embeddings + delta).numpy()
    np.testing.assert_allclose(weights.tensors["electra/embeddings/word_embeddings"], summed)
    np.testing.assert_array_equal(weights.tensors["generator/embeddings/word_embeddings"],
                                  model.embeddings.token_embedding.embeddings.numpy())
    # The converted (tie=none) model's discriminator computes what the gdes one does.
    untied = convert.table.build_pretrainer(weights.spec)
    for slot in convert.table.pretrainer_slots(untied):
        slot.set(weights.tensors[slot.name])
    batch = test_objectives.batch()
    args = (batch["input_ids"], batch["input_mask"], batch["segment_ids"])
    ours, theirs = export.discriminate(model, *args), export.discriminate(untied, *args)
    np.testing.assert_allclose(ours["replaced_probability"], theirs["replaced_probability"],
                               atol=1e-5)


def test_gdes_needs_the_shared_embedding_width():
    config = electra_configs.get_config("tiny")
    config.model.tie = "gdes"
    config.model.generator_embedding_size = 32
    with pytest.raises(Exception, match=r"generator_embedding_size=32: config.model.tie="
                       r"'gdes' shares"):
        model_config.shape(config)


@pytest.mark.parametrize("objective", ["mlm", "replace_mlm", "all_tokens_mlm"])
def test_gdes_refuses_an_objective_whose_main_model_predicts_tokens(objective):
    # Its MLM head would project with the shared table: the main loss would train it.
    config = electra_configs.get_config("tiny")
    config.model.tie = "gdes"
    config.model.objective = objective
    with pytest.raises(errors.UserError, match=r"config.model.tie='gdes' with config.model."
                       rf"objective='{objective}'"):
        model_config.pretrainer(model_config.resolve(config), test_objectives.V)
