r"""Exports a run as a SavedModel for TF Serving: a pre-training run's discriminator, or a
fine-tuning run's model (its best checkpoint, as the run itself exports it: a GLUE
classifier, a SQuAD question answerer, a token tagger).

  python tools/export_savedmodel.py --workdir=RUN --output=MODEL_BASE/1 \
      [--checkpoint=RUN/checkpoints/ckpt-N] [--max_seq_length=N] [--lower_case=true|false]
      [--vocab_file=vocab.txt]

Writes TF Serving's layout (`MODEL_BASE/<version>/saved_model.pb`, `variables/`,
`assets.extra/tf_serving_warmup_requests`, and `assets/vocab.txt` for a pre-training run
or a GLUE classifier). The signatures and their inputs and outputs are listed in
electra_tf/serving/export.py and docs/serving.md.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

from absl import flags
from absl import logging

from electra_tf import errors
from electra_tf import flags as common_flags

_WORKDIR = flags.DEFINE_string("workdir", None, "The training run's --workdir.",
                               required=True)
_OUTPUT = flags.DEFINE_string("output", None, "MODEL_BASE/<integer version> to create.",
                              required=True)
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A checkpoint prefix (default: a pre-training run's latest, a "
    "fine-tuning run's best).")
_MAX_SEQ_LENGTH = flags.DEFINE_integer(
    "max_seq_length", None, "Tokens per request row (default: the run's max_seq_length).",
    lower_bound=1)
_VOCAB_FILE = flags.DEFINE_string(
    "vocab_file", None, "The vocab to tokenize with (default: the run's vocab.txt; same size).")
_LOWER_CASE = flags.DEFINE_boolean(
    "lower_case", None, "Lower-case and strip accents before WordPiece (default: the "
    "run's: its training data's casing, recorded in its config.json; a fine-tuning run's "
    "pre-trained model's; a converted run's source's; else true).")


def main(argv):
    del argv
    logging.set_verbosity(logging.INFO)  # its progress lines
    common_flags.check_output_path("output", _OUTPUT.value, directory=True)
    # TensorFlow from here on: a bad --output is answered without waiting for it.
    from electra_tf.finetuning import loop  # pylint: disable=g-import-not-at-top
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    if loop.is_finetuning_run(_WORKDIR.value):
        if _VOCAB_FILE.value:
            raise errors.UserError("--vocab_file: a fine-tuning run exports with its own "
                                   "vocab.txt")
        path = loop.export_run(_WORKDIR.value, _OUTPUT.value, checkpoint=_CHECKPOINT.value,
                               max_seq_length=_MAX_SEQ_LENGTH.value,
                               lower_case=_LOWER_CASE.value)
        signatures = ", ".join(loop.run_task(_WORKDIR.value).signatures)
        print(f"Exported {path} (signatures: {signatures}; needs TF Serving "
              f">= {export.MIN_TF_SERVING})")
        return
    path = export.export_run(_WORKDIR.value, _OUTPUT.value, checkpoint=_CHECKPOINT.value,
                             lower_case=_LOWER_CASE.value,
                             max_seq_length=_MAX_SEQ_LENGTH.value,
                             vocab_file=_VOCAB_FILE.value)
    print(f"Exported {path} (signatures: {', '.join(export.signatures(_WORKDIR.value))}; "
          f"needs TF Serving >= {export.MIN_TF_SERVING})")


if __name__ == "__main__":
    cli.app_run(main)
