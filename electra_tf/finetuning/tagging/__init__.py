"""Token tagging (named entities, chunking), one member of the fine-tuning task family
(`finetuning.task`).

    conll.py    CoNLL files (plain or gzipped), the tag schemes IOB1/IOB2/BIOES read and
                written, one-line errors naming file:line
    model.py    Tagger: the encoder, dropout, a dense layer per token; its loss
    metrics.py  conlleval's entity precision/recall/F1 (overall, per type), token accuracy
    task.py     TaggingTask: sentences → windows (`serving/tagging_windows.py`) → Rows →
                Tagger → metrics, predictions.txt → `serving/export_tagging.py`
"""
