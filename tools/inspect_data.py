r"""Shows masked batches as the model will see them, decoded to wordpieces.

  python tools/inspect_data.py --data=DIR --vocab_file=vocab.txt [--num_examples=2]

Reads through the training pipeline (manifest checks, parsing, dynamic masking), so what
it prints is exactly what pre-training consumes.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import os

from absl import flags

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


def main(argv):
    del argv
    # Before TensorFlow loads: the paths that are local (a URL's check loads TF).
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
    config = pipeline.masking_config_for(vocab, seq)
    batch = next(iter(pipeline.pretraining_dataset(files, _NUM_EXAMPLES.value, seq, config,
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
