"""Progress lines for long jobs: rate, percentage and ETA, at most every few seconds.

>>> lines = []
>>> progress = Progress(total=10, unit="docs", every_secs=0, log=lines.append)
>>> progress.update(5, examples=7)
>>> lines[0].startswith("5/10 docs (50.0%)"), "examples 7" in lines[0]
(True, True)
"""

import datetime
import time
from typing import Callable

from absl import logging


def format_duration(seconds: float) -> str:
    """`h:mm:ss` for a number of seconds (`--:--:--` when unknown)."""
    if seconds != seconds or seconds == float("inf") or seconds < 0:  # NaN or inf
        return "--:--:--"
    return str(datetime.timedelta(seconds=int(seconds)))


class Progress:
    """Logs `done/total unit (pct) rate unit/s ETA h:mm:ss` plus extra counters."""

    def __init__(self, total: float | None, unit: str, every_secs: float = 5.0,
                 log: Callable[[str], None] = logging.info, scale: float = 1.0,
                 scaled_unit: str | None = None, first_line_now: bool = True):
        self._total = total
        self._unit = unit
        self._every = every_secs
        self._log = log
        # `scale` shows progress in other units than those counted (bytes → MB).
        self._scale = scale
        self._scaled_unit = scaled_unit or unit
        self._start = time.monotonic()
        # first_line_now=False: the first line comes `every_secs` in (a job that is
        # usually short then logs nothing).
        self._last = -float("inf") if first_line_now else self._start

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def update(self, done: float, force: bool = False, **counters) -> None:
        now = time.monotonic()
        if not force and now - self._last < self._every:
            return
        self._last = now
        self._log(self.line(done, **counters))

    def line(self, done: float, **counters) -> str:
        elapsed = max(self.elapsed(), 1e-9)
        rate = done / elapsed
        shown = _number(done * self._scale)
        if self._total:
            pct = 100.0 * done / self._total
            eta = (self._total - done) / rate if rate > 0 else float("inf")
            head = (f"{shown}/{_number(self._total * self._scale)} {self._scaled_unit} "
                    f"({pct:.1f}%) {_number(rate * self._scale)} {self._scaled_unit}/s "
                    f"ETA {format_duration(eta)}")
        else:
            head = (f"{shown} {self._scaled_unit} {_number(rate * self._scale)} "
                    f"{self._scaled_unit}/s elapsed {format_duration(elapsed)}")
        extra = "".join(f", {name} {_number(value)}" for name, value in counters.items())
        return head + extra


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
