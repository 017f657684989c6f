"""The original's TF1 checkpoints (`convert.tf1`): an exact round trip, errors that name
the tensor."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.convert import table
from electra_tf.convert import tf1
from tests.convert import originals


def test_tf1_round_trip_is_exact(original, weights, tmp_path):
    prefix = tf1.TF1().write(weights, str(tmp_path / "out"), original["vocab"].path)
    assert sorted(n for n, _ in tf.train.list_variables(prefix)) == sorted(original["tensors"])
    again = tf1.TF1().read(str(tmp_path / "out"))  # the directory: its latest checkpoint
    assert again.spec == weights.spec and again.ignored == ()
    originals.assert_same_tensors(again.tensors, weights.tensors)


def _rewrite_tf1(original, directory, change):
    tensors = dict(original["tensors"])
    change(tensors)
    variables = {name: tf.Variable(value) for name, value in tensors.items()}
    tf.compat.v1.train.Saver(var_list=variables).save(None, os.path.join(directory,
                                                                         "model.ckpt"))
    return directory


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("electra/encoder/layer_1/output/dense/bias"),
     r"model.ckpt: no tensor electra/encoder/layer_1/output/dense/bias$"),
    (lambda t: t.update({"generator/encoder/layer_0/attention/self/key/kernel":
                         np.zeros((32, 16), "float32")}),
     r"model.ckpt: generator/encoder/layer_0/attention/self/key/kernel has shape \[32, 16\], "
     r"expected \[32, 32\]"),
])
def test_tf1_missing_or_misshapen_tensor_is_named(original, tmp_path, change, message):
    directory = _rewrite_tf1(original, str(tmp_path), change)
    with pytest.raises(table.ConversionError, match=message):
        tf1.TF1().read(directory)


def test_tf1_heads_that_do_not_divide_the_width_name_the_flag(original, tmp_path):
    """The numbers of heads are the user's (--num_heads, --generator_num_heads): the
    error names the flag, and the width the checkpoint says."""
    with pytest.raises(table.ConversionError, match=r"^--num_heads=3: the discriminator's "
                       r"hidden size in .*model.ckpt is 64, not a multiple of 3$"):
        tf1.TF1().read(original["dir"], num_heads=3)
    with pytest.raises(table.ConversionError, match=r"^--generator_num_heads=5: the "
                       r"generator's hidden size in .*model.ckpt is 32, not a multiple of 5$"):
        tf1.TF1().read(original["dir"], generator_num_heads=5)
    # A checkpoint without a generator encoder has no generator heads to set.
    alone = originals.write_original(str(tmp_path), generator=False)
    with pytest.raises(table.ConversionError, match=r"^--generator_num_heads=2: .*model.ckpt "
                       r"holds no generator encoder of its own \(no generator\); leave the "
                       r"flag out$"):
        tf1.TF1().read(alone["dir"], generator_num_heads=2)


@pytest.mark.parametrize("suffix, size, message", [
    (".index", 0, "(file is too short to be an sstable)"),
    (".index", None, "(not an sstable (bad magic number))"),  # 100 bytes of garbage
    (".data-00000-of-00001", 0.5, "(Read less bytes than requested)"),
])
def test_tf1_damaged_checkpoint_is_one_line_naming_it(original, tmp_path, suffix, size,
                                                      message):
    for name in os.listdir(original["dir"]):
        shutil.copy(os.path.join(original["dir"], name), tmp_path)
    prefix = str(tmp_path / "model.ckpt")
    if size is None:
        with open(prefix + suffix, "wb") as f:
            f.write(b"x" * 100)
    else:
        os.truncate(prefix + suffix, int(os.path.getsize(prefix + suffix) * size))
    with pytest.raises(table.ConversionError) as e:
        tf1.TF1().read(prefix)
    assert str(e.value) == f"{prefix}: not a readable checkpoint {message}"
