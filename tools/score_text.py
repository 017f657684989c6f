r"""Scores texts with a pre-training run's model: how likely each text is as a whole, for
re-ranking (e.g. a speech recogniser's N-best hypotheses).

  python tools/score_text.py --workdir=RUN --input=texts.txt           # one text a line
  python tools/score_text.py --workdir=RUN --input=nbest.txt --pairs   # groups, best first
  ... [--checkpoint=RUN/checkpoints/ckpt-N] [--batch_size=64] [--lower_case=true|false]

How a run scores (docs/electric.md):
  electric                       −Σ energies over the tokens but [CLS]/[SEP], one pass
  electra, electra_15            Σ log P(original) over the tokens but [CLS]/[SEP], one
                                 pass (the discriminator's), as the export's `score`
                                 signature
  mlm, replace_mlm, all_tokens_mlm   the pseudo-log-likelihood: Σ_t log P(token t | the
                                 text with t masked) over the tokens but [CLS]/[SEP], one
                                 pass per token (batched)

Output: `score<TAB>text` per text, in input order; with --pairs the input is groups of
hypotheses separated by blank lines, each group printed best first (a blank line between
groups). The last line is JSON: the method, the texts, the forward rows run and the
seconds the scoring took; with --pairs also `first_best`, the share of groups whose FIRST
hypothesis in the file scores highest (strictly), its standard error, and `ties`, the
groups whose first ties the best of the others (counted as misses: e.g. texts that
tokenize alike, or differ only past the cut): list the reference first and `first_best`
is the re-ranking accuracy. Texts longer than the run's max_seq_length are cut, as in
training.
"""

from electra_tf import cli
if __name__ == "__main__":  # run as a tool, not imported (tests import some tools)
    cli.prepare_process()  # before TensorFlow is imported: TF reads its settings then

import json
import math
import time

import numpy as np
from absl import flags
from absl import logging

from electra_tf import errors
from electra_tf import flags as common_flags

_WORKDIR = flags.DEFINE_string("workdir", None, "The pre-training run's --workdir.",
                               required=True)
_INPUT = flags.DEFINE_string("input", None, "A text file: one text a line (with --pairs, "
                             "groups of hypotheses separated by blank lines).", required=True)
_PAIRS = flags.DEFINE_boolean("pairs", False, "Rank each group of --input, best first, and "
                              "report how often its first hypothesis wins.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None,
                                  "A checkpoint prefix (default: the run's latest).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Rows per forward pass.", lower_bound=1)
_LOWER_CASE = flags.DEFINE_boolean(
    "lower_case", None, "Lower-case and strip accents before WordPiece (default: the "
    "run's: its training data's casing, recorded in its config.json; a converted run's "
    "source's; else true).")


def check_flags() -> None:
    """The flags' checks that need no TensorFlow (a local path's; a URL's loads TF): a
    one-line `UserError` before the input or the run is read."""
    common_flags.check_input_path("input", _INPUT.value)
    common_flags.check_input_path("workdir", _WORKDIR.value, directory=True)
    if _CHECKPOINT.value:
        common_flags.check_input_path("checkpoint", _CHECKPOINT.value, prefix=True)


def read_lines(path: str) -> list[str]:
    """The lines of the UTF-8 text file `path` (split at "\n" alone: str.splitlines would
    also split a text at \u2028, \x0c and the like); a one-line `UserError` for a
    file it cannot read, or bytes that are not UTF-8 (no file there, or a folder:
    `check_flags` said so before TensorFlow loaded)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
    except (tf.errors.OpError, OSError) as e:
        reason = getattr(e, "message", None) or str(e)
        raise errors.UserError(f"--input={path}: cannot read it ({reason})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise errors.UserError(f"{path}:{line}: not UTF-8 (byte {e.start})") from None
    return [line.removesuffix("\r") for line in text.split("\n")]


def read_groups(path: str, pairs: bool) -> list[list[str]]:
    """The texts of `path`: one group per line, or with `pairs` the blank-line-separated
    groups (each of two or more); a one-line `UserError` naming the line otherwise."""
    lines = read_lines(path)
    groups, current, start = [], [], 1
    for number, line in enumerate(lines + [""], start=1):
        if line.strip() and not pairs:
            groups.append([line])
        elif line.strip():
            current, start = current + [line], start if current else number
        elif current:
            if len(current) < 2:
                raise errors.UserError(f"{path}:{start}: a group of one hypothesis; --pairs "
                                       "ranks groups of two or more, separated by blank lines")
            groups.append(current)
            current = []
    if not groups:
        raise errors.UserError(f"--input={path}: no text to score")
    return groups


def one_pass(model, ids, mask, segments, batch_size: int):
    """(token scores [N, S], rows run): the objective's one-pass `export.score`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from electra_tf.serving import export  # pylint: disable=g-import-not-at-top
    function = tf.function(lambda *a: export.score(model, *a)["token_scores"],
                           reduce_retracing=True, autograph=False)
    out = [function(ids[i:i + batch_size], mask[i:i + batch_size],
                    segments[i:i + batch_size]).numpy()
           for i in range(0, len(ids), batch_size)]
    return np.concatenate(out), len(ids)


def pseudo_log_likelihood(model, mask_id: int, ids, mask, segments, batch_size: int):
    """(token scores [N, S], rows run): log P(token t | the text with t masked) at every
    token but [CLS]/[SEP] (`base.candidates`), one row per token, `batch_size` rows a
    pass; 0 elsewhere."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from electra_tf.model.objectives import base  # pylint: disable=g-import-not-at-top

    @tf.function(reduce_retracing=True, autograph=False)
    def log_probability(row_ids, row_mask, row_segments, positions, targets):
        sequence = model.discriminator({"token_ids": row_ids, "segment_ids": row_segments,
                                        "padding_mask": row_mask}, training=False)
        logits = tf.cast(model.discriminator_head(sequence, mask_positions=positions[:, None]),
                         tf.float32)[:, 0]                                      # [n, V]
        return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)

    candidates = base.candidates({"input_mask": mask, "segment_ids": segments}).numpy()
    rows, positions = np.nonzero(candidates)
    scores = np.zeros(ids.shape, "float32")
    for i in range(0, len(rows), batch_size):
        r, p = rows[i:i + batch_size], positions[i:i + batch_size]
        masked = ids[r].copy()
        masked[np.arange(len(r)), p] = mask_id
        scores[r, p] = log_probability(masked, mask[r], segments[r], p.astype("int32"),
                                       ids[r, p]).numpy()
    return scores, len(rows)


def rank(groups, scores) -> dict:
    """{"first_best", "standard_error", "ties"}: how often each group's first text scores
    highest (strictly; a tie is a miss, and counted)."""
    wins, ties, i = [], 0, 0
    for group in groups:
        group_scores = scores[i:i + len(group)]
        wins.append(float(group_scores[0] > max(group_scores[1:])))
        ties += group_scores[0] == max(group_scores[1:])
        i += len(group)
    accuracy = float(np.mean(wins))
    return {"groups": len(groups), "first_best": round(accuracy, 4),
            "standard_error": round(math.sqrt(accuracy * (1 - accuracy) / len(wins)), 4),
            "ties": int(ties)}


def main(argv):
    del argv
    check_flags()
    # TensorFlow loads here, once the flags are checked.
    # pylint: disable=g-import-not-at-top
    import tensorflow as tf
    from electra_tf.serving import export
    from electra_tf.text import packer as packer_lib
    # pylint: enable=g-import-not-at-top
    groups = read_groups(_INPUT.value, _PAIRS.value)
    config, vocab, model, _ = export.load_run(_WORKDIR.value, _CHECKPOINT.value)
    lower_case = (export.lower_case_of(config, workdir=_WORKDIR.value) if _LOWER_CASE.value is None
                  else _LOWER_CASE.value)
    seq_length = config.data.max_seq_length
    texts = [text for group in groups for text in group]
    packer = packer_lib.TextPacker(vocab, seq_length, lower_case)
    ids, mask, segments = (t.numpy() for t in packer.pack(tf.constant(texts)))
    cut = int((mask.sum(1) == seq_length).sum())
    if cut:
        logging.warning("%d text(s) fill all %d tokens and may have been cut", cut, seq_length)

    start = time.monotonic()
    if model.objective.scores:
        method = "one_pass"
        tokens, rows = one_pass(model, ids, mask, segments, _BATCH_SIZE.value)
    else:
        method = "pseudo_log_likelihood"
        tokens, rows = pseudo_log_likelihood(model, vocab.mask_id, ids, mask, segments,
                                             _BATCH_SIZE.value)
    seconds = time.monotonic() - start
    scores = tokens.sum(1).tolist()

    i = 0
    for number, group in enumerate(groups):
        ranked = list(zip(scores[i:i + len(group)], group))
        i += len(group)
        if _PAIRS.value:
            ranked.sort(key=lambda pair: -pair[0])
            if number:
                print()
        for score, text in ranked:
            print(f"{score:.4f}\t{text}")
    summary = {"method": method, "objective": model.objective.name, "texts": len(texts),
               "rows": rows, "seconds": round(seconds, 3)}
    if _PAIRS.value:
        summary.update(rank(groups, scores))
    print(json.dumps(summary))


if __name__ == "__main__":
    cli.app_run(main)
