"""training/memory.py: glibc keeps freed memory; release() hands it back to the OS."""

import sys

import pytest

from electra_tf import compat
from electra_tf.training import memory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# The resident memory of a child process in MiB, read without importing TF: the two
# children below measure what they allocate themselves.
_RSS_MIB = """
def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))
"""

_HOLES = _RSS_MIB + """
import ctypes, json
from electra_tf.training import memory

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
before = rss_mib()
holes, keep = [], []
for _ in range(4096):
    holes.append(libc.malloc(65536))
    keep.append(libc.malloc(1000))
    libc.memset(holes[-1], 1, 65536)  # resident, unlike calloc's untouched pages
grown = rss_mib() - before
for block in holes:
    libc.free(block)
kept = rss_mib() - before
released = memory.release()
print(json.dumps({"grown": grown, "kept": kept, "released": released,
                  "after": rss_mib() - before}))
"""


@linux
def test_release_returns_the_memory_malloc_kept_after_free():
    """256 MiB in 64 KiB blocks (below malloc's mmap threshold: they live in its heap),
    each followed by a small block that stays, straight from the C allocator (Python's
    own temporaries would fill the holes). Freeing the large ones leaves holes that free()
    cannot give back by itself, as TF's freed buffers do between steps; release() gives
    them back. In a fresh interpreter: in a process where other tests freed memory
    already, malloc reuses its free pages and the holes need not grow the RSS."""
    import json
    import subprocess

    from tests import helpers

    child = subprocess.run([sys.executable, "-c", _HOLES], cwd=helpers.ROOT,
                           env=helpers.child_env(), capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    rss = json.loads(child.stdout.strip().splitlines()[-1])
    assert rss["grown"] > 200, rss  # the blocks were resident
    assert rss["kept"] > rss["grown"] // 2, rss  # free() kept the holes
    assert rss["released"] is True, rss
    assert rss["after"] < rss["kept"] - rss["grown"] // 2, rss  # trim gave back most


@linux
def test_limit_arenas_is_accepted_by_glibc():
    assert memory.limit_arenas(2) is True  # mallopt's 1: the setting took


def _thp(tmp_path, mode):
    path = tmp_path / "enabled"
    path.write_text({"madvise": "always [madvise] never\n", "always": "[always] madvise never\n",
                     "never": "always madvise [never]\n"}[mode])
    return str(path)


@linux
def test_huge_pages_are_asked_for_only_where_the_kernel_gives_them_on_request(tmp_path):
    if compat.glibc_version() < (2, 35):
        pytest.skip("glibc before 2.35 does not read glibc.malloc.hugetlb")
    environ = {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    restart = memory.huge_pages_environment(environ, _thp(tmp_path, "madvise"))
    # the user's other tunables are kept, and nothing else changes
    assert restart == {"PATH": "/bin",
                       "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}
    assert memory.huge_pages_environment({}, _thp(tmp_path, "madvise")) == {
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    # [always]: malloc gets them anyway; [never]: nothing to gain; no such file
    assert memory.huge_pages_environment({}, _thp(tmp_path, "always")) is None
    assert memory.huge_pages_environment({}, _thp(tmp_path, "never")) is None
    assert memory.huge_pages_environment({}, str(tmp_path / "missing")) is None
    # the user's own choice, on or off, stays (and a restarted process does not restart)
    for chosen in ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=1"):
        assert memory.huge_pages_environment({"GLIBC_TUNABLES": chosen},
                                             _thp(tmp_path, "madvise")) is None


@linux
def test_prepare_process_restarts_once_with_huge_pages_in_the_same_process():
    """A process that calls `cli.prepare_process()` (every binary, first thing) restarts
    once (execve: same pid) with the tunable set; one that only imports cli does not."""
    import os
    import subprocess

    from tests import helpers

    code = ("import os, sys; print('start', os.getpid(), flush=True); "
            "from electra_tf import cli; sys.argv[1] == 'prepare' and cli.prepare_process(); "
            "print('tunables', os.environ.get('GLIBC_TUNABLES'))")
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    runs = {}
    for how in ("prepare", "import"):
        out = subprocess.run([sys.executable, "-c", code, how], env=env, cwd=helpers.ROOT,
                             capture_output=True, text=True, check=True,
                             timeout=120).stdout.split("\n")
        runs[how] = [line for line in out if line]
    starts = [line for line in runs["prepare"] if line.startswith("start")]
    if memory.huge_pages_environment(env) is None:  # this machine: nothing to ask for
        assert len(starts) == 1 and runs["prepare"][-1] == "tunables None"
    else:
        assert len(starts) == 2 and starts[0] == starts[1]  # same pid: exec, not a child
        assert runs["prepare"][-1] == "tunables glibc.malloc.hugetlb=1"
    assert runs["import"] == [runs["import"][0], "tunables None"]


_ONEDNN_BUFFER = _RSS_MIB + """
import json, sys
from electra_tf import cli
cli.prepare_process()  # what every tool does first
import tensorflow as tf

before = rss_mib()
x = tf.fill([128, 1024, 1024], 1.0)  # 512 MiB through TF's CPU allocator
held = rss_mib()
total = float(tf.reduce_sum(x))
del x
from tensorflow.python.util import _pywrap_util_port
print(json.dumps({"grown": held - before, "kept": rss_mib() - before, "total": total,
                  "onednn": bool(_pywrap_util_port.IsMklEnabled())}))
"""


@linux
@pytest.mark.slow  # two TF processes (25 s): the fast suite is near its 20 minutes
@pytest.mark.parametrize("setting", [None, "0"])
def test_onednn_buffers_go_back_to_the_os_under_the_tools_setting(setting):
    """With oneDNN on (TF's own choice on CPUs with AVX512_VNNI, AVX512_BF16 or AMX; forced
    here), its allocator pools freed buffers unless cli.py's default sends them to malloc,
    which hands a large one back at once: the step's working set is not held between steps.
    `TF_ONEDNN_USE_SYSTEM_ALLOCATOR=0` (the pool) is the control."""
    import json
    import os
    import subprocess

    from tests import helpers

    env = {k: v for k, v in os.environ.items() if k != "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"}
    env.update(TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2",
               **({"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": setting} if setting else {}))
    out = subprocess.run([sys.executable, "-c", _ONEDNN_BUFFER], env=env, cwd=helpers.ROOT,
                         capture_output=True, text=True, check=True, timeout=300).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if not result["onednn"]:
        pytest.skip("this TF build does not run oneDNN")
    assert result["total"] == 128 * 1024 * 1024
    assert result["grown"] > 400, result  # the buffer was resident
    if setting is None:
        assert result["kept"] < 100, result
    else:
        assert result["kept"] > 400, result


@linux
def test_the_restart_execs_the_same_command_with_the_tunable(monkeypatch):
    """restart_with_huge_pages(): execve of this interpreter with the process's own
    arguments and the environment plus the tunable; nothing where there is nothing to
    ask for; an exec that fails leaves the tool running."""
    calls = []
    monkeypatch.setattr(memory.os, "execve", lambda *args: calls.append(args))
    wanted = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "X": "1"}
    monkeypatch.setattr(memory, "huge_pages_environment", lambda: wanted)
    memory.restart_with_huge_pages()
    assert calls == [(sys.executable, sys.orig_argv, wanted)]

    monkeypatch.setattr(memory, "huge_pages_environment", lambda: None)
    memory.restart_with_huge_pages()
    assert len(calls) == 1

    def fails(*args):
        raise OSError("exec refused")
    monkeypatch.setattr(memory, "huge_pages_environment", lambda: wanted)
    monkeypatch.setattr(memory.os, "execve", fails)
    memory.restart_with_huge_pages()  # returns: the tool runs on


@linux
def test_trimming_releases_on_a_thread_while_the_block_runs(monkeypatch):
    import threading
    import time

    threads = []
    monkeypatch.setattr(memory, "release", lambda: threads.append(threading.get_ident()))
    with memory.trimming(interval=0.01):
        time.sleep(0.2)
        during = len(threads)
    assert during >= 3 and all(t != threading.get_ident() for t in threads[:during])
    assert len(threads) == during + 1 and threads[-1] == threading.get_ident()  # at the end
    assert not [t for t in threading.enumerate() if t.name == "malloc_trim"]
