"""Progress lines: counts, percentage, rate and ETA, at most every few seconds."""

from electra_tf import progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_lines_rate_eta_and_interval(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    lines = []
    bar = progress.Progress(total=100, unit="docs", every_secs=5, log=lines.append)
    bar.update(0)                         # the first line comes at once
    clock.now += 2
    bar.update(20)                        # within 5 s of the last line: nothing
    clock.now += 3
    bar.update(50, examples=7)
    assert lines[1] == "50/100 docs (50.0%) 10 docs/s ETA 0:00:05, examples 7"
    bar.update(60, force=True)
    assert len(lines) == 3


def test_first_line_after_the_interval(monkeypatch):
    """A job that is usually short (an evaluation) logs only when it is not."""
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    lines = []
    bar = progress.Progress(total=4, unit="batches", every_secs=30, log=lines.append,
                            first_line_now=False)
    clock.now += 10
    bar.update(3)
    assert not lines
    clock.now += 25
    bar.update(4)
    assert lines == ["4/4 batches (100.0%) 0.11 batches/s ETA 0:00:00"]


def test_unknown_total_shows_the_elapsed_time():
    line = progress.Progress(total=None, unit="MB").line(3.0)
    assert line.startswith("3 MB ") and "elapsed" in line
    assert progress.format_duration(float("inf")) == "--:--:--"
    assert progress.format_duration(3725) == "1:02:05"
