"""GLUE, one member of the fine-tuning task family (`finetuning.task`).

    specs.py    the eight tasks (TaskSpec: columns, labels, metrics, the original's
                defaults)
    data.py     their examples: GLUE's TSVs or offline TFDS, file:line errors, test
                splits and submission files
    metrics.py  what GLUE reports (accuracy, F1, MCC, Pearson, Spearman), in NumPy
    task.py     GlueTask: examples → Rows (TextPacker in tf.data) → Classifier → metrics,
                test submissions, export
"""
