"""Experiments that compare runs: tools/compare_objectives.py's logic, the tool its CLI.

- `variants`: named sets of config overrides (`NAME:KEY=VALUE,...`), the presets
  (`objectives`, `generator_size`, `adversarial`), and the plan that gives each variant
  the steps of an equal training-FLOPs budget.
- `compare`: pre-trains each planned variant, fine-tunes each alike, and writes
  results.json, table.md and the plot; `swapped_words_task` makes a downstream task
  from a text file's lines.

Importing any of them changes nothing about the process.
"""
