"""SavedModels of the discriminator for TF Serving: raw text or token ids in.

    python tools/export_savedmodel.py --workdir=RUN --output=MODEL_BASE/1

Signatures (all `tensorflow/serving/predict`; [B] = batch, S = max_seq_length, H = hidden):

    serving_default  text [B] string                → replaced_probability [B, S] float32,
                                                      token_ids, input_mask [B, S] int32,
                                                      tokens [B, S] string (WordPieces, "" pad)
                                                      (an MLM objective's run: predicted_ids
                                                      [B, S] int32 and predicted_tokens [B, S]
                                                      string, the head's token at each
                                                      position, instead of replaced_probability)
    serving_pair     text, text_pair [B] string     → the same, for sentence pairs
    encode           text [B] string                → sequence_output [B, S, H] float32,
                                                      cls_output [B, H], input_mask [B, S]
    encode_pair      text, text_pair [B] string     → the same
    serving_ids      input_ids, input_mask,         → replaced_probability [B, S]
                     segment_ids [B, S] int32
    encode_ids       the same                       → sequence_output, cls_output
    score            text [B] string                → score [B] float32, token_scores [B, S]
                                                      (0 at padding), token_ids, input_mask
                                                      (objectives that score in one pass:
                                                      ELECTRA's Σ log P(original), ELECTRIC's
                                                      −Σ energies; docs/electric.md)

An ELECTRIC run's serving_default gives `energies` [B, S] (the head's output; its
probability of noise needs the generator's q, which is not exported).

Text is tokenized in the graph with tf.text's `FastBertTokenizer`, built from the run's
vocab with the run's normalisation (the same ops as `create_pretraining_data`), and packed
as in pre-training: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, segment ids 0 then 1,
truncated to S. A pair is truncated round-robin (one token from each side in turn, as
tf.text's `RoundRobinTrimmer`), computed with core ragged ops: the `RoundRobinTrim` kernel
exists only in TF Serving >= 2.20, and the export must load in older servers.

Every input is checked in the graph before anything reads it: text must be a vector
(a scalar, as REST's `"inputs": "hello"` sends, or a matrix is refused), a pair's two
vectors of one length, ids [B, S] with ids in the vocab, mask and segment ids 0 or 1. A
bad request gets InvalidArgument naming the input and the shape or range it needs; the
server goes on serving. The inputs are declared with unknown rank so that Grappler
cannot fold these checks away on the declared shape.

Any bytes are accepted as text: "" or whitespace gives `[CLS] [SEP]`, text longer than S
is cut (100,000 characters cost milliseconds), and invalid UTF-8 is read as if each
malformed sequence were U+FFFD, so it ends up inside an `[UNK]` word (tf.text's normalizer
decodes it so; no transcoding op is needed). `tests/serving/test_robustness.py` holds the
export to this in TF Serving's session loader.

The archive is written by `keras.export.ExportArchive`, whose variables TF Serving's
session-based loader finds (`tf.saved_model.save` of a `tf.Module` holding a Keras 3 model
does not: keras#20095). The vocab travels in `assets/vocab.txt`; a warm-up file of
PredictionLogs in `assets.extra/tf_serving_warmup_requests`.

Ops in the graph beyond core TF: FastBertNormalize (TF Text >= 2.12) and
FastWordpieceTokenizeWithOffsets (>= 2.11): the export needs TF Serving >= 2.12
(`MIN_TF_SERVING`).
"""

import os
import time

import keras
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_text as text  # noqa: F401  (registers the tokenizer ops)

from electra_tf import errors
from electra_tf import model_config
from electra_tf import progress
from electra_tf import workdir as workdir_lib
from electra_tf.data import masking
from electra_tf.data import pipeline
from electra_tf.model import objectives
from electra_tf.model import pretrainer
from electra_tf.text import packer as packer_lib
from electra_tf.text import tokenizer as tokenizer_lib

MIN_TF_SERVING = "2.12"
SIGNATURES = ("serving_default", "serving_pair", "encode", "encode_pair", "serving_ids",
              "encode_ids")
WARMUP_FILE = "tf_serving_warmup_requests"
WARMUP_TEXTS = ("ELECTRA detects replaced tokens.", "")
ID_INPUTS = ("input_ids", "input_mask", "segment_ids")
NUM_SEGMENTS = 2  # segment ids 0 and 1: the packer's two segments, the encoder's table


def discriminate(model: pretrainer.ElectraPretrainer, input_ids, input_mask, segment_ids):
    """The product: shared embeddings → discriminator encoder → its head (no generator).
    The head's outputs are the objective's (`Objective.serve`): `replaced_probability`
    [B, S] for ELECTRA, `predicted_ids` [B, S] for the MLM objectives."""
    sequence = model.discriminator({"token_ids": input_ids, "segment_ids": segment_ids,
                                    "padding_mask": input_mask}, training=False)
    sequence = tf.cast(sequence, tf.float32)
    return {**model.objective.serve(model, sequence, input_mask),
            "sequence_output": sequence, "cls_output": sequence[:, 0]}


def signatures(workdir: str) -> tuple:
    """The signatures `export_run` writes for the pre-training run in `workdir`."""
    config = model_config.complete(workdir_lib.read_json(workdir, workdir_lib.CONFIG))
    scores = objectives.OBJECTIVES.get(model_config.objective_name(config)).scores
    return SIGNATURES + (("score",) if scores else ())


def score(model: pretrainer.ElectraPretrainer, input_ids, input_mask, segment_ids):
    """One pass of the discriminator: `token_scores` [B, S] (the objective's
    `token_scores` at the text's tokens, 0 at [CLS], [SEP] and padding) and `score` [B],
    their sum. [CLS] and [SEP] are left out as the pseudo-log-likelihood leaves them out:
    ELECTRIC's cloze model never predicts them, so their energy is no likelihood."""
    sequence = model.discriminator({"token_ids": input_ids, "segment_ids": segment_ids,
                                    "padding_mask": input_mask}, training=False)
    tokens = model.objective.token_scores(model, tf.cast(sequence, tf.float32))
    counted = objectives.base.candidates({"input_mask": input_mask,
                                           "segment_ids": segment_ids})
    tokens = tokens * counted                                                  # [B, S]
    return {"score": tf.reduce_sum(tokens, -1), "token_scores": tokens}


def load_run(workdir: str, checkpoint: str | None = None, vocab_file: str | None = None):
    """(config, vocab, restored ElectraPretrainer, checkpoint path) of a training run.

    vocab_file: instead of the run's vocab.txt (it must have the same size)."""
    config_path = workdir_lib.path(workdir, workdir_lib.CONFIG)
    saved = workdir_lib.read_json(workdir, workdir_lib.CONFIG)
    if saved is None:
        raise errors.UserError(f"{config_path}: not found; --workdir must be a training "
                               "run's directory (python -m electra_tf.train --workdir=...)")
    if "size" not in saved.get("model", {}):
        raise errors.UserError(f"{config_path}: not a pre-training run's config (no "
                               "model.size); give the pre-training run's directory")
    config = model_config.complete(saved)  # as this version reads it, of any version
    run_vocab = workdir_lib.path(workdir, workdir_lib.VOCAB)
    vocab = tokenizer_lib.Vocab.load(vocab_file or run_vocab)
    path = checkpoint or workdir_lib.latest_checkpoint(workdir)
    if not path:
        raise errors.UserError(f"{workdir_lib.checkpoints(workdir)}: no checkpoint to export")
    model = model_config.pretrainer(config, vocab.size, dtype="float32")
    if vocab_file and tf.io.gfile.exists(run_vocab):
        trained = tokenizer_lib.Vocab.load(run_vocab).size
        if trained != vocab.size:
            raise errors.UserError(f"--vocab_file={vocab_file} has {vocab.size} tokens; the "
                                   f"run was trained with {trained} ({run_vocab})")
    model.build_for(config.data.max_seq_length, masking.max_predictions_per_seq(
        config.data.mask_prob, config.data.max_seq_length))
    model_config.read_model(model, path)
    return config, vocab, model, path


def lower_case_of(config, default: bool | None = True, workdir: str | None = None):
    """The normalisation the run's text goes through: the one its training data was made
    with (recorded in `workdir`'s config.json when it trained; for a run of an earlier
    version, the manifest of config.data.train_files if it is still there), else, for a
    converted run (`workdir`'s converted.json), its source's, else `default`."""
    saved = workdir_lib.read_json(workdir, workdir_lib.CONFIG) if workdir else None
    if saved and saved.get("lower_case") is not None:
        return bool(saved["lower_case"])
    data = pipeline.lower_case_of_data(config.data.train_files)
    if data is not None:
        return data
    converted = workdir_lib.read_json(workdir, workdir_lib.CONVERTED) if workdir else None
    if converted and converted.get("lower_case") is not None:
        return bool(converted["lower_case"])
    if default is not None:
        logging.warning("Neither the run's config.json, the training data's manifest "
                        "(config.data.train_files) nor a converted.json says whether the "
                        "vocab is cased: assuming lower_case=%s; pass --lower_case if it is "
                        "cased", default)
    return default


def export(model: pretrainer.ElectraPretrainer, vocab: tokenizer_lib.Vocab,
           max_seq_length: int, output: str, lower_case: bool = True,
           warmup: bool = True) -> str:
    """Writes the SavedModel to `output` (a `MODEL_BASE/<integer version>` directory)."""
    check_output(output)
    packer = packer_lib.TextPacker(vocab, max_seq_length, lower_case)
    ids_spec, text_spec, pair_spec = _input_specs(max_seq_length)

    def detect(ids, mask, segments):
        out = discriminate(model, ids, mask, segments)
        head = {k: v for k, v in out.items() if k not in ("sequence_output", "cls_output")}
        if "predicted_ids" in head:  # an MLM head: its tokens as WordPieces too
            head["predicted_tokens"] = packer.wordpiece_strings(head["predicted_ids"], mask)
        return {**head, "token_ids": ids, "input_mask": mask,
                "tokens": packer.wordpiece_strings(ids, mask)}

    def encode(ids, mask, segments):
        out = discriminate(model, ids, mask, segments)
        return {"sequence_output": out["sequence_output"], "cls_output": out["cls_output"],
                "input_mask": mask}

    def scored(ids, mask, segments):
        return {**score(model, ids, mask, segments), "token_ids": ids, "input_mask": mask}

    archive = keras.export.ExportArchive()
    archive.track(model.discriminator)  # only the discriminator's variables are exported
    archive.track(model.discriminator_head)
    archive.track(packer)
    endpoints = {
        "serving_default": (text_endpoint(packer, detect), [text_spec]),
        "serving_pair": (pair_endpoint(packer, detect), pair_spec),
        "encode": (text_endpoint(packer, encode), [text_spec]),
        "encode_pair": (pair_endpoint(packer, encode), pair_spec),
        "serving_ids": (ids_endpoint(detect, max_seq_length, vocab.size), ids_spec),
        "encode_ids": (ids_endpoint(encode, max_seq_length, vocab.size), ids_spec),
    }
    if model.objective.scores:
        endpoints["score"] = (text_endpoint(packer, scored), [text_spec])
    # Tracing the signatures is most of an export's time: trace each now, with progress.
    bar = progress.Progress(len(endpoints), "signatures")
    for done, (name, (function, specs)) in enumerate(endpoints.items(), start=1):
        archive.add_endpoint(name, function, specs).get_concrete_function()
        logging.info("export: traced %s: %s", name, bar.line(done))

    texts = np.array(WARMUP_TEXTS, dtype=object)
    requests = [("serving_default", {"text": texts}),
                ("serving_pair", {"text": texts, "text_pair": texts[::-1]}),
                ("encode", {"text": texts})]
    if model.objective.scores:
        requests.append(("score", {"text": texts}))
    return write_archive(archive, output, requests if warmup else None)


def export_classifier(model, vocab: tokenizer_lib.Vocab, task, max_seq_length: int,
                      output: str, lower_case: bool = True) -> str:
    """A fine-tuned `finetuning.model.Classifier` for `task` (a `glue.specs.TaskSpec`) as a
    SavedModel. Signatures: `serving_default` on raw text (`text`, and `text_pair` for
    pair tasks) and `serving_ids` on ids; outputs `probabilities` [B, labels] and `label`
    [B] (the task's label string), or `score` [B] for regression."""
    check_output(output)
    packer = packer_lib.TextPacker(vocab, max_seq_length, lower_case)
    ids_spec, text_spec, pair_spec = _input_specs(max_seq_length)
    names = tf.constant(list(task.label_names) or [""])

    def classify(ids, mask, segments):
        logits = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
                       training=False)
        if task.is_regression:  # trained on score / max: back to the task's scale
            return {"score": logits[:, 0] * task.score_range[1]}
        probabilities = tf.nn.softmax(logits)
        return {"probabilities": probabilities,
                "label": tf.gather(names, tf.argmax(probabilities, -1))}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(packer)
    texts = np.array(WARMUP_TEXTS, dtype=object)
    if len(task.text_columns) == 2:
        archive.add_endpoint("serving_default", pair_endpoint(packer, classify), pair_spec)
        warmup = {"text": texts, "text_pair": texts[::-1]}
    else:
        archive.add_endpoint("serving_default", text_endpoint(packer, classify), [text_spec])
        warmup = {"text": texts}
    archive.add_endpoint("serving_ids", ids_endpoint(classify, max_seq_length, vocab.size),
                         ids_spec)
    return write_archive(archive, output, [("serving_default", warmup)])


def _input_specs(max_seq_length: int):
    """(ids, text, pair) input signatures: three [B, S] int32 id tensors, `text`, and
    `text` + `text_pair` [B] strings, declared with unknown rank: TF Serving feeds any
    shape, and a static shape lets Grappler fold the in-graph checks away."""
    ids_spec = [tf.TensorSpec(None, tf.int32, name) for name in ID_INPUTS]
    text_spec = tf.TensorSpec(None, tf.string, "text")
    return ids_spec, text_spec, [text_spec, tf.TensorSpec(None, tf.string, "text_pair")]


def text_endpoint(packer: packer_lib.TextPacker, function):
    """`function(ids, mask, segments)` as an endpoint on `text` [B] string, checked."""
    return lambda text: function(*packer.pack(*check_texts(text=text)))


def pair_endpoint(packer: packer_lib.TextPacker, function):
    """`function(ids, mask, segments)` as an endpoint on `text`, `text_pair` [B] string."""
    return lambda text, text_pair: function(*packer.pack(*check_texts(
        text=text, text_pair=text_pair)))


def ids_endpoint(function, max_seq_length: int, vocab_size: int):
    """`function(ids, mask, segments)` as an endpoint on the three [B, S] int32 inputs."""
    return lambda ids, mask, segments: function(*check_ids(ids, mask, segments,
                                                           max_seq_length, vocab_size))


def _check(ok, message, *values):
    """An in-graph assertion: InvalidArgument "`message`" (its {} filled with `values`)
    unless `ok`."""
    return tf.debugging.Assert(ok, [tf.strings.format(message, values, summarize=8)])


def check_texts(**texts) -> list:
    """The [B] string inputs, named as in the signature, checked in the graph: each a
    vector, all of one length (else InvalidArgument naming the input; a scalar would
    crash the tokenizer, a matrix lose its rows)."""
    checks = [_check(tf.equal(tf.rank(t), 1),
                     f"{name} must be a vector of strings, shape [batch]; got shape {{}}",
                     tf.shape(t)) for name, t in texts.items()]
    values = list(texts.values())
    if len(values) > 1:
        with tf.control_dependencies(checks):
            sizes = tf.stack([tf.size(t) for t in values])
            checks.append(_check(tf.reduce_all(tf.equal(sizes, sizes[0])),
                                 f"{' and '.join(texts)} must have the same batch size; "
                                 "got {}", sizes))
    return _after(checks, values, [None])


def check_ids(ids, mask, segments, max_seq_length: int, vocab_size: int) -> list:
    """`input_ids`, `input_mask`, `segment_ids`, checked in the graph: each [B, S] with the
    export's S, ids in [0, vocab_size), mask 0 or 1, segment ids 0 or 1 (else
    InvalidArgument naming the input: on a GPU an id past the table reads zeros)."""
    values = dict(zip(ID_INPUTS, (ids, mask, segments)))
    checks = []
    for name, t in values.items():
        shape = tf.shape(t)
        checks.append(_check(
            tf.equal(tf.size(shape), 2) & tf.reduce_all(tf.equal(shape[1:], max_seq_length)),
            f"{name} must be an int32 matrix of shape [batch, {max_seq_length}]; got "
            "shape {}", shape))
    with tf.control_dependencies(checks):
        batch = tf.stack([tf.shape(t)[0] for t in values.values()])
        checks.append(_check(tf.reduce_all(tf.equal(batch, batch[0])),
                             f"{', '.join(ID_INPUTS)} must have the same shape; got batch "
                             "sizes {}", batch))
        ranges = {"input_ids": (vocab_size, f"token ids in [0, {vocab_size})"),
                  "input_mask": (2, "0 or 1"), "segment_ids": (NUM_SEGMENTS, "0 or 1")}
        for name, t in values.items():
            high, what = ranges[name]
            low_value, high_value = tf.reduce_min(t), tf.reduce_max(t)
            checks.append(_check(
                tf.equal(tf.size(t), 0) | ((low_value >= 0) & (high_value < high)),
                f"{name} must hold {what}; got values from {{}} to {{}}",
                low_value, high_value))
    return _after(checks, list(values.values()), [None, max_seq_length])


def _after(checks, values, shape) -> list:
    """`values`, read only once `checks` pass, with the static `shape` they checked. Not
    `tf.ensure_shape`: Grappler runs it before the assertions it depends on, and its
    error names no input."""
    with tf.control_dependencies(checks):
        values = [tf.identity(t) for t in values]
    for t in values:
        t.set_shape(shape)
    return values


def check_output(output: str) -> None:
    if not os.path.basename(os.path.normpath(output)).isdigit():
        raise errors.UserError(f"--output={output}: TF Serving needs MODEL_BASE/<integer "
                               "version>, e.g. /models/electra/1")
    if tf.io.gfile.exists(output):
        raise errors.UserError(f"--output={output} exists; choose a new version number")


def write_archive(archive, output: str, warmup_requests) -> str:
    # Write beside the target and rename: a crash never leaves a half-written version
    # that TF Serving would try to load.
    partial = workdir_lib.aside(output, "partial")
    if tf.io.gfile.exists(partial):
        tf.io.gfile.rmtree(partial)
    start = time.monotonic()
    archive.write_out(partial, verbose=False)
    if warmup_requests:
        write_warmup(os.path.join(partial, "assets.extra", WARMUP_FILE), warmup_requests)
    logging.info("export: wrote the SavedModel%s in %.1f s",
                 " and its warm-up requests" if warmup_requests else "",
                 time.monotonic() - start)
    workdir_lib.rename_folder(partial, output, last="saved_model.pb")
    return output


def write_warmup(path: str, requests, model_name: str = "electra") -> None:
    """TF Serving's warm-up file: a PredictionLog per (signature, {input: array})."""
    from tensorflow_serving.apis import model_pb2  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as out:
        for signature, inputs in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature))
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value, tf.string))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            out.write(log.SerializeToString())


def export_run(workdir: str, output: str, checkpoint: str | None = None,
               lower_case: bool | None = None, max_seq_length: int | None = None,
               vocab_file: str | None = None) -> str:
    """`export` of a training run's latest (or given) checkpoint."""
    config, vocab, model, _ = load_run(workdir, checkpoint, vocab_file)
    if lower_case is None:
        lower_case = lower_case_of(config, workdir=workdir)
    seq = max_seq_length or config.data.max_seq_length
    if seq > model.max_sequence_length or seq < 3:
        raise errors.UserError(f"--max_seq_length={seq}: must be in 3.."
                               f"{model.max_sequence_length} (the position table)")
    return export(model, vocab, seq, output, lower_case=lower_case)

