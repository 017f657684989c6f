"""tools/compare_objectives.py, shortened: two objectives at equal FLOPs on the test
data, fine-tuned on a task made from the corpus' lines; the table, plot and results."""

import json
import os
import subprocess
import sys

import pytest

from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import compare_objectives  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_the_swapped_words_task_pairs_originals_with_swaps(tmp_path):
    text = tmp_path / "text.txt"
    originals = [f"w{i} a b c d" for i in range(10)]
    text.write_text("\n".join(originals + ["one two"]) + "\n")
    directory = compare_objectives.swapped_words_task(str(text), str(tmp_path / "task"),
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
        compare_objectives.swapped_words_task(str(text), str(tmp_path / "t2"), 10, seed=0)


@pytest.mark.slow  # two pre-training runs and two fine-tunings in one process
def test_compare_two_objectives_at_equal_flops(tmp_path):
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
         "--config.train.steps_per_loop=4", "--objectives=electra,mlm", "--evaluations=2",
         f"--task_text={data['root']}/eval.txt", "--task_examples=64",
         "--finetune_epochs=1", "--finetune_batch_size=16", f"--output_dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.load(open(out / "results.json"))
    rows = {r["objective"]: r for r in results["rows"]}
    # Equal compute: mlm (no generator) trains more steps for the same FLOPs.
    assert rows["electra"]["steps"] == 12 and rows["mlm"]["steps"] > 12
    budget = rows["electra"]["flops"]
    assert budget - rows["mlm"]["flops_per_step"] < rows["mlm"]["flops"] <= budget
    for row in rows.values():
        # --evaluations=2: every steps // 2 steps, and at the end.
        assert len(row["eval"]) >= 2 and row["eval"][-1][0] == row["steps"]
        assert "loss" in row["eval"][-1][1]
        assert 0.0 <= row["finetuned"]["accuracy"] <= 1.0
    assert "masked_lm_accuracy" in rows["mlm"]["eval"][-1][1]
    table = (out / "table.md").read_text()
    assert "| electra | 12 |" in table and "| mlm |" in table
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"
