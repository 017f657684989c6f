"""tools/compare_objectives.py and electra_tf/experiments: variants (presets, custom
overrides of any key, bad specs) planned at equal training FLOPs; shortened, three
variants pre-trained and fine-tuned on a task made from the corpus' lines, with the
table, plot and results."""

import json
import os
import subprocess
import sys

import pytest

from configs import electra as electra_configs
from configs import finetune as finetune_configs
from electra_tf import errors
from electra_tf import model_config
from electra_tf.experiments import compare
from electra_tf.experiments import variants
from electra_tf.model import objectives
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(name="vocab", scope="module")
def fixture_vocab(tmp_path_factory):
    return helpers.write_vocab(tmp_path_factory.mktemp("vocab"))


def _config():
    config = electra_configs.get_config("tiny")
    config.data.max_seq_length = 32
    config.train.steps = 100
    return config


def _steps(planned):
    return {p.variant.name: p.steps for p in planned}


def test_the_objectives_preset_is_every_objective_at_the_flops_of_electra(vocab):
    planned = variants.plan(_config(), vocab, variants.expand(["objectives"]))
    assert list(_steps(planned)) == list(objectives.OBJECTIVES)
    steps = _steps(planned)
    # No generator: more steps; the vocabulary at every position: fewer.
    assert steps["electra"] == 100 and steps["mlm"] > 100 > steps["all_tokens_mlm"]
    assert steps["electric"] < 100  # two generator towers and a cloze head at every token
    budget = planned[0].flops
    for p in planned:
        assert p.config.model.objective == p.variant.name
        assert p.config.train.steps == p.steps
        assert budget - p.flops_per_step < p.flops <= budget  # floor(budget / per step)
    # --objectives=a,b is the same variants as the preset's, named alike.
    assert variants.expand(objective_names=["electra", "mlm"]) == [
        v for v in variants.PRESETS["objectives"] if v.name in ("electra", "mlm")]


def test_the_generator_size_preset_gives_wider_generators_fewer_steps(vocab):
    config = _config()
    config.train.warmup_steps = 30
    planned = variants.plan(config, vocab, variants.expand(["generator_size"]),
                            budget="gen_1_2", evaluations=3)
    # tiny's discriminator is 64 wide.
    assert [(p.variant.name, model_config.shape(p.config).generator.hidden_size)
            for p in planned] == [("gen_1_4", 16), ("gen_1_2", 32), ("gen_3_4", 48),
                                  ("gen_1", 64)]
    steps = [p.steps for p in planned]
    assert steps == sorted(steps, reverse=True) and len(set(steps)) == 4
    assert steps[1] == 100  # the budget variant trains config.train.steps
    for p in planned:  # warm-up scaled with the steps, three evaluations
        assert p.config.train.warmup_steps == round(30 * p.steps / 100)
        assert p.config.train.eval_every == p.steps // 3
        assert p.flops <= planned[1].flops


def test_the_adversarial_preset_is_joint_against_adversarial_at_the_same_steps(vocab):
    planned = variants.plan(_config(), vocab, variants.expand(["adversarial"]))
    assert [(p.variant.name, p.config.train.algorithm, p.steps) for p in planned] == [
        ("joint", "joint", 100), ("adversarial", "adversarial", 100)]


def test_a_frozen_generator_is_charged_its_forward_pass_only(vocab):
    specs = ["trained:model.tie=none", "frozen:model.tie=none,train.generator=frozen"]
    planned = {p.variant.name: p for p in variants.plan(_config(), vocab,
                                                variants.expand(specs=specs))}
    assert planned["frozen"].flops_per_step < planned["trained"].flops_per_step
    assert planned["frozen"].steps > planned["trained"].steps


def test_the_report_is_written_whole_and_says_what_a_frozen_generator_is(
        vocab, tmp_path, monkeypatch):
    """run()'s writes through workdir.py (results.json, table.md, comparison.png, no
    file left aside), its log through absl, and a frozen generator's note: at random
    without generator_init, and its own training not charged. The runs themselves are
    stand-ins here (the slow end-to-end test trains them)."""
    from electra_tf.training import loop  # pylint: disable=g-import-not-at-top
    specs = ["trained:model.tie=none", "frozen:model.tie=none,train.generator=frozen"]
    planned = variants.plan(_config(), vocab, variants.expand(specs=specs))
    trained = []
    monkeypatch.setattr(loop, "train_and_evaluate",
                        lambda config, workdir: trained.append(workdir))
    read = []
    monkeypatch.setattr(compare, "evaluations", lambda logdir: read.append(logdir) or [
        (10, {"objective_loss": 3.0, "masked_lm_accuracy": 0.25, "disc_auc": 0.5})])
    monkeypatch.setattr(compare, "finetune", lambda *args: {"accuracy": 0.75})
    logged = []
    monkeypatch.setattr(compare.logging, "info", lambda *args: logged.append(args))
    out = str(tmp_path / "out")
    tuning = finetune_configs.get_config("sst2")  # checked first, then fine-tuned
    markdown = compare.run(planned, tuning, out, "task", _config(), "trained")
    assert trained == [os.path.join(out, "runs", n) for n in ("trained", "frozen")]
    assert read == [os.path.join(out, "runs", n, "logs", "eval")
                    for n in ("trained", "frozen")]
    assert sorted(os.listdir(out)) == ["comparison.png", "results.json", "table.md"]
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        rows = {r["variant"]: r for r in json.load(f)["rows"]}
    assert (rows["trained"]["generator"], rows["trained"]["note"]) == ("train", None)
    frozen = rows["frozen"]
    assert (frozen["generator"], frozen["generator_init"]) == ("frozen", None)
    assert frozen["note"].startswith("config.train.generator=frozen without config.model."
                                     "generator_init: the generator stays at its random")
    assert frozen["note"].endswith("its own training is not charged (training FLOPs count "
                                   "its forward pass only)")
    with open(os.path.join(out, "table.md"), encoding="utf-8") as f:
        assert f.read() == markdown
    assert f"\nfrozen: {frozen['note']}." in markdown and "\ntrained: " not in markdown
    with open(os.path.join(out, "comparison.png"), "rb") as f:
        assert f.read(4) == b"\x89PNG"
    assert [args[1] for args in logged[:2]] == ["trained", "frozen"]  # "== NAME (...)"


def test_a_custom_variant_overrides_any_key_typed_as_its_field(vocab):
    config = _config()
    spec = ("wide_hot:model.generator_hidden_fraction=1,model.temperature=3,"
            "data.whole_word_masking=True,config.train.learning_rate=1e-3,"
            "data.train_files=a.tfrecord,b.tfrecord")
    planned = variants.plan(config, vocab, variants.expand(specs=[spec, "as_given"]),
                            budget="as_given")
    by_name = {p.variant.name: p for p in planned}
    wide = by_name["wide_hot"].config
    assert (wide.model.generator_hidden_fraction, wide.model.temperature,
            wide.data.whole_word_masking, wide.train.learning_rate) == (
                1.0, 3.0, True, 1e-3)
    assert wide.data.train_files == "a.tfrecord,b.tfrecord"  # a value may hold commas
    assert by_name["as_given"].steps == 100
    assert by_name["as_given"].config.model.to_dict() == config.model.to_dict()
    # The generator of the discriminator's width costs more per step: fewer steps.
    assert by_name["wide_hot"].steps < 100
    assert config.model.temperature == 1.0  # the shared config is left alone


@pytest.mark.parametrize("spec, message", [
    ("bad name:model.temperature=2", "--variant=bad name:model.temperature=2: the name"),
    ("hot:temperature=2", "'temperature=2' is not KEY=VALUE"),
    ("hot:model.temperature", "'model.temperature' is not KEY=VALUE"),
    ("hot:model.temprature=2", "--variant=hot:model.temprature=2: config.model has no "
     "key 'temprature'"),
    ("hot:modle.temperature=2", "config has no section 'modle'"),
    ("hot:model.temperature=warm", "config.model.temperature='warm': expected float"),
    ("hot:model.temperature=2,model.temperature=3", "a key is given twice"),
    ("hot:model=2", "'model=2' is not KEY=VALUE"),
    ("neg:model.temperature=-1", "--variant=neg:model.temperature=-1: config.model."
     "temperature=-1.0"),
    ("obj:model.objective=bert", "--variant=obj:model.objective=bert: config.model."
     "objective='bert': choose one of"),
    ("alg:train.algorithm=gan", "--variant=alg:train.algorithm=gan: config.train."
     "algorithm='gan'"),
])
def test_a_bad_variant_is_an_error_naming_it(vocab, spec, message):
    with pytest.raises(errors.UserError) as e:
        variants.plan(_config(), vocab, variants.expand(specs=[spec]))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_variants_that_cannot_be_compared_are_errors(vocab):
    with pytest.raises(errors.UserError, match="variant 'joint' is given twice"):
        variants.expand(["adversarial"], ["joint:model.temperature=2"])
    with pytest.raises(errors.UserError, match="'electra' and 'base' are the same config"):
        variants.plan(_config(), vocab, variants.expand(
            specs=["electra:model.objective=electra", "base:"]))  # electra: the default
    with pytest.raises(errors.UserError, match="--budget_variant=gen_1: not one of"):
        variants.plan(_config(), vocab, variants.expand(["adversarial"]), budget="gen_1")
    with pytest.raises(errors.UserError, match="--preset=sizes: choose one of"):
        variants.expand(["sizes"])


def test_the_swapped_words_task_pairs_originals_with_swaps(tmp_path):
    text = tmp_path / "text.txt"
    originals = [f"w{i} a b c d" for i in range(10)]
    text.write_text("\n".join(originals + ["one two"]) + "\n")
    directory = compare.swapped_words_task(str(text), str(tmp_path / "task"),
                                                      8, seed=0)
    splits = {split: [l.split("\t") for l in open(os.path.join(directory, f"{split}.tsv"))
                      .read().splitlines()] for split in ("train", "dev")}
    assert splits["train"][0] == ["sentence", "label"]
    assert len(splits["train"]) == 9 and len(splits["dev"]) == 3
    for sentence, label in splits["train"][1:] + splits["dev"][1:]:
        assert (sentence in originals) == (label == "1")
    train, dev = ({frozenset(s.split()) for s, _ in splits[split][1:]}
                  for split in ("train", "dev"))
    assert not train & dev  # no dev sentence (swapped or not) is in training
    assert sum(r[1] == "1" for r in splits["train"][1:]) == 4
    with pytest.raises(Exception, match="fewer than the 12 --task_examples=10 needs"):
        compare.swapped_words_task(str(text), str(tmp_path / "t2"), 10, seed=0)


@pytest.mark.slow  # three pre-training runs and three fine-tunings in one process
def test_compare_three_variants_at_equal_flops(tmp_path):
    (tmp_path / "data").mkdir()
    data = helpers.write_training_data(tmp_path / "data")
    out = tmp_path / "compare"
    result = subprocess.run(
        [sys.executable, "tools/compare_objectives.py", "--config=configs/electra.py:tiny",
         f"--config.data.train_files={data['train']}",
         f"--config.data.eval_files={data['eval']}",
         f"--config.data.vocab_file={data['vocab']}", "--config.data.max_seq_length=32",
         "--config.data.shuffle_buffer=1000", "--config.train.batch_size=16",
         "--config.train.steps=12", "--config.train.eval_steps=2",
         "--config.train.steps_per_loop=4", "--objectives=electra,mlm",
         "--variant=adv:train.algorithm=adversarial,model.generator_hidden_fraction=0.25",
         "--evaluations=2",
         f"--task_text={data['root']}/eval.txt", "--task_examples=64",
         "--finetune_epochs=1", "--finetune_batch_size=16", f"--output_dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.load(open(out / "results.json"))
    rows = {r["variant"]: r for r in results["rows"]}
    assert list(rows) == ["electra", "mlm", "adv"]
    assert results["budget_variant"] == "electra"
    # Equal compute: mlm (no generator) trains more steps for the same FLOPs.
    assert rows["electra"]["steps"] == 12 and rows["mlm"]["steps"] > 12
    budget = rows["electra"]["flops"]
    assert budget - rows["mlm"]["flops_per_step"] < rows["mlm"]["flops"] <= budget
    for row in rows.values():
        # --evaluations=2: every steps // 2 steps, and at the end.
        assert len(row["eval"]) >= 2 and row["eval"][-1][0] == row["steps"]
        assert "objective_loss" in row["eval"][-1][1] and "loss" not in row["eval"][-1][1]
        # The fine-tuned dev metrics are those of the variant's own fine-tuning run.
        tuned = json.loads((out / "finetune" / "swapped_words" / row["variant"] /
                            "results.json").read_text())
        assert row["finetuned"] == next(iter(tuned["best"]["metrics"].values()))
        assert 0.0 <= row["finetuned"]["accuracy"] <= 1.0
    # The generator's held-out MLM accuracy and the discriminator's AUC, per variant.
    for name in ("electra", "adv", "mlm"):
        assert 0.0 <= rows[name]["masked_lm_accuracy"] <= 1.0
        assert rows[name]["masked_lm_accuracy"] == rows[name]["eval"][-1][1][
            "masked_lm_accuracy"]
    for name in ("electra", "adv"):
        assert 0.0 <= rows[name]["disc_auc"] <= 1.0
    assert rows["mlm"]["disc_auc"] is None
    # A quarter-width generator costs less per step than the default half: more steps.
    assert rows["adv"]["steps"] > 12 and rows["adv"]["algorithm"] == "adversarial"
    assert rows["adv"]["overrides"] == {"train.algorithm": "adversarial",
                                        "model.generator_hidden_fraction": "0.25"}
    table = (out / "table.md").read_text()
    assert "| electra | 12 |" in table and "| mlm |" in table and "| adv |" in table
    assert "adv: train.algorithm=adversarial, model.generator_hidden_fraction=0.25" in table
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"
