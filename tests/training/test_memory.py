"""training/memory.py: glibc keeps freed memory; release() hands it back to the OS."""

import sys

import pytest

from electra_tf.training import memory


def _rss_mib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_release_returns_the_memory_malloc_kept_after_free():
    # 256 MiB in 64 KiB blocks (below malloc's mmap threshold: they live in its heap),
    # each followed by a small block that stays: freeing the large ones leaves holes that
    # free() cannot give back by itself, as TF's freed buffers do between steps.
    # Written to (not calloc's untouched zero pages), so that they are resident.
    before = _rss_mib()
    keep, holes = [], []
    for _ in range(4096):
        holes.append(bytearray(b"x" * 65536))
        keep.append(bytearray(b"y" * 1000))
    grown = _rss_mib() - before
    assert grown > 200
    del holes
    kept = _rss_mib()
    assert kept > before + grown // 2, "free() returned the holes by itself"
    assert memory.release() is True
    assert _rss_mib() < kept - grown // 2, "malloc_trim gave back less than half of them"
    assert len(keep) == 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_limit_arenas_is_accepted_by_glibc():
    assert memory.limit_arenas(2) is True  # mallopt's 1: the setting took
