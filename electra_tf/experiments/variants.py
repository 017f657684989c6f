"""Named config variants and the equal-compute plan that trains them.

A variant is a name and overrides of the shared config, written
`NAME:KEY=VALUE[,KEY=VALUE...]` (a key as `--config.KEY` takes it, `config.` optional;
`NAME` or `NAME:` alone is the config as given). Any key of the config works, typed as
the field it sets. The presets are the comparisons the paper makes:

    objectives      one variant per pre-training objective (the paper's Table 5)
    generator_size  generator widths 1/4, 1/2, 3/4 and 1 of the discriminator's
                    (the paper's Figure 3, left, for one discriminator)
    adversarial     joint (maximum likelihood) against adversarial generator training
                    (the paper's Section 3.2 and Appendix F)

>>> from configs import electra
>>> config = electra.get_config("tiny")
>>> variant = parse("hot:model.temperature=2,config.data.whole_word_masking=true")
>>> variant
Variant(name='hot', overrides=(('model.temperature', '2'), ('data.whole_word_masking', 'true')))
>>> hot = apply(config, variant)
>>> hot.model.temperature, hot.data.whole_word_masking, config.model.temperature
(2.0, True, 1.0)
>>> [v.name for v in expand(["generator_size"])]
['gen_1_4', 'gen_1_2', 'gen_3_4', 'gen_1']
>>> apply(config, parse("hot:model.temprature=2"))
Traceback (most recent call last):
...
electra_tf.errors.UserError: --variant=hot:model.temprature=2: config.model has no key 'temprature'
"""

import ast
import dataclasses
import re

import ml_collections

from electra_tf import errors
from electra_tf import model_config
from electra_tf.data import pipeline
from electra_tf.model import objectives
from electra_tf.training import algorithms
from electra_tf.training import loop

# A variant's name is its run's directory name.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Overrides are split at commas followed by `key=`, so a value may hold commas
# (`data.train_files=a,b`) as long as no part of it looks like `key=`.
_NEXT_OVERRIDE = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_.]*=)")


@dataclasses.dataclass(frozen=True)
class Variant:
    """A name and its overrides, ((key, value as written), ...), keys without `config.`."""
    name: str
    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def spec(self) -> str:
        """The `--variant` spelling, for messages and the table."""
        return f"{self.name}:" + ",".join(f"{k}={v}" for k, v in self.overrides)


def parse(spec: str) -> Variant:
    """`NAME:KEY=VALUE,...` as a `Variant`; a `UserError` naming the spec otherwise."""
    name, _, rest = spec.partition(":")
    if not _NAME.fullmatch(name):
        raise errors.UserError(
            f"--variant={spec}: the name must be letters, digits, '_', '.' or '-' (it "
            "names the run's directory); write NAME:KEY=VALUE[,KEY=VALUE...]")
    overrides = []
    for item in (_NEXT_OVERRIDE.split(rest) if rest.strip() else []):
        key, equals, value = item.partition("=")
        key = key.strip().removeprefix("config.")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_]\w*)+", key):
            raise errors.UserError(
                f"--variant={spec}: {item.strip()!r} is not KEY=VALUE with a key such as "
                "model.objective; write NAME:KEY=VALUE[,KEY=VALUE...]")
        overrides.append((key, value.strip()))
    keys = [key for key, _ in overrides]
    if len(set(keys)) != len(keys):
        raise errors.UserError(f"--variant={spec}: a key is given twice")
    return Variant(name, tuple(overrides))


def _typed(spec: str, key: str, old, value: str):
    """`value` as the type of the field it replaces (`old`)."""
    try:
        if isinstance(old, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError("not true or false")
            return value.lower() in ("true", "1")
        if isinstance(old, int):
            return int(value)
        if isinstance(old, float):
            return float(value)
        if isinstance(old, str):
            return value
        try:  # tuples, lists, None: a Python literal, else the text itself
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    except ValueError as e:
        raise errors.UserError(f"--variant={spec}: config.{key}={value!r}: expected "
                               f"{type(old).__name__} ({e})") from None


def apply(config: ml_collections.ConfigDict, variant: Variant) -> ml_collections.ConfigDict:
    """A copy of `config` with the variant's overrides; unknown keys are an error."""
    run = config.copy_and_resolve_references()
    for key, value in variant.overrides:
        *sections, field = key.split(".")
        node, path = run, "config"
        for section in sections:
            if section not in node or not isinstance(node[section],
                                                     ml_collections.ConfigDict):
                raise errors.UserError(f"--variant={variant.spec}: {path} has no section "
                                       f"{section!r}")
            node, path = node[section], f"{path}.{section}"
        if field not in node:
            raise errors.UserError(f"--variant={variant.spec}: {path} has no key {field!r}")
        if isinstance(node[field], ml_collections.ConfigDict):
            raise errors.UserError(f"--variant={variant.spec}: {path}.{field} is a "
                                   "section; set a key in it")
        try:
            node[field] = _typed(variant.spec, key, node[field], value)
        except TypeError as e:  # ConfigDict's own type check
            raise errors.UserError(f"--variant={variant.spec}: config.{key}: "
                                   f"{' '.join(str(e).split())}") from None
    return run


PRESETS = {
    "objectives": tuple(Variant(name, (("model.objective", name),))
                        for name in objectives.OBJECTIVES),
    "generator_size": tuple(
        Variant(f"gen_{label}", (("model.generator_hidden_fraction", fraction),))
        for label, fraction in (("1_4", "0.25"), ("1_2", "0.5"), ("3_4", "0.75"),
                                ("1", "1.0"))),
    "adversarial": (Variant("joint", (("train.algorithm", "joint"),)),
                    Variant("adversarial", (("train.algorithm", "adversarial"),))),
}


def expand(presets=(), specs=(), objective_names=()) -> list[Variant]:
    """The variants of `presets`, then of `--objectives` (a variant per objective, named
    by it), then the `specs`, in order; a name given twice is an error."""
    found = []
    for preset in presets:
        if preset not in PRESETS:
            raise errors.UserError(f"--preset={preset}: choose one of {', '.join(PRESETS)}")
        found.extend(PRESETS[preset])
    found.extend(Variant(name, (("model.objective", name),)) for name in objective_names)
    found.extend(parse(spec) for spec in specs)
    names = [v.name for v in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise errors.UserError(f"variant {twice[0]!r} is given twice (by --preset, "
                               "--objectives or --variant); each name must be unique")
    return found


def flops_per_step(config, vocab_size: int, max_predictions: int) -> int:
    """Training FLOPs of one step of `config` (the batch): its objective's passes over
    its resolved shape (`model/objectives`), so a wider generator costs more and a
    frozen one only its forward pass."""
    return config.train.batch_size * objectives.training_flops(
        model_config.shape(config), config.data.max_seq_length, max_predictions,
        vocab_size, model_config.objective_name(config), model_config.generator_mode(config))


@dataclasses.dataclass(frozen=True)
class Planned:
    """A variant ready to run: its config (steps, warm-up and evaluations set)."""
    variant: Variant
    config: ml_collections.ConfigDict
    steps: int
    flops_per_step: int

    @property
    def flops(self) -> int:
        return self.steps * self.flops_per_step


def _identity(resolved) -> str:
    """What makes two runs the same: the resolved config, less the fractions the
    explicit shape replaced (a fraction under a set `generator_hidden_size` changes
    nothing)."""
    settings = resolved.to_dict()
    for key in ("generator_hidden_fraction", "generator_layer_fraction"):
        settings["model"].pop(key, None)
    return repr(settings)


def plan(config, vocab, variants: list[Variant], budget: str | None = None,
         evaluations: int = 4) -> list[Planned]:
    """Each variant's config and steps at equal training FLOPs: the budget is
    `config.train.steps` steps of the variant named `budget` (default the first); each
    variant trains floor(budget / its FLOPs per step) steps, the warm-up scaled alike,
    with `evaluations` held-out evaluations. Every variant's config is checked here
    (ranges, shape, objective, algorithm), before hours of pre-training, not after."""
    if not variants:
        raise errors.UserError("no variants: give --preset, --objectives or --variant")
    budget = budget or variants[0].name
    if budget not in [v.name for v in variants]:
        raise errors.UserError(f"--budget_variant={budget}: not one of the variants "
                               f"({', '.join(v.name for v in variants)})")
    configs, per_step, seen = {}, {}, {}
    for variant in variants:
        run = apply(config, variant)
        try:
            resolved = loop.validate(run)  # what the run itself checks first
            if algorithms.get(resolved).name == "two_stage":
                raise errors.UserError(
                    "config.train.algorithm='two_stage' is not compared at equal FLOPs "
                    "(its stages each cost less than a joint step, and this plan "
                    "counts joint steps)")
        except errors.UserError as e:
            raise errors.UserError(f"--variant={variant.spec}: {e}") from None
        same = seen.setdefault(_identity(resolved), variant.name)
        if same != variant.name:
            raise errors.UserError(f"variants {same!r} and {variant.name!r} are the same "
                                   "config (an override that changes nothing here?)")
        predictions = pipeline.masking_config(resolved, vocab).max_predictions
        configs[variant.name] = run
        per_step[variant.name] = flops_per_step(resolved, vocab.size, predictions)
    total = config.train.steps * per_step[budget]
    planned = []
    for variant in variants:
        run, cost = configs[variant.name], per_step[variant.name]
        steps = int(total // cost)
        if steps < 1:
            raise errors.UserError(f"--variant={variant.spec}: the budget buys no step")
        run.train.warmup_steps = round(config.train.warmup_steps * steps
                                       / config.train.steps)
        run.train.steps = steps
        run.train.eval_every = max(1, steps // evaluations)
        run.train.checkpoint_every = steps
        run.train.log_every = min(run.train.log_every, run.train.eval_every)
        planned.append(Planned(variant, run, steps, cost))
    return planned
