"""SQuAD 1.1 and 2.0 as members of the task family (`task.Task`).

    data.load (JSON in config.data.dir, or TFDS squad) ─► windows.features: windows of
    max_seq_length over each context, every doc_stride tokens (made on the host, once per
    run) ─► Rows of ids and answer positions ─► QuestionAnswerer (the original's head:
    start, joint end over a beam of starts, answerability) ─► qa_loss
    dev: the beam's spans ─► windows.best_answers (n-best per window, best across windows,
    max_answer_length) ─► metrics (the official scripts' EM/F1; 2.0: HasAns/NoAns,
    the null threshold, the best threshold) ─► predictions.json (+ null_odds.json for 2.0)
    in the run dir, the official scripts' input formats ─► export_qa (in-graph windows)

2.0 follows the original ELECTRA: predictions.json holds every question's best span,
null_odds.json the lowest "impossible" logit over its windows; a question counts as
unanswered when its null odds exceed `model.null_threshold` (the official script's
--na-prob-thresh; the original's -2.75).
"""

import json

from electra_tf import errors
from electra_tf.finetuning import model as model_lib
from electra_tf.finetuning import task as task_lib
from electra_tf.finetuning.squad import data as squad_data
from electra_tf.finetuning.squad import metrics as squad_metrics
from electra_tf.finetuning.squad import windows
from electra_tf.serving import export_qa

# The original's SQuAD defaults (configure_finetuning.py): max_seq_length 512, 2 epochs,
# batch 32; the learning rate and decay by model size as for GLUE (hparams.py).
_SCHEDULE = task_lib.Schedule(epochs=2.0, max_seq_length=512)


class SquadTask(task_lib.Task):
    """Extractive question answering on a SQuAD version; a member sets `name` (the
    version: "squad1" or "squad2", `squad_data.TFDS_NAMES`) and `v2`."""

    v2: bool = False                    # unanswerable questions, the null threshold
    eval_splits = ("validation",)
    primary_metric = "f1"
    schedule = _SCHEDULE
    signatures = ("serving_default",)
    # A resume must keep what makes the windows (doc_stride, max_query_length), the
    # objective (answerable_weight) and what chose the best step (the beam, the answer
    # length, 2.0's null threshold).
    resume_keys = ("data.doc_stride", "data.max_query_length", "model.answerable_weight",
                   "model.beam_size", "model.max_answer_length")

    def configure(self, config) -> None:
        config.data.doc_stride = 128        # tokens between windows' starts; original: 128
        config.data.max_query_length = 64   # question tokens kept; original: 64
        config.model.beam_size = 20         # starts kept, and ends per start; original: 20
        #                                     (its beam_size and n_best_size)
        config.model.max_answer_length = 30  # tokens; original: 30
        # The answerability loss's weight; original: 0.5, for 1.1 as well (its
        # answerable_classifier is on for every SQuAD version; 1.1's targets are all
        # "answerable", and only 2.0's predictions read the classifier).
        config.model.answerable_weight = 0.5
        if self.v2:
            # "No answer" when the lowest "impossible" logit over the windows exceeds it;
            # original: -2.75 (its qa_na_threshold).
            config.model.null_threshold = -2.75

    def check_config(self) -> None:
        data, model = self.config.data, self.config.model
        if self.config.predict_test:
            raise errors.UserError("config.predict_test: SQuAD's test set is hidden; there "
                                   "are no test predictions to write")
        for key, value in (("data.doc_stride", data.doc_stride),
                           ("data.max_query_length", data.max_query_length),
                           ("model.beam_size", model.beam_size),
                           ("model.max_answer_length", model.max_answer_length)):
            if value < 1:
                raise errors.UserError(f"config.{key}={value} must be >= 1")
        if data.max_seq_length - data.max_query_length - 3 < 1:  # [CLS] q [SEP] c [SEP]
            raise errors.UserError(f"config.data.max_query_length={data.max_query_length} "
                                   "leaves no context token in a config.data.max_seq_length="
                                   f"{data.max_seq_length} window")

    # ------------------------------------------------------------------------ data

    def read(self, vocab, lower_case: bool) -> task_lib.Data:
        data = self.config.data
        load = dict(data_dir=data.dir or None, tfds_data_dir=data.tfds_data_dir or None,
                    on_bad=data.on_bad)
        return task_lib.Data(
            self._rows(squad_data.load(self.name, "train", **load), vocab, lower_case,
                       train=True),
            {"validation": self._rows(squad_data.load(self.name, "validation", **load),
                                      vocab, lower_case, train=False)}, {})

    def _rows(self, questions: squad_data.Questions, vocab, lower_case,
              train: bool) -> task_lib.Rows:
        data = self.config.data
        # Training's windows keep no character offsets (only `evaluate` reads them).
        features = windows.features(questions.items, vocab, lower_case, data.max_seq_length,
                                    data.doc_stride, data.max_query_length, spans=not train)
        inputs = ("input_ids", "input_mask", "segment_ids")

        def prepare(batch):  # [b, S] ids and [b] answer positions, made by `features`
            return ({k: batch[k] for k in inputs},
                    {k: v for k, v in batch.items() if k not in inputs})
        skipped = errors.skipped_note(questions.skipped, questions.first_skipped)
        return task_lib.Rows(features.arrays(), prepare,
                             f"{len(questions)} questions in {len(features)} windows from "
                             f"{questions.source} ({skipped})",
                             payload=None if train else (questions.items, features))

    # ------------------------------------------------------------------------ model

    def build_model(self, encoder):
        return model_lib.QuestionAnswerer(encoder, beam_size=self.config.model.beam_size,
                                          seed=self.config.train.seed,
                                          name="question_answerer")

    def loss(self, model, inputs, labels):
        # Training takes the gold start: the end is predicted given it (joint prediction).
        outputs = model(dict(inputs, start_positions=labels["start_positions"]),
                        training=True)
        return model_lib.qa_loss(outputs, labels, self.config.model.answerable_weight)

    # ------------------------------------------------------------------------ results

    def evaluate(self, split, rows, outputs) -> task_lib.Evaluation:
        questions, features = rows.payload
        answers = windows.best_answers(questions, features, outputs,
                                       self.config.model.max_answer_length)
        predictions = {q.qid: a.text for q, a in zip(questions, answers)}
        gold = [{"id": q.qid, "answers": q.answers} for q in questions]
        # ASCII (\u escapes): the official scripts open it in the platform's encoding.
        files = {"predictions.json": json.dumps(predictions, indent=2, ensure_ascii=True)}
        if not self.v2:
            return task_lib.Evaluation(squad_metrics.evaluate_v1(gold, predictions), files)
        null_odds = {q.qid: a.null_score for q, a in zip(questions, answers)}
        files["null_odds.json"] = json.dumps(null_odds, indent=2)
        metrics = squad_metrics.evaluate_v2(gold, predictions, null_odds,
                                            self.config.model.null_threshold)
        return task_lib.Evaluation({k: float(v) for k, v in metrics.items()}, files)

    def export(self, model, vocab, max_seq_length, output, lower_case) -> str:
        settings = self.config
        return export_qa.export_question_answerer(
            model, vocab, output, max_seq_length=max_seq_length, lower_case=lower_case,
            doc_stride=settings.data.doc_stride,
            max_query_length=settings.data.max_query_length,
            max_answer_length=settings.model.max_answer_length,
            null_threshold=settings.model.null_threshold if self.v2 else None)



class Squad1(SquadTask):
    name = "squad1"


class Squad2(SquadTask):
    name = "squad2"
    v2 = True
    resume_keys = SquadTask.resume_keys + ("model.null_threshold",)
