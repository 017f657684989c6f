"""The pre-training objectives, chosen by name (`config.model.objective`).

Each is one small module with a subclass of `base.Objective` (its forward pass, its loss,
its metrics, its serving head and its FLOPs); "what does `electra_15` change" is
answered in `electra_15.py`. Adding one is that module and its line in `OBJECTIVES`.
Each is made from the run's config, `Member(config)` (`model_config.objective`; None
where only what the class says is read).

>>> OBJECTIVES.get("mlm").uses_generator, OBJECTIVES.get("electra_15").loss_names
(False, ('mlm_loss', 'rtd_loss'))
>>> small = sizes.ModelShape(sizes.SIZES["small"],
...                          sizes.generator_size(sizes.SIZES["small"], 0.25))
>>> [round(training_flops(small, 128, 19, 30522, name) / 1e9, 2) for name in
...  ("electra", "mlm", "replace_mlm", "all_tokens_mlm", "electric")]
[8.98, 8.33, 9.38, 11.96, 12.16]
>>> round(training_flops(small, 128, 19, 30522, generator="frozen") / 1e9, 2)  # no backward
8.28
>>> OBJECTIVES.create("bert")
Traceback (most recent call last):
...
electra_tf.errors.UserError: config.model.objective='bert': choose one of electra, electra_15, mlm, replace_mlm, all_tokens_mlm, electric
"""

from electra_tf import registry
from electra_tf.model import sizes
from electra_tf.model.objectives import all_tokens_mlm
from electra_tf.model.objectives import electra
from electra_tf.model.objectives import electra_15
from electra_tf.model.objectives import electric
from electra_tf.model.objectives import mlm
from electra_tf.model.objectives import replace_mlm

OBJECTIVES = registry.Registry("config.model.objective", [
    electra.Electra, electra_15.Electra15, mlm.MLM, replace_mlm.ReplaceMLM,
    all_tokens_mlm.AllTokensMLM, electric.Electric])


def training_flops(shape: sizes.ModelShape, seq_len: int, num_predictions: int,
                   vocab_size: int, objective: str = "electra",
                   generator: str = "train") -> int:
    """Training FLOPs per sequence of a whole `ModelShape` under `objective` (any shape,
    any tie: sharing weights saves no compute, each encoder pass still runs). Each
    objective counts its own passes (`model/flops.py`'s formulas): `mlm` has no
    generator, `all_tokens_mlm` projects to the vocabulary at every position.
    `generator` (config.train.generator): `frozen` counts the generator's forward pass
    only, `train` its backward too."""
    return OBJECTIVES.create(objective).training_flops(
        shape, seq_len, num_predictions, vocab_size, frozen_generator=generator == "frozen")
