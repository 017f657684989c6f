"""Our own training runs (`ElectraTF`, format name `electra_tf`): a workdir and its
checkpoints.

`read`: a workdir (its latest checkpoint) or one checkpoint prefix in WORKDIR/checkpoints,
restored by the exporter's loader (`export.load_run`: config.json says the shape).
`write`: a workdir that `python -m electra_tf.train --workdir=OUTPUT` continues, with a
`converted.json` saying what it came from (the loop reads it to say that a
discriminator converted alone has a generator of fresh weights).
"""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from electra_tf import errors
from electra_tf import model_config
from electra_tf import workdir as workdir_lib
from electra_tf.convert import files
from electra_tf.convert import formats
from electra_tf.convert import table
from electra_tf.model import encoder


def _fresh_generator(workdir: str, checkpoint: str) -> bool:
    """Whether `checkpoint`'s generator was never trained: the workdir was converted from
    a discriminator alone, and this is still the converted ckpt-0."""
    if os.path.basename(checkpoint) != "ckpt-0":
        return False
    converted = workdir_lib.read_json(workdir, workdir_lib.CONVERTED) or {}
    return converted.get("generator") == "fresh"


class ElectraTF(formats.Format):
    """Our own training runs: a workdir and its checkpoints."""

    name = "electra_tf"

    def read(self, path: str, num_heads: int | None = None,
             generator_num_heads: int | None = None) -> table.Weights:
        """A training run: its workdir (latest checkpoint) or one checkpoint prefix in
        WORKDIR/checkpoints; config.json (the shape) and vocab.txt come from the workdir."""
        del num_heads, generator_num_heads  # config.json says
        # The exporter's loader (the one way a run is read); imported here, as it brings tf.text.
        from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
        if tf.io.gfile.isdir(path):
            workdir, checkpoint = path, None
        else:
            workdir, checkpoint = os.path.dirname(os.path.dirname(path)), path
        config, vocab, model, checkpoint = export.load_run(workdir, checkpoint)
        if not model.objective.detects:
            raise errors.UserError(
                f"{workdir}: config.model.objective={model.objective.name!r} has no "
                "replaced-token head: the formats written here hold ELECTRA's generator and "
                "discriminator (objective electra, electra_15 or electric); export its encoder "
                "with tools/export_savedmodel.py")
        # ELECTRIC's generator is two causal towers, which no format's layout holds: its
        # discriminator converts alone.
        one_encoder = isinstance(model.generator, encoder.Encoder)
        spec = table.ModelSpec(vocab.size, model.shape, has_generator=(
            one_encoder and not _fresh_generator(workdir, checkpoint)))
        slots = table.pretrainer_slots(model, generator=spec.has_generator)
        tensors = {slot.name: slot.get() for slot in slots}
        if model.shape.tie == "gdes":
            # No format has a delta table: the discriminator's word embeddings are the sum
            # it reads (shared + delta) and the generator keeps the shared ones, i.e. the
            # layout of tie=none (at the shared width).
            tensors["electra/embeddings/word_embeddings"] = np.asarray(
                model.discriminator.embeddings.token_table(), "float32")
            spec = dataclasses.replace(spec, shape=dataclasses.replace(model.shape, tie="none"))
        return table.Weights(spec, tensors, checkpoint, vocab.path,
                             lower_case=export.lower_case_of(config, default=None,
                                                                 workdir=workdir))

    def write(self, weights: table.Weights, output: str, vocab_file: str | None = None, *,
              config: dict) -> str:
        """A workdir that `python -m electra_tf.train --workdir=output` continues: config.json
        (`config`, a run's config as a dict, with the spec's shape as explicit `model`
        fields), vocab.txt, checkpoints/ckpt-0 holding `step` (0) and `model` (no optimizer:
        it starts fresh), and converted.json. A discriminator converted alone gets a
        generator of fresh weights (`table.fresh_generator`), which pre-training then trains
        from step 0; export and fine-tuning use the discriminator only. Returns the
        checkpoint path."""
        if not vocab_file:
            raise table.ConversionError("--to=electra_tf needs the vocabulary: give --vocab_file")
        config = json.loads(json.dumps(config))  # a copy
        config["model"].update(model_config.fields(weights.spec.shape))
        config["data"]["max_seq_length"] = min(config["data"]["max_seq_length"],
                                               weights.spec.shape.max_positions)
        model = table.build_pretrainer(weights.spec)
        table.load_into(table.pretrainer_slots(model, generator=weights.spec.has_generator),
                        weights)
        with files.new_directory(output) as tmp:
            config["data"]["vocab_file"] = workdir_lib.path(output, workdir_lib.VOCAB)
            files.copy_vocab(vocab_file, weights.spec, tmp)
            workdir_lib.write_json(tmp, workdir_lib.CONFIG, config)
            workdir_lib.write_json(tmp, workdir_lib.CONVERTED, {
                "source": weights.source,
                "generator": "converted" if weights.spec.has_generator else "fresh",
                "lower_case": weights.lower_case})
            checkpoint = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64), model=model)
            manager = tf.train.CheckpointManager(checkpoint, workdir_lib.checkpoints(tmp),
                                                 max_to_keep=1)
            path = manager.save(checkpoint_number=0)
        return os.path.join(workdir_lib.checkpoints(output), os.path.basename(path))
