r"""Converts ELECTRA checkpoints between the original (TF1), Hugging Face, keras-hub and ours.

  python tools/convert_checkpoint.py --from=tf1|hf|electra_tf \
      --to=electra_tf|hf|keras_hub|tf1 --input=PATH --output=PATH \
      [--vocab_file=vocab.txt] [--num_heads=N] [--generator_num_heads=N] [--[no]lower_case]

--input:  tf1: a checkpoint prefix (DIR/model.ckpt) or its directory (the latest one);
          hf: a directory holding discriminator/ and generator/ (as --to=hf writes them),
              or one ElectraForPreTraining directory (config.json + model.safetensors);
          electra_tf: a training workdir (latest checkpoint) or WORKDIR/checkpoints/ckpt-N.
--output: a new directory: electra_tf: a workdir that `python -m electra_tf.train`
          continues (config.json, vocab.txt, checkpoints/ckpt-0 without optimizer state);
          from a discriminator alone, its generator starts from fresh weights (said);
          hf: discriminator/ (ElectraForPreTraining) and generator/ (ElectraForMaskedLM),
              each with tokenizer_config.json so that AutoTokenizer normalises as our data;
          keras_hub: a preset of the discriminator (ElectraBackbone.from_preset(DIR));
          tf1: model.ckpt with the original's variable names.
Any shape converts: widths, depths, position tables, with or without a generator, and
every weight sharing (tie none|embeddings|all, read off the tensors; a gdes run's delta is
merged into its discriminator's table). A TF1 checkpoint
does not record its numbers of attention heads: a preset's are used when its dimensions
match, else one per 64 units (the original's rule), unless --num_heads says.
The vocab.txt beside the input is used unless --vocab_file is given; whether it is
lower-cased comes from the input (our workdir's data, Hugging Face's tokenizer_config.json)
unless --[no]lower_case says (a TF1 checkpoint does not say: give it for a cased vocab).
Weights convert
exactly (float32, bit for bit); keras-hub's backbone computes gelu with the tanh
approximation, so its outputs differ from ours in the 4th decimal.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import dataclasses
import importlib.util
import os
import time

from absl import flags
from absl import logging

from electra_tf import errors
from electra_tf import flags as common_flags
from electra_tf import model_config
from electra_tf.model import sizes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# convert.FORMATS_IN and FORMATS_OUT, named here without TensorFlow (the formats import
# it) so that a bad --from/--to is answered at once; tests/convert/test_formats.py holds
# the lists equal.
FORMATS_IN = ("tf1", "hf", "electra_tf")
FORMATS_OUT = ("electra_tf", "hf", "keras_hub", "tf1")

_FROM = flags.DEFINE_enum("from", None, list(FORMATS_IN), "Input format.", required=True)
_TO = flags.DEFINE_enum("to", None, list(FORMATS_OUT), "Output format.", required=True)
_INPUT = flags.DEFINE_string("input", None, "Checkpoint to read (see above).", required=True)
_OUTPUT = flags.DEFINE_string("output", None, "New directory to write.", required=True)
_NUM_HEADS = flags.DEFINE_integer(
    "num_heads", None, "TF1 input: the discriminator's attention heads (default: a "
    "preset's with its dimensions, else hidden / 64).", lower_bound=1)
_GENERATOR_NUM_HEADS = flags.DEFINE_integer(
    "generator_num_heads", None, "TF1 input: the generator's attention heads (default: "
    "the discriminator's at its width, else hidden / 64).", lower_bound=1)
_LOWER_CASE = flags.DEFINE_boolean(
    "lower_case", None, "--to=hf, --to=electra_tf: whether the vocab is lower-cased "
    "(tokenizer_config.json; the workdir's converted.json, which export, fine-tuning and "
    "scoring read); default: what the input says (a TF1 checkpoint says nothing: then "
    "true).")
_VOCAB_FILE = flags.DEFINE_string("vocab_file", None,
                                  "vocab.txt (default: the one beside the input).")


def _run_config(size: str) -> dict:
    """configs/electra.py:SIZE as a dict, for the converted workdir's config.json."""
    spec = importlib.util.spec_from_file_location(
        "electra_config", os.path.join(ROOT, "configs", "electra.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(size).to_dict()


def check_flags() -> None:
    """The flags' checks that need no TensorFlow (a local path's; a URL's loads TF): a
    one-line `UserError` before anything is read or written."""
    if _FROM.value != "tf1" and (_NUM_HEADS.value or _GENERATOR_NUM_HEADS.value):
        raise errors.UserError(f"--num_heads and --generator_num_heads are for --from=tf1; "
                               f"--from={_FROM.value} input says its heads itself")
    if _LOWER_CASE.value is not None and _TO.value not in ("hf", "electra_tf"):
        raise errors.UserError(f"--{'' if _LOWER_CASE.value else 'no'}lower_case is for "
                               f"--to=hf and --to=electra_tf: --to={_TO.value} writes no "
                               "tokenizer setting")
    output = _OUTPUT.value
    common_flags.check_output_path("output", output, directory=True)
    if "://" not in output and os.path.isdir(output) and os.listdir(output):
        # (On a URL, files.new_directory refuses it, once the input is read.)
        raise errors.UserError(f"--output={output}: exists and is not empty; choose a new "
                               "--output")
    # A directory or a checkpoint prefix, as the --from format reads them.
    common_flags.check_input_path("input", _INPUT.value, directory=None, prefix=True)
    if _VOCAB_FILE.value and _TO.value != "keras_hub":  # a keras-hub preset holds no vocab
        common_flags.check_input_path("vocab_file", _VOCAB_FILE.value, directory=None)


def main(argv):
    del argv
    check_flags()
    # TensorFlow loads here, once the flags are checked.
    from electra_tf import convert  # pylint: disable=g-import-not-at-top
    logging.set_verbosity(logging.WARNING)  # TF's checkpoint savers log at INFO
    start = time.monotonic()
    print(f"reading {_INPUT.value} (--from={_FROM.value})", flush=True)
    weights = convert.read(_FROM.value, _INPUT.value, _NUM_HEADS.value,
                           _GENERATOR_NUM_HEADS.value)
    spec = weights.spec
    parts = "discriminator" + (" and generator" if spec.has_generator else " alone")
    print(f"read {len(weights.tensors)} tensors ({weights.num_parameters:,} parameters, "
          f"{parts}) from {weights.source} in {time.monotonic() - start:.1f} s")
    print(f"writing --to={_TO.value} at {_OUTPUT.value}", flush=True)
    print(f"shape: {spec.shape.describe()}")
    for note in weights.notes:
        print(f"note: {note}")
    if weights.ignored:
        shown = ", ".join(weights.ignored[:3]) + (", ..." if len(weights.ignored) > 3 else "")
        print(f"ignored {len(weights.ignored)} tensors the model does not have ({shown})")
    vocab_file = _VOCAB_FILE.value or weights.vocab_file
    output = _OUTPUT.value

    if _LOWER_CASE.value is not None:
        weights = dataclasses.replace(weights, lower_case=_LOWER_CASE.value)

    if _TO.value == "electra_tf":
        fields = model_config.fields(spec.shape)
        config = _run_config(fields["size"])
        path = convert.write(_TO.value, weights, output, vocab_file, config=config)
        seq = config["data"]["max_seq_length"]
        seq_flag = (f" --config.data.max_seq_length={spec.shape.max_positions}"
                    if spec.shape.max_positions < seq else "")
        if weights.lower_case is None:
            print(f"note: {weights.source} does not say whether its vocab is lower-cased: "
                  "export, fine-tuning and scoring of the workdir will lower-case text; "
                  "convert with --nolower_case for a cased vocab")
        if not spec.has_generator:
            print("note: the input holds no generator: the workdir's generator "
                  f"({sizes.describe(spec.shape.generator)}) starts from fresh "
                  "weights when pre-training continues; export and fine-tuning use the "
                  "converted discriminator")
        print(f"wrote {path}; continue pre-training with:\n"
              f"  python -m electra_tf.train --config=configs/electra.py:{fields['size']} "
              f"--workdir={output} --config.data.vocab_file={output}/vocab.txt "
              f"--config.data.train_files=DATA{seq_flag}" + "".join(
                  f" --config.model.{key}={value}" for key, value in fields.items()
                  if key != "size" and config["model"].get(key) != value))
    elif _TO.value == "hf":
        lower_case = True if weights.lower_case is None else weights.lower_case
        for directory in convert.write(_TO.value, weights, output, vocab_file,
                                       lower_case=lower_case):
            print(f"wrote {directory}")
        if vocab_file:
            print(f"tokenizer_config.json: do_lower_case={lower_case}"
                  + ("" if _LOWER_CASE.value is not None or weights.lower_case is not None
                     else " (assumed; pass --nolower_case for a cased vocab)"))
    elif _TO.value == "keras_hub":
        convert.write(_TO.value, weights, output)
        print(f"wrote {output}: keras_hub.models.ElectraBackbone.from_preset({output!r})")
    else:
        print(f"wrote {convert.write(_TO.value, weights, output, vocab_file)}")
    if not vocab_file and _TO.value in ("hf", "tf1"):  # a tokenizer then has nothing to load
        print("no vocab.txt" + (" or tokenizer_config.json" if _TO.value == "hf" else "")
              + " written (no vocab beside the input): pass --vocab_file to add it")
    print(f"done in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    cli.app_run(main)
