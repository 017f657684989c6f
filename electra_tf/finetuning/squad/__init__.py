"""SQuAD 1.1 and 2.0, one member of the fine-tuning task family (`finetuning.task`).

    data.py     the questions: SQuAD's JSON or offline TFDS, one-line errors naming the
                question
    windows.py  windows over each context (tf.text's character offsets), and the best
                span across windows from the model's outputs
    metrics.py  the official v1.1/v2.0 evaluation (EM, F1, HasAns/NoAns, thresholds)
    task.py     SquadTask: questions → windows → Rows → QuestionAnswerer → metrics,
                predictions.json, export_qa
"""
