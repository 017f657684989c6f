"""Host memory: what glibc's allocator keeps after TF frees it.

TF's CPU allocations go through glibc's malloc. Memory freed by XLA's compilation, by
graph optimisation and by each step's kernels stays in malloc's arenas (one per thread
that contended for the heap, up to 8 × cores) instead of going back to the OS, so the
process's resident memory between steps is higher than what it uses, and every step's
working set comes on top of it (BENCHMARKS.md, "Memory"). What reaches that memory:

- `release()`: `malloc_trim(0)`, which returns the free pages of every arena to the OS.
  The training loop calls it after each loop of steps and each evaluation; it costs
  milliseconds against a loop of seconds or more.
- `trimming(interval)`: `release()` every `interval` seconds on a thread while a block
  runs: XLA frees its compilation's memory into malloc's heap, and the steps that run in
  the same call would otherwise climb on top of it. The training loop runs the first step
  of each stage (the one that compiles) under it.
- `limit_arenas(n)`: `mallopt(M_ARENA_MAX, n)`, as `MALLOC_ARENA_MAX=n` in the environment
  would; `cli.prepare_process()` calls it before TF starts its threads. Fewer arenas hold
  less freed memory apart.
- `restart_with_huge_pages()`: runs the tool again, in the same process (`execve`: same
  pid, arguments and environment), with glibc's tunable `glibc.malloc.hugetlb=1`, so that
  malloc asks the kernel for transparent huge pages: XLA frees the step's working set
  after each step and malloc maps it afresh at the next, page fault by page fault with
  4 KiB pages (BENCHMARKS.md, "oneDNN's pool, traced stacks, huge pages"). Only where the
  kernel gives huge pages on request (`transparent_hugepage/enabled` is `[madvise]`; with
  `[always]` malloc gets them anyway) and glibc reads the tunable (2.35 and newer). A
  `GLIBC_TUNABLES` that already names `glibc.malloc.hugetlb` is the user's choice and is
  kept (`=0` turns this off). `cli.prepare_process()` calls it.

All of them do nothing where the C library is not glibc (macOS, musl; `compat.glibc`);
`release()` and `limit_arenas()` then return False. Importing this module calls none.

    >>> isinstance(release(), bool)
    True
"""

import contextlib
import os
import re
import sys
import threading

from electra_tf import compat

_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def release() -> bool:
    """Returns the allocator's free memory to the OS; True if glibc released any."""
    libc = compat.glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


@contextlib.contextmanager
def trimming(interval: float = 0.25):
    """A context manager: `release()` every `interval` seconds on a thread (ctypes lets go
    of the GIL in the call) while the block runs, and once when it ends."""
    if compat.glibc() is None:
        yield
        return
    done = threading.Event()

    def run():
        while not done.wait(interval):
            release()

    thread = threading.Thread(target=run, name="malloc_trim", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        release()


def limit_arenas(n: int = 2) -> bool:
    """At most `n` malloc arenas from now on (call it before TF starts its threads)."""
    libc = compat.glibc()
    return bool(libc.mallopt(compat.M_ARENA_MAX, n)) if libc is not None else False


def _transparent_huge_pages(path: str = _THP_ENABLED) -> str | None:
    """The kernel's mode ("always", "madvise", "never"), or None where it has none."""
    try:
        with open(path, encoding="ascii") as f:
            chosen = re.search(r"\[(\w+)\]", f.read())
    except OSError:
        return None
    return chosen.group(1) if chosen else None


def huge_pages_environment(environ=None, thp_path: str = _THP_ENABLED) -> dict | None:
    """The environment to restart with (`environ` plus glibc.malloc.hugetlb=1), or None
    where a restart would change nothing or the user has chosen."""
    environ = os.environ if environ is None else environ
    tunables = environ.get("GLIBC_TUNABLES", "")
    if (compat.HUGETLB_TUNABLE in tunables or compat.glibc_version() < (2, 35)
            or _transparent_huge_pages(thp_path) != "madvise"):
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(
        filter(None, (tunables, f"{compat.HUGETLB_TUNABLE}=1")))}


def restart_with_huge_pages() -> None:
    """Replaces this process with the same command under glibc.malloc.hugetlb=1 (see the
    module's docstring); returns only where it does nothing. Call it first thing in a
    tool's process, before TF is imported or any thread started."""
    environ = huge_pages_environment()
    if environ is None:
        return
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        os.execve(sys.executable, sys.orig_argv, environ)
    except OSError:  # no restart: the tool runs on, with 4 KiB pages
        pass
