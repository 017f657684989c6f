"""Every format by name (`electra_tf.convert`): any shape reads and round-trips exactly
through each, and tools/convert_checkpoint.py converts and refuses in one line."""

import json
import os

import pytest

from electra_tf import convert
from electra_tf.convert import formats
from electra_tf.convert import hf
from electra_tf.convert import table
from electra_tf.convert import tf1
from electra_tf.convert import workdir
from electra_tf.model import sizes
from tests import helpers
from tests.convert import originals


@pytest.fixture(scope="module", params=sorted(originals.SHAPES) + ["alone"])
def shaped(request, tmp_path_factory):
    """(name, original, weights) for each of originals.SHAPES, and "alone": the custom
    discriminator without a generator (what HF hub discriminators are)."""
    name = request.param
    shape = originals.SHAPES["custom"] if name == "alone" else originals.SHAPES[name]
    original = originals.write_original(tmp_path_factory.mktemp(name), shape,
                                        generator=name != "alone", junk=())
    # The custom shape's 3 heads are in no tensor: said, as the tool's --num_heads does.
    heads = 3 if shape.discriminator == originals.CUSTOM else None
    return name, original, tf1.TF1().read(original["dir"], num_heads=heads)


def test_any_shape_reads_and_round_trips_exactly(shaped, tmp_path):
    name, original, weights = shaped
    vocab = original["vocab"]
    if name == "alone":
        expected = table.ModelSpec(vocab.size, sizes.ModelShape(
            originals.CUSTOM, table.fresh_generator(originals.CUSTOM), 128),
            has_generator=False)
    else:
        expected = table.ModelSpec(vocab.size, originals.SHAPES[name])
    assert weights.spec == expected
    originals.assert_same_tensors(weights.tensors, original["tensors"])

    prefix = tf1.TF1().write(weights, str(tmp_path / "tf1"), vocab.path)
    again = tf1.TF1().read(prefix, num_heads=expected.discriminator.num_heads)
    assert again.spec == expected
    originals.assert_same_tensors(again.tensors, original["tensors"])

    hf.HuggingFace().write(weights, str(tmp_path / "hf"), vocab.path)
    disc = json.load(open(tmp_path / "hf" / "discriminator" / "config.json"))
    assert (disc["max_position_embeddings"], disc["num_attention_heads"]) == (
        expected.shape.max_positions, expected.discriminator.num_heads)
    assert os.path.exists(tmp_path / "hf" / "generator") == expected.has_generator
    again = hf.HuggingFace().read(str(tmp_path / "hf"))  # the sharing read off the tensors
    assert again.spec == expected and again.ignored == ()
    originals.assert_same_tensors(again.tensors, original["tensors"])

    workdir.ElectraTF().write(weights, str(tmp_path / "run"), vocab.path,
                              config=originals.load_config("small").to_dict())
    config = json.load(open(tmp_path / "run" / "config.json"))
    assert config["data"]["max_seq_length"] <= expected.shape.max_positions
    again = workdir.ElectraTF().read(str(tmp_path / "run"))
    assert again.spec == expected
    originals.assert_same_tensors(again.tensors, original["tensors"])


def _tool(*args):
    return helpers.run_tool("convert_checkpoint.py", *args, timeout=300)


def test_tool_converts_and_refuses_in_one_line(original, tmp_path):
    # tf1 → our workdir → HF, by the command line; the HF weights are the original's, and
    # the vocab's casing given at the first step is the workdir's and HF's tokenizer's.
    result = _tool("--from=tf1", "--to=electra_tf", f"--input={original['dir']}",
                   f"--output={tmp_path}/run", "--nolower_case")
    assert result.returncode == 0, result.stderr
    assert json.load(open(tmp_path / "run" / "converted.json"))["lower_case"] is False
    assert "read 80 tensors (169,025 parameters, discriminator and generator)" in result.stdout
    assert "ignored 3 tensors the model does not have" in result.stdout
    assert (f"python -m electra_tf.train --config=configs/electra.py:tiny "
            f"--workdir={tmp_path}/run --config.data.vocab_file={tmp_path}/run/vocab.txt"
            ) in result.stdout
    result = _tool("--from=electra_tf", "--to=hf", f"--input={tmp_path}/run",
                   f"--output={tmp_path}/hf")
    assert result.returncode == 0, result.stderr
    assert os.path.exists(tmp_path / "hf" / "generator" / "vocab.txt")  # the run's vocab
    assert "tokenizer_config.json: do_lower_case=False" in result.stdout
    assert json.load(open(tmp_path / "hf" / "discriminator" / "tokenizer_config.json"))[
        "do_lower_case"] is False
    originals.assert_same_tensors(hf.HuggingFace().read(str(tmp_path / "hf")).tensors,
                                  original["tensors"])
    # (Refusals: tests/test_tool_errors.py, before TF; --num_heads: tests/convert/test_tf1.py.)


def test_formats_are_chosen_by_name(weights, tmp_path):
    for name, member in convert.FORMATS.items():  # each a Format reading what it lists
        assert issubclass(member, formats.Format) and member.name == name
        assert (name in convert.FORMATS_IN) == member.reads
        assert (name in convert.FORMATS_OUT) == member.writes
    # The tool names them without TensorFlow, to check --from/--to before TF loads.
    usage = _tool("--helpshort").stdout
    assert f"--from: <{'|'.join(convert.FORMATS_IN)}>" in usage, usage
    assert f"--to: <{'|'.join(convert.FORMATS_OUT)}>" in usage, usage
    with pytest.raises(table.ConversionError, match="--from=keras_hub: choose one of tf1, "
                       "hf, electra_tf$"):
        convert.read("keras_hub", str(tmp_path))
    with pytest.raises(table.ConversionError, match="--to=onnx: choose one of electra_tf, "
                       "hf, keras_hub, tf1$"):
        convert.write("onnx", weights, str(tmp_path / "onnx"))
    with pytest.raises(table.ConversionError, match="nothing: not found$"):
        convert.read("tf1", str(tmp_path / "nothing"))
    prefix = convert.write("tf1", weights, str(tmp_path / "tf1"))
    assert prefix == str(tmp_path / "tf1" / "model.ckpt")
    originals.assert_same_tensors(convert.read("tf1", prefix).tensors, weights.tensors)
