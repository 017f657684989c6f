"""Small data that tests make for themselves: a vocab, a corpus, TFRecord shards, a tiny
pre-trained run; a runner of SavedModel signatures in TF Serving's session loader; a check
that an export holds a checkpoint's weights; a counter of the fusions over a shape in
compiled HLO; the exact gelu in float64."""

import json
import math
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

from electra_tf import compat
from electra_tf.data import writer
from electra_tf.model import context
from electra_tf.text import corpus
from electra_tf.text import tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**extra):
    """The environment for a child Python process of a test: this one's, with this
    checkout's electra_tf first on the path, Keras on TF, TF's C++ log at warnings and
    above, no TF_CONFIG (a child joins a cluster only when `extra` gives it one), then
    `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p))
    env.update(extra)
    return env


def without_xla_cache(env):
    """`env` without the session's shared XLA executables (conftest.py): for a process that
    compiles under XLA_FLAGS of its own, whose executables would be saved under keys that
    hold none of them, and loaded by processes that run without those flags."""
    flags = [flag for flag in env.get("TF_XLA_FLAGS", "").split()
             if not flag.startswith(compat.XLA_PERSISTENT_CACHE)]
    return {**env, "TF_XLA_FLAGS": " ".join(flags)}


def run_tool(tool, *args, timeout=600, first_on_path=None):
    """`python tools/<tool> ARGS` from the checkout's root, with this checkout's electra_tf
    first on the path (wherever the package is installed), after `first_on_path` if
    given; the CompletedProcess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (first_on_path, ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, os.path.join(ROOT, "tools", tool), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


SERVING_SEQ = 16  # max_seq_length of the run the serving tests share (serving/conftest.py)
WORDS = ("the cat dog sat ran on under a mat log big small red blue and then it was "
         "very happy sad tree house").split()


def write_vocab(directory, words=WORDS) -> tokenizer.Vocab:
    """A vocab with the special tokens first, the given words, and a few suffixes."""
    path = os.path.join(directory, "vocab.txt")
    tokens = tokenizer.SPECIAL_TOKENS + [".", ","] + list(words) + ["##s", "##ed"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return tokenizer.Vocab.load(path)


def sentences(n, seed=0, min_words=3, max_words=12):
    """`n` random sentences over `WORDS`, reproducible for a seed."""
    import random  # pylint: disable=g-import-not-at-top
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words)))
            + " ." for _ in range(n)]


def write_corpus(directory, num_documents=40, sentences_per_document=8, seed=0,
                 name="corpus.txt") -> str:
    """A corpus file in the pre-training format; returns its path."""
    path = os.path.join(directory, name)
    docs = [sentences(sentences_per_document, seed=seed * 1000 + i)
            for i in range(num_documents)]
    corpus.write_corpus(corpus.documents_to_lines(docs), path)
    return path


def write_tfds_dataset(data_dir, name, texts, num_shards=None) -> str:
    """A prepared TFDS dataset `name` in `data_dir` whose train split's examples have
    one feature, `text` (the given bytes), in `num_shards` shards (None: TFDS's
    choice); returns `data_dir`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    builder = tfds.dataset_builders.TfDataBuilder(
        name=name, version="1.0.0",
        split_datasets={"train": tf.data.Dataset.from_tensor_slices({"text": texts})},
        features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
        data_dir=data_dir)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=num_shards))
    return data_dir


def make_data(directory, vocab, max_seq_length=32, num_shards=2, seed=0, **corpus_kwargs):
    """Corpus → TFRecord shards + manifest in `directory/data`; returns that directory."""
    corpus_path = write_corpus(directory, seed=seed, **corpus_kwargs)
    out = os.path.join(directory, "data")
    writer.write_pretraining_data(corpus.open_corpus(corpus_path), vocab, out,
                                  max_seq_length=max_seq_length, num_shards=num_shards,
                                  seed=seed, log=lambda _: None)
    return out


def learnable_corpus(path, num_documents, seed):
    """Sentences that repeat one word ("cat cat cat cat ."): a replaced token differs
    from its neighbours, a signal a tiny model picks up in a few hundred steps."""
    import random  # pylint: disable=g-import-not-at-top
    rng = random.Random(seed)
    docs = [[" ".join([rng.choice(WORDS)] * rng.randint(4, 10)) + " ."
             for _ in range(6)] for _ in range(num_documents)]
    corpus.write_corpus(corpus.documents_to_lines(docs), path)
    return path


def write_training_data(root, words=WORDS) -> dict:
    """Vocab (`write_vocab` of `words`), train (300 documents) and eval (40) shards of
    `learnable_corpus` at max_seq_length 32 under `root`: {"vocab", "train", "eval",
    "root"} paths."""
    vocab = write_vocab(str(root), words)
    out = {"vocab": vocab.path, "root": str(root)}
    for split, n, seed in (("train", 300, 0), ("eval", 40, 1)):
        text = learnable_corpus(os.path.join(root, f"{split}.txt"), n, seed)
        out[split] = os.path.join(root, split)
        writer.write_pretraining_data(corpus.open_corpus(text), vocab, out[split],
                                      max_seq_length=32, num_shards=2, seed=seed,
                                      log=lambda _: None)
    return out


def train_command(data, workdir, *overrides, steps=300) -> list[str]:
    """`python -m electra_tf.train` on `write_training_data`'s data: the tiny config at
    batch 16, sequence 32 (later overrides win)."""
    return [
        sys.executable, "-m", "electra_tf.train",
        f"--config={os.path.join(ROOT, 'configs', 'electra.py')}:tiny",  # from any cwd
        f"--workdir={workdir}", f"--config.data.train_files={data['train']}",
        f"--config.data.eval_files={data['eval']}", f"--config.data.vocab_file={data['vocab']}",
        "--config.data.max_seq_length=32", "--config.data.shuffle_buffer=1000",
        "--config.train.batch_size=16", f"--config.train.steps={steps}",
        "--config.train.warmup_steps=15", "--config.train.log_every=50",
        "--config.train.checkpoint_every=100", "--config.train.eval_every=300",
        "--config.train.eval_steps=5", *overrides]


def finetune_command(task, workdir, pretrained, data_dir, *overrides, seq=16) -> list[str]:
    """`python -m electra_tf.finetune` on `configs/finetune.py:TASK` from the pre-trained
    run `pretrained`, the task's files in `data_dir`, sequence `seq` (later overrides
    win; with workdir None, give --workdir among them)."""
    return [sys.executable, "-m", "electra_tf.finetune", f"--config=configs/finetune.py:{task}",
            *([f"--workdir={workdir}"] if workdir else []),
            f"--config.init_checkpoint={pretrained}", f"--config.data.dir={data_dir}",
            f"--config.data.max_seq_length={seq}", *overrides]


def forge_step(checkpoint_dir, step):
    """Writes the newest checkpoint of `checkpoint_dir` again as ckpt-STEP with its step
    variable set to `step`, every other tensor as it was, and makes it the latest: a run
    that seems to have trained `step` steps, without training them."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(checkpoint_dir))
    names = sorted(reader.get_variable_to_shape_map())  # the object graph included
    tensors = [reader.get_tensor(name) for name in names]
    i = names.index("step/.ATTRIBUTES/VARIABLE_VALUE")
    tensors[i] = np.array(step, tensors[i].dtype)
    prefix = os.path.join(checkpoint_dir, f"ckpt-{step}")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=tensors)
    tf.compat.v1.train.update_checkpoint_state(checkpoint_dir, prefix)
    return prefix


def rewind(workdir, copy, step) -> str:
    """A copy of the finished run `workdir` at `copy`, stopped after its checkpoint at
    `step`: the later checkpoints removed, ckpt-STEP the latest, as a run stopped there
    leaves it. The run's own command then resumes there and must retrain the rest to
    the same weights, without a run of the first STEP steps of its own."""
    import glob  # pylint: disable=g-import-not-at-top
    import shutil  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from electra_tf import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    shutil.copytree(workdir, copy)
    checkpoints = workdir_lib.checkpoints(copy)
    prefix = os.path.join(checkpoints, f"ckpt-{step}")
    assert os.path.exists(prefix + ".index"), f"{prefix}: no such checkpoint"
    kept = []
    for path in glob.glob(os.path.join(checkpoints, "ckpt-*")):
        name = re.fullmatch(r"ckpt-(\d+)\.(index|data-\d+-of-\d+)", os.path.basename(path))
        if name and int(name.group(1)) > step:
            os.remove(path)
        elif name and name.group(2) == "index":
            kept.append((int(name.group(1)), path[:-len(".index")]))
    tf.compat.v1.train.update_checkpoint_state(  # the older ones listed, as a run does
        checkpoints, prefix, all_model_checkpoint_paths=[p for _, p in sorted(kept)])
    return copy


def write_pretrained_run(directory, max_seq_length=16, dropout=None, objective=None):
    """A tiny pre-training workdir with random weights (config.json, vocab.txt, a
    model-only checkpoint), as export and fine-tuning read it, in `directory` (made if
    needed), of `objective` (default the config's). Returns (vocab, model)."""
    import json  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from configs import electra as electra_configs  # pylint: disable=g-import-not-at-top
    from electra_tf import model_config  # pylint: disable=g-import-not-at-top
    os.makedirs(directory, exist_ok=True)
    vocab = write_vocab(str(directory))
    config = electra_configs.get_config("tiny")
    config.data.max_seq_length = max_seq_length
    if dropout is not None:
        config.model.dropout = config.model.attention_dropout = dropout
    if objective is not None:
        config.model.objective = objective
    config = model_config.resolve(config)
    model = model_config.pretrainer(config, vocab.size).build_for(max_seq_length, 3)
    checkpoint = tf.train.Checkpoint(step=tf.Variable(7, dtype=tf.int64), model=model)
    checkpoint.save(os.path.join(directory, "checkpoints", "ckpt"))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config.to_dict(), f)
    return vocab, model


def summaries(logdir, tag, value_of=float) -> list:
    """[(step, value_of(array))] of `tag` in the event files of `logdir` (a path or a URL),
    sorted."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    out = []
    for path in sorted(tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    out.append((event.step, value_of(tf.make_ndarray(value.tensor))))
    return sorted(out)


def assert_export_holds(export_dir, checkpoint, texts=("the cat sat",)) -> np.ndarray:
    """The pre-training export at `export_dir` holds `checkpoint`'s trained weights (each
    of its float variables equals a tensor of the checkpoint, no two the same one, none
    an optimizer slot; `checkpoint`: a prefix, or a folder for its latest) and scores
    `texts`: one probability a position, in [0, 1]. Returns them ([len(texts),
    max_seq_length])."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    loaded = tf.saved_model.load(export_dir)
    reader = tf.train.load_checkpoint(checkpoint)
    # A weight is saved once, under the first path to it: model/... or the optimizer's
    # list of what it trains; optimizer/_variables/ are its slots. Each read once.
    unused = {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
              if key.endswith("VARIABLE_VALUE")
              and not key.startswith("optimizer/_variables/")}
    weights = [v for v in loaded.variables if v.dtype.is_floating]
    assert len(weights) > 10, [v.name for v in loaded.variables]
    for variable in weights:
        value = variable.numpy()
        same = next((k for k, saved in unused.items() if saved.shape == value.shape
                     and np.array_equal(value, saved)), None)
        assert same is not None, variable.name
        del unused[same]
    scores = loaded.signatures["serving_default"](text=tf.constant(list(texts)))[
        "replaced_probability"].numpy()
    assert scores.shape[0] == len(texts) and np.all((scores >= 0) & (scores <= 1)), scores
    return scores


_SESSION_SCRIPT = """
import pickle, sys, tensorflow_text
from tensorflow.python.tools import saved_model_cli
with open(sys.argv[2], "rb") as f:
    requests = pickle.load(f)
for label, (signature, feeds) in requests.items():
    saved_model_cli.run_saved_model_with_feed_dict(
        sys.argv[1], "serve", signature, feeds, sys.argv[3] + "/" + label, False)
"""


def session_run(export_dir, requests, outdir):
    """Runs `{label: (signature, {input: array})}` in one subprocess through the loader
    `saved_model_cli run` uses (`tf.compat.v1` session + `loader.load`, after `import
    tensorflow_text`), as TF Serving runs the graph. Returns `{label: {output: array}}`.

    The feeds travel pickled, so string inputs may hold any bytes (invalid UTF-8 too).
    """
    import numpy as np  # pylint: disable=g-import-not-at-top
    os.makedirs(outdir, exist_ok=True)
    feeds_path = os.path.join(outdir, "requests.pkl")
    with open(feeds_path, "wb") as f:
        pickle.dump({label: (signature, {k: np.asarray(v) for k, v in feeds.items()})
                     for label, (signature, feeds) in requests.items()}, f)
    result = subprocess.run([sys.executable, "-c", _SESSION_SCRIPT, export_dir, feeds_path,
                             outdir], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {label: {f[:-4]: np.load(os.path.join(outdir, label, f), allow_pickle=True)
                    for f in os.listdir(os.path.join(outdir, label))}
            for label in requests}


def run_local_workers(command, log_dir, num_workers=2, timeout=480) -> list[str]:
    """Runs `command` as the `num_workers` local workers of one multi_worker cluster (a
    TF_CONFIG each, on free ports) from the repository's root; returns each worker's
    log. Fails the test on a timeout or a non-zero exit, with the logs."""
    from tests.training import test_distribute as td  # pylint: disable=g-import-not-at-top
    workers = [f"127.0.0.1:{td._free_port()}" for _ in range(num_workers)]  # pylint: disable=protected-access
    procs, logs = [], []
    for index in range(num_workers):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        logs.append(os.path.join(log_dir, f"worker_{index}.log"))
        with open(logs[-1], "w") as out:
            procs.append(subprocess.Popen(
                command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                env=child_env(TF_CONFIG=json.dumps(tf_config))))
    td._wait_all(procs, logs, timeout=timeout)  # pylint: disable=protected-access
    return [td._tail(log, 400) for log in logs]  # pylint: disable=protected-access


def finetune_three_ways(command, directory, stdout=()) -> None:
    """Runs the fine-tuning `command` (`finetune_command` without a workdir) on one
    device, mirrored over 2 logical CPUs and as two local workers (multi_worker), in
    DIRECTORY/one, /mirrored and /workers. Asserts each ran under its strategy (and
    printed each of `stdout`, one process a run), that the workers' run left no other
    worker's files, and that the mirrored and the workers' evaluations are the one
    device's: the same steps, the same metrics up to the order of sums."""
    directory = str(directory)
    runs = {"one": ["--config.runtime.strategy=one_device"],
            "mirrored": ["--config.runtime.strategy=mirrored", "--config.runtime.cpu_devices=2"]}
    for name, flags in runs.items():
        workdir = os.path.join(directory, name)
        result = subprocess.run(command + [f"--workdir={workdir}"] + flags, cwd=ROOT,
                                capture_output=True, text=True, timeout=600, env=child_env())
        assert result.returncode == 0, result.stderr[-3000:]
        assert all(text in result.stdout for text in stdout), result.stdout[-3000:]
    assert "MirroredStrategy: 2 replica(s)" in result.stderr
    workers = os.path.join(directory, "workers")
    for text in run_local_workers(command + [f"--workdir={workers}",
                                             "--config.runtime.strategy=multi_worker"],
                                  directory):
        assert "MultiWorkerMirroredStrategy: 2 replica(s)" in text
    assert not os.path.exists(os.path.join(workers, "tmp"))  # the other worker's, removed
    with open(os.path.join(directory, "one", "results.json"), encoding="utf-8") as f:
        one = json.load(f)["evaluations"]
    for name in ("mirrored", "workers"):
        with open(os.path.join(directory, name, "results.json"), encoding="utf-8") as f:
            other = json.load(f)["evaluations"]
        assert [e["step"] for e in other] == [e["step"] for e in one], name
        for a, b in zip(one, other):
            assert b["metrics"]["validation"] == pytest.approx(
                a["metrics"]["validation"], rel=1e-3, abs=1e-6), (name, a, b)


def one_line_error(result) -> str:
    """The `error: ...` line of a tool that refused its input; asserts exit code 2, no
    traceback, and that every other line of stderr is a log line."""
    # What TF's C++ runtime and absl's logger write ("E1126 09:46:01.53 123 file.cc:52]
    # ..."): start-up chatter (no CUDA driver here) and log lines, never the tool's error.
    log_line = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\] |"
                          r"^WARNING: All log messages before absl::InitializeLog\(\)")
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [l for l in result.stderr.splitlines() if l.strip() and not log_line.match(l)]
    assert len(lines) == 1 and lines[0].startswith("error: ") and lines[0][7:].strip(), lines
    return lines[0]


def snapshot(path) -> dict:
    """{relative path: bytes} of a file or every file under a directory, to assert that
    a refused command left them as they were."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return {"": f.read()}
    files = {}
    for directory, _, names in os.walk(path):
        for name in names:
            full = os.path.join(directory, name)
            with open(full, "rb") as f:
                files[os.path.relpath(full, path)] = f.read()
    return files


def forward(model, batch, **fields) -> dict:
    """One pass of `model`'s objective over `batch` in a `StepContext` of `fields`
    (`uniform`, `training`, `seed`, `temperature`, ...)."""
    return model.objective.forward(model, batch, context.StepContext(**fields))


def fusions_over(hlo: str, dims) -> list[str]:
    """The fusions of the compiled program (not those inside other fusions) that read or
    write a tensor whose dimensions are `dims` in any order (any layout XLA chose)."""
    want = sorted(dims)
    computations, name = {}, None
    for line in hlo.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if header and not line.startswith(" "):
            name = header.group(1)
            computations[name] = []
        elif name and line.startswith("  "):
            computations[name].append(line.strip())
    fused = set(re.findall(r"calls=%([\w.\-]+)", hlo))
    found = []
    for computation, lines in computations.items():
        if computation in fused:
            continue
        shapes = {}
        for line in lines:
            parsed = re.match(r"(?:ROOT )?%([\w.\-]+) = (\(?[^=]*?)\s+([\w\-]+)\((.*)", line)
            if not parsed:
                continue
            instruction, shape, op, rest = parsed.groups()
            shapes[instruction] = shape
            if op != "fusion":
                continue
            operands = re.findall(r"%([\w.\-]+)", rest.split(")")[0])
            touched = " ".join([shape] + [shapes.get(o, "") for o in operands])
            if any(sorted(int(d) for d in found_dims.split(",") if d) == want
                   for found_dims in re.findall(r"\[([\d,]*)\]", touched)):
                found.append(instruction)
    return found


def exact_gelu(x) -> np.ndarray:
    """The exact gelu, ½ · x · (1 + erf(x / √2)), of `x` in float64 (`math.erf`): the
    reference the model's and heads' gelus are checked against."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
