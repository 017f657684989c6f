"""The package's data flows one way (DESIGN.md sections 1-2), and importing changes nothing.

    text ─► data ─► training ─► finetuning        model ─► training, serving, convert
                 └► serving ──┘                   (the model reads no files, no text)

Each layer may import only the layers in its row below (and the shared modules, which
import no layer); every `import` counts, at the top of a module or inside a function:

    layer        may import                                  why
    shared       -                                           errors, progress, compat,
                                                             workdir, config_check,
                                                             profiling, registry:
                                                             leaves
    text         -                                           vocab and tokenizer first
    data         text                                        the pipeline never imports
                                                             the model
    model        -                                           the model never reads files
                                                             (model_config: config → shape,
                                                             beside it)
    training     text, data, model                           the loop wires them
    serving      text, data, model                           the exporter reads checkpoints
                                                             and configs, not the loop
    convert      text, model                                 beside serving: weights only
    finetuning   text, data, model, training, serving        it trains and exports
    benchmark    text, data, model, training, flags          tools' logic in the package
    experiments  text, data, model, training, finetuning     compare_objectives' logic:
                                                             pre-train, then fine-tune
    binaries     anything                                    cli, flags, train, finetune

and nothing but a binary imports one (`flags`: the tools' shared flags, also for
benchmark); nothing in electra_tf imports tools/, tests/ or configs/ (doctests may);
there is no import cycle among electra_tf modules (a package importing its own
submodules, which import its siblings, is not one).

`DEPARTURES` lists the imports that break a rule today, each with its way out; the test
fails when one is gone, so that the list only shrinks.
"""

import ast
import json
import os
import subprocess
import sys

import pytest

from tests import helpers

PACKAGE = os.path.join(helpers.ROOT, "electra_tf")

SHARED = {"errors", "progress", "compat", "workdir", "config_check", "profiling",
          "registry"}
BINARIES = {"cli", "flags", "train", "finetune"}
LAYER_OF_MODULE = {"model_config": "model"}  # top-level modules that belong to a layer
MAY_IMPORT = {
    "shared": set(),
    "text": set(),
    "data": {"text"},
    "model": set(),
    "training": {"text", "data", "model"},
    "serving": {"text", "data", "model"},
    "convert": {"text", "model"},
    "finetuning": {"text", "data", "model", "training", "serving"},
    "benchmark": {"text", "data", "model", "training", "flags"},
    "experiments": {"text", "data", "model", "training", "finetuning"},
}
DEPARTURES = {
    # Conversion reads a run through the exporter's loader (restore a workdir's model
    # from config.json + checkpoint; the file names are workdir.py's). Way out: the
    # loader in model_config (config → model), which serving and convert would share.
    ("electra_tf.convert.workdir", "electra_tf.serving.export"),
}


def modules() -> dict[str, str]:
    """{dotted name: path} of every module of electra_tf."""
    found = {}
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path[:-3], helpers.ROOT).replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


MODULES = modules()


def imports_of(name: str, path: str) -> set[str]:
    """Every module `name` imports (top-level or in a function), absolute names; for
    `from X import Y` the submodule X.Y where there is one, else X."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def layer(name: str) -> str:
    """The layer of an electra_tf module: its subpackage, or what a top-level module is."""
    parts = name.split(".")
    if len(parts) == 1:
        return "shared"  # electra_tf/__init__.py: a docstring
    if len(parts) == 2 and not MODULES[name].endswith("__init__.py"):
        if parts[1] in SHARED:
            return "shared"
        if parts[1] in BINARIES:
            return parts[1]
        return LAYER_OF_MODULE.get(parts[1], parts[1])
    return parts[1]


def test_every_module_has_a_layer():
    unknown = {name for name in MODULES
               if layer(name) not in MAY_IMPORT and layer(name) not in BINARIES}
    assert not unknown, f"add a row to MAY_IMPORT (and the table above): {sorted(unknown)}"


def _breaking_the_rules() -> set[tuple[str, str]]:
    wrong = set()
    for name, imported in GRAPH.items():
        own = layer(name)
        if own in BINARIES:
            continue
        for target in (i for i in imported if i.split(".")[0] == "electra_tf"):
            theirs = layer(target)
            if theirs not in (own, "shared") and theirs not in MAY_IMPORT[own]:
                wrong.add((name, target))
    return wrong


def test_data_flows_one_way():
    wrong = _breaking_the_rules()
    new = [f"{name} ({layer(name)}) imports {target} ({layer(target)})"
           for name, target in sorted(wrong - DEPARTURES)]
    assert not new, "\n".join(new)
    assert not DEPARTURES - wrong, f"fixed: remove from DEPARTURES: {DEPARTURES - wrong}"


def test_nothing_in_the_package_imports_tools_tests_or_configs():
    wrong = [f"{name} imports {target}" for name, imported in sorted(GRAPH.items())
             for target in sorted(imported)
             if target.split(".")[0] in ("tools", "tests", "configs")]
    assert not wrong, "\n".join(wrong)


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not _cycles(GRAPH)


_IMPORT_EVERYTHING = """
import ctypes, json, os, sys
print("start", os.getpid(), flush=True)
allocator_calls = []

class RecordingCDLL(ctypes.CDLL):  # whatever loads the C library through ctypes
    def __getattr__(self, name):
        if name.startswith("mall"):  # mallopt, malloc_trim
            allocator_calls.append(name)
        return super().__getattr__(name)

ctypes.CDLL = RecordingCDLL
before = dict(os.environ)
from absl import flags
for name in json.loads(sys.argv[1]):
    __import__(name)
    if name in ("electra_tf.train", "electra_tf.finetune"):  # both define --config
        for flag in ("config", "workdir"):
            delattr(flags.FLAGS, flag)
after = dict(os.environ)
print(json.dumps({"pid": os.getpid(), "allocator_calls": allocator_calls,
                  "changed": sorted(k for k in before.keys() | after.keys()
                                    if before.get(k) != after.get(k))}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc, execve")
def test_importing_every_module_changes_nothing_about_the_process():
    """No environment edits, no restart (execve: the first line would print twice), no
    allocator calls: binaries call `cli.prepare_process()` for those."""
    names = sorted(MODULES)
    env = helpers.child_env()
    for name in ("TF_XLA_FLAGS", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "TF_CPP_MIN_LOG_LEVEL",
                 "KERAS_BACKEND", "GLIBC_TUNABLES"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", _IMPORT_EVERYTHING, json.dumps(names)],
                            env=env, cwd=helpers.ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    starts = [line for line in lines if line.startswith("start ")]
    report = json.loads(lines[-1])
    assert starts == [f"start {report['pid']}"], starts
    assert report["changed"] == [] and report["allocator_calls"] == [], report
