r"""Shows what a pre-training run's model does to text: masks it, lets the generator
sample replacements and prints the discriminator's probability for every token.

  python tools/show_predictions.py --workdir=RUN --text="The function returns a list."
  python tools/show_predictions.py --workdir=RUN --data=HELDOUT_DATA_DIR [--num_examples=3]
  ... [--html=view.html] [--checkpoint=RUN/checkpoints/ckpt-N] [--seed=0]

Masking is the run's (its mask_prob and [MASK] rate), seeded by --seed, so the same
command shows the same masks and samples. In a terminal the tokens are shaded by
P(replaced); otherwise (a pipe, a file) the probabilities are written out. --html writes
a page with the same view and a per-token table. The view at each evaluation of a run is
in TensorBoard (Text, tag "predictions").
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import os
import sys

from absl import flags

from electra_tf import errors
from electra_tf import flags as common_flags

_WORKDIR = flags.DEFINE_string("workdir", None, "The pre-training run's --workdir.",
                               required=True)
_TEXT = flags.DEFINE_multi_string("text", [], "A text to show (repeat for several).")
_DATA = flags.DEFINE_string("data", None, "Or: pre-training data (a directory, manifest "
                            "or shard glob, e.g. the held-out data): its first sequences.")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", 3, "Sequences of --data to show.",
                                     lower_bound=1)
_HTML = flags.DEFINE_string("html", None, "Also write the view as an HTML page here.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None,
                                  "A checkpoint prefix (default: the run's latest).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the masks and of the generator's samples.")
_COLOUR = flags.DEFINE_enum("colour", "auto", ["auto", "always", "never"],
                            "Shade tokens by P(replaced) (auto: when stdout is a terminal).")


def text_batch(texts, vocab, seq_length, lower_case, masking_config, seed):
    """A masked batch of `texts`, tokenized as the run's data was ([CLS] text [SEP])."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from electra_tf.data import masking  # pylint: disable=g-import-not-at-top
    from electra_tf.text import packer as packer_lib  # pylint: disable=g-import-not-at-top
    packer = packer_lib.TextPacker(vocab, seq_length, lower_case)
    ids, mask, segments = packer.pack(tf.constant(texts))
    empty = [t for t, n in zip(texts, tf.reduce_sum(mask, 1).numpy()) if n <= 2]
    if empty:
        raise errors.UserError(f"--text={empty[0]!r}: no tokens to show")
    return masking.mask_batch({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
                              masking_config, seed=tf.constant([seed, 1], tf.int64))


def main(argv):
    del argv
    if bool(_TEXT.value) == bool(_DATA.value):
        raise errors.UserError("give --text=\"...\" (one or more) or --data=DIR")
    if _HTML.value:
        common_flags.check_output_path("html", _HTML.value)
    # After the flags' checks: a bad one is answered before TensorFlow's start-up.
    # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib
    from electra_tf.data import pipeline
    from electra_tf.serving import export
    from electra_tf.training import predictions
    # pylint: enable=g-import-not-at-top
    config, vocab, model, path = export.load_run(_WORKDIR.value, _CHECKPOINT.value)
    if not model.objective.detects:
        raise errors.UserError(f"--workdir={_WORKDIR.value}: config.model.objective="
                               f"{model.objective.name!r} detects no replaced tokens: "
                               "nothing to show")
    seq = config.data.max_seq_length
    masking_config = pipeline.masking_config(config, vocab)
    if _TEXT.value:
        lower_case = export.lower_case_of(config, workdir=_WORKDIR.value)
        batch = text_batch(_TEXT.value, vocab, seq, lower_case, masking_config, _SEED.value)
    else:
        files = pipeline.resolve_files(_DATA.value, seq, vocab)
        batch = predictions.first_batch(files, _NUM_EXAMPLES.value, seq, masking_config,
                                        _SEED.value)
        if batch is None:
            raise errors.UserError(f"--data={_DATA.value}: fewer than --num_examples="
                                   f"{_NUM_EXAMPLES.value} sequences")
    uniform = predictions.noise(_SEED.value, *batch["masked_lm_ids"].shape)
    shown = predictions.views(predictions.predict_fn(model), batch, vocab, uniform)
    colour = (_COLOUR.value == "always" or
              (_COLOUR.value == "auto" and sys.stdout.isatty()))
    print(f"{path}\n" + predictions.terminal(shown, colour=colour))
    if _HTML.value:
        workdir_lib.write_text(os.path.dirname(_HTML.value) or ".",
                               os.path.basename(_HTML.value),
                               predictions.html(shown, title=f"ELECTRA predictions: {path}"))
        print(f"Wrote {_HTML.value}")


if __name__ == "__main__":
    cli.app_run(main)
