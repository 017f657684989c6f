"""Host memory: what glibc's allocator keeps after TF frees it.

TF's CPU allocations go through glibc's malloc. Memory freed by XLA's compilation, by
graph optimisation and by each step's kernels stays in malloc's arenas (one per thread
that contended for the heap, up to 8 × cores) instead of going back to the OS, so the
process's resident memory between steps is higher than what it uses, and every step's
working set comes on top of it (BENCHMARKS.md, "Memory"). Two calls reach that memory:

- `release()`: `malloc_trim(0)`, which returns the free pages of every arena to the OS.
  The training loop calls it after each loop of steps and each evaluation; it costs
  milliseconds against a loop of seconds or more.
- `limit_arenas(n)`: `mallopt(M_ARENA_MAX, n)`, as `MALLOC_ARENA_MAX=n` in the environment
  would, for the process's own binaries (train, finetune, benchmark), called before TF
  starts its threads. Fewer arenas hold less freed memory apart.

Both do nothing (and return False) where the C library is not glibc (macOS, musl).

    >>> isinstance(release(), bool)
    True
"""

import ctypes
import sys

_M_ARENA_MAX = -8  # glibc's malloc.h


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _glibc()


def release() -> bool:
    """Returns the allocator's free memory to the OS; True if glibc released any."""
    return bool(_LIBC.malloc_trim(0)) if _LIBC is not None else False


def limit_arenas(n: int = 2) -> bool:
    """At most `n` malloc arenas from now on (call it before TF starts its threads)."""
    return bool(_LIBC.mallopt(_M_ARENA_MAX, n)) if _LIBC is not None else False
