r"""Shows masked batches as the model will see them, decoded to wordpieces.

  python tools/inspect_data.py --data=DIR --vocab_file=vocab.txt [--num_examples=2] \
      [--config=configs/electra.py:large] [--config.data.whole_word_masking=true]

Reads through the training pipeline (manifest checks, parsing, dynamic masking) with the
masking of the pre-training config (`config.data`: mask_prob, mask_token_rate,
random_token_rate, whole_word_masking; default: small's), so what it prints is what
pre-training with that config consumes (other draws of the masks: they are random).
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import os

from absl import flags
from ml_collections import config_flags

from electra_tf import config_check
from electra_tf import errors
from electra_tf import flags as common_flags

_DATA = flags.DEFINE_string("data", None, "Data directory, manifest or shard glob.",
                            required=True)
_VOCAB_FILE = flags.DEFINE_string("vocab_file", None, "The data's vocab.txt.", required=True)
_MAX_SEQ_LENGTH = flags.DEFINE_integer("max_seq_length", None,
                                       "Expected length (default: the manifest's).")
flags.register_validator(
    "max_seq_length", lambda n: n is None or n >= config_check.MIN_SEQ_LENGTH,
    f"must be at least {config_check.MIN_SEQ_LENGTH}, room for [CLS] A [SEP] B [SEP] with "
    "a token in each segment")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", 2, "Examples to print.", lower_bound=1)
_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "configs", "electra.py") + ":small",
    "The pre-training config whose masking (config.data) to show, with any "
    "--config.data.KEY=VALUE.", lock_config=True)


def main(argv):
    del argv
    # Before TensorFlow loads: the config's ranges and choices, and the paths that are
    # local (a URL's check loads TF).
    config = _CONFIG.value.copy_and_resolve_references()
    if "mask_prob" not in config.get("data", {}):
        raise errors.UserError("--config: not a pre-training config (it has no "
                               "config.data.mask_prob): give configs/electra.py:SIZE")
    # Every check now but the mask share's at the length, which needs the data's.
    lengthless = config.copy_and_resolve_references()
    with lengthless.unlocked():
        del lengthless.data["max_seq_length"]
    config_check.check(lengthless)
    common_flags.check_input_patterns("data", _DATA.value)
    common_flags.check_input_path("vocab_file", _VOCAB_FILE.value, directory=None)
    # pylint: disable=g-import-not-at-top
    import tensorflow as tf
    from electra_tf.data import pipeline
    from electra_tf.text import tokenizer
    # pylint: enable=g-import-not-at-top
    vocab = tokenizer.Vocab.load(_VOCAB_FILE.value)
    seq = _MAX_SEQ_LENGTH.value
    if seq is None:
        data = _DATA.value.split(",")[0]
        manifest = pipeline.load_manifest(
            data if tf.io.gfile.isdir(data) else os.path.dirname(data))
        if manifest is None:
            raise pipeline.DataError(f"{_DATA.value}: no manifest.json beside the data; "
                                     "give --max_seq_length")
        seq = manifest["max_seq_length"]
    files = pipeline.resolve_files(_DATA.value, seq, vocab)
    if config_check.max_predictions_per_seq(config.data.mask_prob, seq) < 1:
        raise errors.UserError(
            f"config.data.mask_prob={config.data.mask_prob!r} masks no position of the "
            f"data's {seq}-token sequences (int((mask_prob + 0.005) * {seq}) = 0)")
    config.data.max_seq_length = seq
    masking = pipeline.masking_config(config, vocab)
    data = config.data
    print(f"masking: mask_prob={data.mask_prob}, [MASK] {data.mask_token_rate:.0%}, random "
          f"token {data.random_token_rate:.0%}, whole words: {data.whole_word_masking}; at "
          f"most {masking.max_predictions} positions a sequence")
    batch = next(iter(pipeline.pretraining_dataset(files, _NUM_EXAMPLES.value, seq, masking,
                                                   is_training=False)), None)
    if batch is None:  # the evaluation batches are whole: too few examples make none
        raise errors.UserError(f"--data={_DATA.value}: fewer than --num_examples="
                               f"{_NUM_EXAMPLES.value} examples")
    print({name: tensor.shape.as_list() for name, tensor in batch.items()})
    for row in range(_NUM_EXAMPLES.value):
        length = int(batch["input_mask"][row].numpy().sum())
        original = batch["input_ids"][row, :length].numpy()
        masked = batch["masked_input_ids"][row, :length].numpy()
        segments = batch["segment_ids"][row, :length].numpy()
        shown = []
        for i in range(length):
            token = vocab.tokens[masked[i]]
            if masked[i] != original[i]:
                token += f"({vocab.tokens[original[i]]})"
            if i and segments[i] != segments[i - 1]:
                shown.append("|B|")
            shown.append(token)
        n = int(batch["masked_lm_weights"][row].numpy().sum())
        print(f"\nexample {row}: {length} tokens, {n} chosen for prediction "
              f"(positions {batch['masked_lm_positions'][row, :n].numpy().tolist()})")
        print(" ".join(shown))


if __name__ == "__main__":
    cli.app_run(main)
