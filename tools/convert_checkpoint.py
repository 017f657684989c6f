r"""Converts ELECTRA checkpoints between the original (TF1), Hugging Face, keras-hub and ours.

  python tools/convert_checkpoint.py --from=tf1|hf|electra_tf \
      --to=electra_tf|hf|keras_hub|tf1 --input=PATH --output=PATH \
      [--size=tiny|small|base|large] [--vocab_file=vocab.txt]

--input:  tf1: a checkpoint prefix (DIR/model.ckpt) or its directory (the latest one);
          hf: a directory holding discriminator/ and generator/ (as --to=hf writes them),
              or one ElectraForPreTraining directory (config.json + model.safetensors);
          electra_tf: a training workdir (latest checkpoint) or WORKDIR/checkpoints/ckpt-N.
--output: a new directory: electra_tf: a workdir that `python -m electra_tf.train`
          continues (config.json, vocab.txt, checkpoints/ckpt-0 without optimizer state);
          hf: discriminator/ (ElectraForPreTraining) and generator/ (ElectraForMaskedLM);
          keras_hub: a preset of the discriminator (ElectraBackbone.from_preset(DIR));
          tf1: model.ckpt with the original's variable names.
The vocab.txt beside the input is used unless --vocab_file is given. Weights convert
exactly (float32, bit for bit); keras-hub's backbone computes gelu with the tanh
approximation, so its outputs differ from ours in the 4th decimal.
"""

from electra_tf import cli  # first: quiets TF's start-up logging

import importlib.util
import os

from absl import flags
from absl import logging

from electra_tf.model import sizes
from electra_tf.serving import convert

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_FROM = flags.DEFINE_enum("from", None, list(convert.FORMATS_IN), "Input format.",
                          required=True)
_TO = flags.DEFINE_enum("to", None, list(convert.FORMATS_OUT), "Output format.",
                        required=True)
_INPUT = flags.DEFINE_string("input", None, "Checkpoint to read (see above).", required=True)
_OUTPUT = flags.DEFINE_string("output", None, "New directory to write.", required=True)
_SIZE = flags.DEFINE_enum("size", None, list(sizes.SIZES),
                          "The discriminator's size (default: found from the shapes).")
_VOCAB_FILE = flags.DEFINE_string("vocab_file", None,
                                  "vocab.txt (default: the one beside the input).")


def _run_config(size: str) -> dict:
    """configs/electra.py:SIZE as a dict, for the converted workdir's config.json."""
    spec = importlib.util.spec_from_file_location(
        "electra_config", os.path.join(ROOT, "configs", "electra.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(size).to_dict()


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # TF's checkpoint savers log at INFO
    weights = convert.read(_FROM.value, _INPUT.value, _SIZE.value)
    spec = weights.spec
    parts = "discriminator" + (" and generator" if spec.generator else "")
    print(f"read {len(weights.tensors)} tensors ({weights.num_parameters:,} parameters, "
          f"{parts}) from {weights.source}")
    if weights.ignored:
        shown = ", ".join(weights.ignored[:3]) + (", ..." if len(weights.ignored) > 3 else "")
        print(f"ignored {len(weights.ignored)} tensors the model does not have ({shown})")
    vocab_file = _VOCAB_FILE.value or weights.vocab_file
    output = _OUTPUT.value

    if _TO.value == "electra_tf":
        overrides = convert.config_overrides(spec)
        config = _run_config(overrides["size"])
        path = convert.save_electra_tf(weights, output, config, vocab_file)
        print(f"wrote {path}; continue pre-training with:\n"
              f"  python -m electra_tf.train --config=configs/electra.py:{overrides['size']} "
              f"--workdir={output} --config.data.vocab_file={output}/vocab.txt "
              f"--config.data.train_files=DATA" + "".join(
                  f" --config.model.{key}={value}" for key, value in overrides.items()
                  if key != "size" and config["model"][key] != value))
    elif _TO.value == "hf":
        for directory in convert.save_hf(weights, output, vocab_file):
            print(f"wrote {directory}")
    elif _TO.value == "keras_hub":
        convert.save_keras_hub(weights, output)
        print(f"wrote {output}: keras_hub.models.ElectraBackbone.from_preset({output!r})")
    else:
        print(f"wrote {convert.save_tf1(weights, output, vocab_file)}")


if __name__ == "__main__":
    cli.app_run(main)
