"""The GLUE tasks as members of the task family (`finetuning.task.Task`).

    data.load (TSV or TFDS) ─► Rows: text_a [, text_b], label columns; tokenized in
    tf.data by the exports' packer (`text.packer.TextPacker`) ─► Classifier ([CLS] →
    dropout → dense) ─► cross-entropy, or MSE on score / 5 for STS-B ─► metrics per dev
    split; test splits ─► GLUE's submission TSVs ─► export.export_classifier
"""

import numpy as np
import tensorflow as tf

from electra_tf import errors
from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning import task as task_lib
from electra_tf.finetuning.glue import data as glue_data
from electra_tf.finetuning.glue import metrics
from electra_tf.finetuning.glue import specs
from electra_tf.serving import export
from electra_tf.text import packer as packer_lib


class GlueTask(task_lib.Task):
    """A GLUE task: the original's classification head and metrics. A member sets
    `spec` (a `specs.TaskSpec`) alone: its name, eval splits, primary metric and
    schedule are the spec's."""

    spec: specs.TaskSpec
    signatures = ("serving_default", "serving_ids")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        spec = cls.spec
        cls.name, cls.eval_splits = spec.name, spec.eval_splits
        cls.primary_metric = spec.primary_metric
        cls.schedule = task_lib.Schedule(
            epochs=spec.num_train_epochs, max_seq_length=spec.max_seq_length,
            batch_size=spec.train_batch_size, warmup_proportion=spec.warmup_proportion,
            weight_decay=spec.weight_decay_rate)

    def configure(self, config) -> None:
        config.model.dropout = 0.1        # on the [CLS] vector; original: 0.1

    # ------------------------------------------------------------------------ data

    def read(self, vocab, lower_case: bool) -> task_lib.Data:
        data = self.config.data
        load = dict(data_dir=data.dir or None, tfds_data_dir=data.tfds_data_dir or None)
        train = glue_data.load(self.name, "train", on_bad=data.on_bad, **load)
        evals = {split: glue_data.load(self.name, split, on_bad=data.on_bad, **load)
                 for split in self.eval_splits}
        tests = glue_data.load_tests(self.name, **load) if self.config.predict_test else {}
        if self.spec.double_unordered:  # the original also trains on (text_b, text_a)
            train = glue_data.Examples(train.text_a + train.text_b, train.text_b + train.text_a,
                                       np.concatenate([train.labels, train.labels]),
                                       train.source, train.skipped, train.first_skipped)
        packer = packer_lib.TextPacker(vocab, data.max_seq_length, lower_case)
        return task_lib.Data(self._rows(train, packer),
                             {s: self._rows(e, packer) for s, e in evals.items()},
                             {s: self._rows(e, packer) for s, e in tests.items()})

    def _rows(self, examples: glue_data.Examples, packer) -> task_lib.Rows:
        columns = {"text_a": np.asarray(examples.text_a, object), "label": examples.labels}
        if examples.text_b is not None:
            columns["text_b"] = np.asarray(examples.text_b, object)

        def prepare(batch):
            texts = [batch["text_a"]] + ([batch["text_b"]] if "text_b" in batch else [])
            ids, mask, segments = packer.pack(*texts)
            return ({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
                    batch["label"])
        skipped = errors.skipped_note(examples.skipped, examples.first_skipped)
        return task_lib.Rows(columns, prepare, f"{len(examples)} examples from "
                             f"{examples.source} ({skipped})",
                             payload=examples)

    # ------------------------------------------------------------------------ model

    def build_model(self, encoder):
        return model_lib.Classifier(encoder, self.spec.num_labels,
                                    dropout=self.config.model.dropout,
                                    seed=self.config.train.seed, name="classifier")

    def loss(self, model, inputs, labels):
        logits = model(inputs, training=True)
        if self.spec.is_regression:  # the original regresses score / max (STS-B: / 5)
            target = tf.cast(labels, tf.float32) / self.spec.score_range[1]
            return tf.square(logits[:, 0] - target)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.int32), logits=logits)

    # ------------------------------------------------------------------------ results

    def _predictions(self, logits: np.ndarray) -> np.ndarray:
        """[n, labels] logits → class indices [n], or scores on the task's scale."""
        if self.spec.is_regression:
            return logits[:, 0] * self.spec.score_range[1]
        return logits.argmax(-1)

    def evaluate(self, split, rows, outputs) -> task_lib.Evaluation:
        return task_lib.Evaluation(metrics.compute(
            self.name, self._predictions(outputs), rows.columns["label"]))

    def predict_test(self, split, rows, outputs) -> task_lib.Evaluation:
        """GLUE's submission format: test_predictions/<CoLA.tsv, MNLI-m.tsv, AX.tsv, ...>;
        no metrics (GLUE's test labels are hidden)."""
        lines = glue_data.submission_rows(self.name, rows.payload.ids, self._predictions(outputs))
        return task_lib.Evaluation({}, {
            f"test_predictions/{glue_data.test_splits(self.name)[split]}":
                "\n".join(lines) + "\n"})

    def export(self, model, vocab, max_seq_length, output, lower_case) -> str:
        return export.export_classifier(model, vocab, self.spec, max_seq_length, output,
                                        lower_case=lower_case)


# The members, one a spec, in `specs.TASKS`' order (a GLUE-like task is a spec there).
MEMBERS = tuple(type(f"Glue{spec.name.upper()}", (GlueTask,), {"spec": spec})
                for spec in specs.TASKS.values())
