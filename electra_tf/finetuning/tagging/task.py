"""Token tagging (named entities, chunking) as members of the task family (`task.Task`).

    CoNLL files in config.data.dir, or TFDS conll2003 prepared locally (conll.py:
    train, dev, test; the entity types from the training file, written to config.json's
    model.entity_types) ─► the tags as spans ─► the model's labels (model.label_scheme:
    BIOES, the original's encoding) ─► serving/tagging_windows.py: WordPieces, windows
    of max_seq_length every `stride` pieces, the label on each word's first piece in the
    window that owns it ─► Tagger (dense per token) ─► cross-entropy summed over the
    labelled pieces
    dev: each word's predicted label ─► spans ─► tags in the files' scheme ─► conlleval's
    entity P/R/F1 (overall, per type) and token accuracy ─► predictions.txt ("word gold
    predicted", conlleval's input) in the run dir ─► export_tagging (raw text or words)
"""

from absl import logging
import numpy as np
import tensorflow as tf

from electra_tf import errors
from electra_tf.finetuning import task as task_lib
from electra_tf.finetuning.tagging import conll
from electra_tf.finetuning.tagging import metrics
from electra_tf.finetuning.tagging import model as model_lib
from electra_tf.serving import export_tagging
from electra_tf.serving import tagging_windows as windows_lib

TFDS_SCHEME = "iob2"
_SENTENCES_PER_CALL = 1024   # sentences windowed per eager call when reading


class TaggingTask(task_lib.Task):
    """Tagging a CoNLL-format set; a member sets `name` (TFDS's name where TFDS has the
    set: `conll.TFDS_NAMES`) and, where the original's differ, `schedule`."""

    eval_splits = ("validation",)
    primary_metric = "f1"
    # The original ELECTRA's defaults (configure_finetuning.py): 3 epochs, batch 32,
    # max_seq_length 128 (its chunking task: 256); the learning rate and decay by model
    # size (hparams.py).
    schedule = task_lib.Schedule()
    signatures = ("serving_default", "words")
    resume_keys = ("data.stride", "model.label_scheme")
    # The head's classes and the files' scheme (auto: detected), from the training file.
    read_keys = ("model.entity_types", "data.scheme")

    def configure(self, config) -> None:
        # The files' tags: iob1|iob2|bioes, or auto: the training file's (written here
        # when read), as CoNLL-2003 comes in both (its original eng.* files are IOB1;
        # TFDS's set and the common train.txt/valid.txt copies are IOB2; TFDS_SCHEME).
        config.data.scheme = "auto"
        config.data.strict = False    # an invalid transition in the files is an error
        #                               (or, with on_bad=skip, its sentence is skipped)
        config.data.stride = 0        # pieces between windows' starts over a sentence
        #                               longer than a window; 0 = half a window
        config.model.dropout = 0.0    # on every token's vector before the dense layer;
        #                               original: none (its encoder's own 0.1 is below)
        config.model.label_scheme = "bioes"  # what the model predicts; original: BIOES
        config.model.entity_types = ""  # "" = the training file's (written here when read)

    def stride(self, max_seq_length: int) -> int:
        """config.data.stride, or half a window of `max_seq_length`."""
        return self.config.data.stride or (max_seq_length - 2) // 2

    def check_config(self) -> None:
        data, model = self.config.data, self.config.model
        errors.check_choice("config.data.scheme", data.scheme, ("auto",) + conll.SCHEMES)
        errors.check_choice("config.model.label_scheme", model.label_scheme, conll.SCHEMES)
        if not data.dir and self.name not in conll.TFDS_NAMES:
            raise errors.UserError("config.data.dir is empty: give the directory of the "
                                   "CoNLL files (train.txt, dev.txt[, test.txt])")
        windows_lib.check_geometry(data.max_seq_length, self.stride(data.max_seq_length))

    # ------------------------------------------------------------------------ data

    @property
    def labels(self) -> list[str]:
        """The model's classes, from config.model.entity_types."""
        types = [t for t in self.config.model.entity_types.split(",") if t]
        return conll.labels(types, self.config.model.label_scheme)

    def _read(self, split: str, types, scheme=None, strict=None) -> conll.Sentences:
        data = self.config.data
        scheme = scheme or data.scheme
        strict = data.strict if strict is None else strict
        if not data.dir:  # conll2003 prepared by TFDS (check_config)
            return conll.read_tfds(self.name, split, data.tfds_data_dir or None, scheme,
                                   types, strict, data.on_bad)
        path = conll.find(data.dir, split)
        if path is None:
            names = " or ".join(conll.FILES[split])
            hint = (" (CoNLL-2000 has no dev file: the original ELECTRA evaluates its "
                    "chunking on the test set, placed as dev.txt)"
                    if split == "validation" and self.name == "conll2000" else "")
            raise conll.TaggingDataError(f"no {names} (plain or .gz) in {data.dir}{hint}")
        return conll.read(path, scheme, types, strict, data.on_bad)

    def _read_train(self, types) -> tuple[conll.Sentences, str]:
        """The training file, and how config.data.scheme was set: "auto" is replaced by
        the file's scheme (`conll.detect_scheme`; TFDS conll2003: IOB2)."""
        data = self.config.data
        if data.scheme != "auto":
            return self._read("train", types), ""
        if not data.dir:
            data.scheme = TFDS_SCHEME
            return self._read("train", types), " (TFDS conll2003's, saved in config.json)"
        # BIOES's prefixes admit every scheme's; strictness is checked in the scheme found.
        train = self._read("train", types, "bioes", strict=False)
        data.scheme = conll.detect_scheme(train.tags)
        if data.strict:
            train = self._read("train", types)
        return train, " (detected from it, saved in config.json)"

    def read(self, vocab, lower_case: bool) -> task_lib.Data:
        given = [t for t in self.config.model.entity_types.split(",") if t]
        train, detected = self._read_train(set(given) if given else None)
        scheme = self.config.data.scheme
        logging.info("%s: tags %s%s", train.source, scheme.upper(), detected)
        types = sorted(given or train.types())
        if not types:
            raise conll.TaggingDataError(f"{train.source}: no entity tags (every tag is O)")
        self.config.model.entity_types = ",".join(types)   # saved with the run's config
        seq = self.config.data.max_seq_length
        window = windows_lib.Windows(vocab, seq, lower_case, self.stride(seq))
        evals = {"validation": self._read("validation", set(types))}
        tests = {"test": self._read("test", set(types))} if self.config.predict_test else {}
        rows = self._rows(train, window)
        rows.summary += (f"; entity types {', '.join(types)}"
                         + ("" if given else " (from it, saved in config.json)")
                         + f"; tags {scheme.upper()}{detected}")
        return task_lib.Data(rows, {s: self._rows(e, window) for s, e in evals.items()},
                             {s: self._rows(e, window) for s, e in tests.items()})

    def _rows(self, sentences: conll.Sentences, window) -> task_lib.Rows:
        ids = {label: i for i, label in enumerate(self.labels)}
        scheme = self.config.model.label_scheme
        word_labels = np.asarray(
            [ids[t] for tags in sentences.tags
             for t in conll.tags(conll.spans(tags), len(tags), scheme)], np.int32)
        parts = []
        for i in range(0, len(sentences), _SENTENCES_PER_CALL):
            words = sentences.words[i:i + _SENTENCES_PER_CALL]
            rows = window(tf.RaggedTensor.from_row_lengths(
                tf.constant([w for s in words for w in s], tf.string),
                [len(s) for s in words]))
            rows = {k: v.numpy() for k, v in rows.items()}
            rows["example"] += i
            parts.append(rows)
        rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        first_word = np.cumsum([0] + [len(w) for w in sentences.words])[:-1]
        at = rows["word"] >= 0
        flat = first_word[rows["example"]][:, None] + rows["word"]           # [N, S]
        columns = {k: rows[k] for k in ("input_ids", "input_mask", "segment_ids")}
        columns["labels"] = np.where(at, word_labels[np.where(at, flat, 0)], 0).astype(
            np.int32)
        columns["label_mask"] = at.astype(np.int32)

        def prepare(batch):
            inputs = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
            return inputs, {"labels": batch["labels"], "label_mask": batch["label_mask"]}
        skipped = errors.skipped_note(sentences.skipped, sentences.first_skipped)
        return task_lib.Rows(columns, prepare,
                             f"{len(sentences)} sentences in {len(at)} windows from "
                             f"{sentences.source} ({skipped})",
                             payload=(sentences, np.where(at, flat, -1)))

    # ------------------------------------------------------------------------ model

    def build_model(self, encoder):
        return model_lib.Tagger(encoder, len(self.labels), dropout=self.config.model.dropout,
                                seed=self.config.train.seed, name="tagger")

    def loss(self, model, inputs, labels):
        return model_lib.tagging_loss(model(inputs, training=True), labels["labels"],
                                      labels["label_mask"])

    # ------------------------------------------------------------------------ results

    def predicted_tags(self, rows, logits: np.ndarray) -> list[list[str]]:
        """Each sentence's predicted tags in the files' scheme, from the windows' logits
        [N, S, labels]: each word's label at its one position, its spans, rewritten."""
        sentences, flat = rows.payload
        total = sum(len(w) for w in sentences.words)
        at = flat >= 0
        counts = np.bincount(flat[at], minlength=total)
        if counts.shape[0] != total or not np.all(counts == 1):
            raise AssertionError(f"words predicted other than once: {np.unique(counts)}")
        per_word = np.empty(total, np.int64)
        per_word[flat[at]] = logits.argmax(-1)[at]
        labels, out, start = self.labels, [], 0
        for words in sentences.words:
            predicted = [labels[i] for i in per_word[start:start + len(words)]]
            out.append(conll.tags(conll.spans(predicted), len(words), self.config.data.scheme))
            start += len(words)
        return out

    def evaluate(self, split, rows, outputs) -> task_lib.Evaluation:
        sentences = rows.payload[0]
        predicted = self.predicted_tags(rows, outputs)
        return task_lib.Evaluation(
            metrics.evaluate(sentences.tags, predicted),
            {"predictions.txt": conll.write(sentences.words, sentences.tags, predicted)})

    def predict_test(self, split, rows, outputs) -> task_lib.Evaluation:
        """The test file scored as dev is, and conlleval's input for it (its gold tags,
        the best model's)."""
        sentences = rows.payload[0]
        predicted = self.predicted_tags(rows, outputs)
        return task_lib.Evaluation(
            metrics.evaluate(sentences.tags, predicted),
            {"test_predictions.txt": conll.write(sentences.words, sentences.tags, predicted)})

    def export(self, model, vocab, max_seq_length, output, lower_case) -> str:
        return export_tagging.export_tagger(
            model, vocab, output, max_seq_length=max_seq_length, lower_case=lower_case,
            stride=self.stride(max_seq_length), labels=self.labels,
            scheme=self.config.data.scheme)


class Conll2003(TaggingTask):
    """Named entities (CoNLL-2003): not among the original's tasks, its general
    defaults."""
    name = "conll2003"


class Conll2000(TaggingTask):
    """Chunking (CoNLL-2000), the original's "chunk" task."""
    name = "conll2000"
    schedule = task_lib.Schedule(max_seq_length=256)


class Tagging(TaggingTask):
    """Any set of CoNLL files in config.data.dir."""
    name = "tagging"
