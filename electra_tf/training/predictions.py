"""What the model does to a few sequences: the predictions view.

For each token of a masked sequence: the original wordpiece, whether it was masked, what
the generator sampled there, whether the discriminator's input differs from the original
(a sample equal to the original counts as original) and the discriminator's probability
that it was replaced. Rendered as Markdown (TensorBoard's text dashboard, at every
evaluation), as terminal text (shaded by probability when it is a terminal) or as HTML
(`tools/show_predictions.py`).

>>> token = Token("cat", masked=True, sample="dog", replaced=True, probability=0.9)
>>> print(terminal([[token]], colour=False).splitlines()[-1])
*cat→dog*[0.90]
"""

import dataclasses
import html as html_lib

import numpy as np
import tensorflow as tf

from electra_tf.data import pipeline
from electra_tf.model import context
from electra_tf.text import tokenizer


@dataclasses.dataclass(frozen=True)
class Token:
    text: str                 # the original wordpiece
    masked: bool              # chosen for prediction (the generator saw [MASK] or itself)
    sample: str | None        # what the generator sampled here (masked tokens only)
    replaced: bool            # the discriminator saw another token than the original
    probability: float        # the discriminator's P(replaced)
    segment: int = 0

    @property
    def seen(self) -> str:
        """The token the discriminator read."""
        return self.sample if self.replaced else self.text


def first_batch(files: list[str], size: int, max_seq_length: int, masking_config,
                seed: int) -> dict | None:
    """The first `size` sequences of `files`, masked as evaluation masks them (the same
    masks for a seed), or None when the files hold fewer."""
    dataset = pipeline.pretraining_dataset(files, size, max_seq_length, masking_config,
                                           is_training=False, seed=seed)
    return next(iter(dataset.take(1)), None)


def noise(seed: int, batch_size: int, num_predictions: int) -> np.ndarray:
    """Fixed sampling noise `[batch, P]`: every view of a run draws the same samples."""
    return tf.random.stateless_uniform([batch_size, num_predictions],
                                       seed=[seed, 0x5eed], alg="philox").numpy()


def views(forward, batch: dict, vocab: tokenizer.Vocab, uniform) -> list[list[Token]]:
    """One list of `Token`s per sequence of a masked `batch` (padding left out).
    `forward(batch, uniform)`: the pre-trainer's outputs without dropout (a model's
    `predict_fn`, or the model's call in a `tf.function`)."""
    outputs = forward(batch, uniform)
    probability = tf.sigmoid(tf.cast(outputs["disc_logits"], tf.float32)).numpy()  # [B, S]
    is_replaced = outputs["is_replaced"].numpy() > 0                               # [B, S]
    sampled = outputs["sampled_ids"].numpy()                                        # [B, P]
    batch = {k: np.asarray(v) for k, v in batch.items()}
    out = []
    for row in range(batch["input_ids"].shape[0]):
        samples = {int(p): int(s) for p, s, w in zip(batch["masked_lm_positions"][row],
                                                    sampled[row],
                                                    batch["masked_lm_weights"][row]) if w > 0}
        length = int(batch["input_mask"][row].sum())
        out.append([
            Token(text=vocab.tokens[int(batch["input_ids"][row, i])],
                  masked=i in samples,
                  sample=vocab.tokens[samples[i]] if i in samples else None,
                  replaced=bool(is_replaced[row, i]),
                  probability=float(probability[row, i]),
                  segment=int(batch["segment_ids"][row, i]))
            for i in range(length)])
    return out


def predict_fn(model, temperature=None, vocabulary_multiple=None):
    """The model's forward pass without dropout, compiled once: `(batch, uniform) →
    outputs` (eager calls would run op by op on an accelerator), sampling at
    `temperature()` (a training run's current one) or the model's own, its MLM heads
    padding the vocabulary to `vocabulary_multiple` (a training run's choice for the
    device) or to their own multiple."""
    return tf.function(lambda batch, uniform: model.objective.forward(
        model, batch, context.StepContext(
            uniform=uniform, temperature=temperature() if temperature else None,
            vocabulary_multiple=vocabulary_multiple)), autograph=False)


def summary_line(tokens: list[Token]) -> str:
    """Counts, and the mean P(replaced) on replaced and on original tokens."""
    replaced = [t.probability for t in tokens if t.replaced]
    kept = [t.probability for t in tokens if not t.replaced]
    masked = sum(t.masked for t in tokens)

    def mean(values):
        return f"{np.mean(values):.2f}" if values else "-"
    return (f"{len(tokens)} tokens, {masked} masked, {len(replaced)} replaced; mean "
            f"P(replaced): {mean(replaced)} on replaced tokens, {mean(kept)} on the others")


def _bar(probability: float, width: int = 10) -> str:
    filled = int(round(probability * width))
    return "█" * filled + "░" * (width - filled)


def markdown(sequences: list[list[Token]]) -> str:
    """A Markdown table per sequence (TensorBoard's text dashboard renders tables)."""
    parts = []
    for n, tokens in enumerate(sequences, start=1):
        parts.append(f"**Sequence {n}**: {summary_line(tokens)}. Replaced tokens are in "
                     "bold.\n")
        parts.append("| # | token | masked | generator sample | P(replaced) | |")
        parts.append("|---:|---|:---:|---|---:|---|")
        for i, t in enumerate(tokens):
            text = _md(t.text)
            sample = _md(t.sample) if t.sample is not None else ""
            if t.replaced:
                sample = f"**{sample}**"
            parts.append(f"| {i} | {text} | {'✓' if t.masked else ''} | {sample} | "
                         f"{t.probability:.2f} | {_bar(t.probability)} |")
        parts.append("")
    return "\n".join(parts)


def _md(text: str) -> str:
    """A wordpiece in a table cell: escaped, code-formatted."""
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


_RESET = "\033[0m"


def terminal(sequences: list[list[Token]], colour: bool) -> str:
    """Tokens in reading order. Replaced tokens are `*original→sample*`; with `colour`
    each token's background goes from none to red with P(replaced), else P(replaced) is
    written `[0.83]` after each token where it is at least 0.5, and after every masked
    token."""
    lines = []
    if colour:
        lines.append("background: the discriminator's P(replaced), none (0) to red (1); "
                     "*original→sample*: replaced by the generator; _x_: masked, kept")
    else:
        lines.append("[p]: the discriminator's P(replaced) (shown where >= 0.5 or masked); "
                     "*original→sample*: replaced by the generator; _x_: masked, kept")
    for n, tokens in enumerate(sequences, start=1):
        lines.append(f"\nsequence {n}: {summary_line(tokens)}")
        shown = []
        for i, t in enumerate(tokens):
            if i and t.segment != tokens[i - 1].segment:
                shown.append("|")
            word = f"*{t.text}→{t.sample}*" if t.replaced else (
                f"_{t.text}_" if t.masked else t.text)
            if colour:
                # 256-colour palette: reds 52, 88, 124, 160, 196 by probability (none
                # below 1/6), white letters.
                level = min(int(t.probability * 6), 5)
                if level:
                    word = f"\033[97;48;5;{16 + 36 * level}m{word}{_RESET}"
            elif t.probability >= 0.5 or t.masked:
                word += f"[{t.probability:.2f}]"
            shown.append(word)
        lines.append(" ".join(shown))
    return "\n".join(lines)


def html(sequences: list[list[Token]], title: str) -> str:
    """A page: each token shaded red by P(replaced), replaced ones underlined, the
    details of each in its tooltip, and the per-token table."""
    body = [f"<h1>{html_lib.escape(title)}</h1>",
            "<p>Background: the discriminator's P(replaced), white (0) to red (1). "
            "Underlined: a token the generator replaced (the original in its tooltip). "
            "Dotted: masked and kept.</p>"]
    for n, tokens in enumerate(sequences, start=1):
        body.append(f"<h2>Sequence {n}</h2><p>{html_lib.escape(summary_line(tokens))}</p>"
                    "<p class='tokens'>")
        for t in tokens:
            tip = f"P(replaced) {t.probability:.3f}"
            if t.masked:
                tip += f"; masked; generator sampled {t.sample!r}; original {t.text!r}"
            style = (f"background: rgba(220, 30, 30, {t.probability:.3f});"
                     + (" text-decoration: underline;" if t.replaced else "")
                     + (" border-bottom: 1px dotted;" if t.masked and not t.replaced else ""))
            body.append(f"<span style='{style}' title='{html_lib.escape(tip, quote=True)}'>"
                        f"{html_lib.escape(t.seen)}</span> ")
        body.append("</p><table><tr><th>#</th><th>token</th><th>masked</th>"
                    "<th>generator sample</th><th>replaced</th><th>P(replaced)</th></tr>")
        for i, t in enumerate(tokens):
            body.append(
                f"<tr><td>{i}</td><td>{html_lib.escape(t.text)}</td>"
                f"<td>{'yes' if t.masked else ''}</td>"
                f"<td>{html_lib.escape(t.sample or '')}</td>"
                f"<td>{'yes' if t.replaced else ''}</td><td>{t.probability:.3f}</td></tr>")
        body.append("</table>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html_lib.escape(title)}</title><style>"
            "body {font-family: sans-serif; max-width: 60em; margin: auto;} "
            ".tokens {font-family: monospace; line-height: 2;} "
            "td, th {padding: 0 0.6em; text-align: left;}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
