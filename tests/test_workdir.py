"""One run per workdir: the lock, its takeover from a run that is gone, and what a killed
run left half-written."""

import errno
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from electra_tf import errors
from electra_tf import workdir as workdir_lib
from tests import gcs_emulator
from tests import helpers


def _write_holder(workdir, **fields):
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": "earlier",
              "heartbeat": time.time(), "token": "someone-else", **fields}
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, workdir_lib.LOCK_FILE), "w") as f:
        json.dump(holder, f)


def _gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_second_lock_is_refused_naming_the_holder(tmp_path):
    run = str(tmp_path / "run")
    with workdir_lib.Lock(run) as lock:
        holder = json.loads((tmp_path / "run" / "lock.json").read_text())
        assert holder["pid"] == os.getpid() and holder["token"] == lock.token
        with pytest.raises(errors.UserError) as e:
            workdir_lib.Lock(run).acquire()
        message = str(e.value)
        assert "\n" not in message
        assert f"{run} is in use by another run (pid {os.getpid()} on " \
               f"{socket.gethostname()}, since {holder['started']}" in message
    assert not os.path.exists(os.path.join(run, "lock.json"))
    workdir_lib.Lock(run).acquire().release()  # free again


@pytest.mark.parametrize("scheme", ["ram", "gs"])
def test_on_a_url_file_system_the_lock_holds_and_files_are_written_whole(scheme, tmp_path):
    """TF's `ram://`, whose exists() matches by prefix (DIR/NAME exists while DIR/NAME.x
    does): the lock, its refusal, its takeover and the files written aside must not
    write NAME-prefixed temporaries; and `gs://` through TF's GCS client, emulated."""
    if scheme == "gs":
        pytest.importorskip("gcp_storage_emulator", reason="pip install -r requirements-test.txt")
        with gcs_emulator.bucket(tmp_path) as bucket:
            _lock_on_url_file_system(f"{bucket}/workdir_test_{os.getpid()}/run")
    else:
        _lock_on_url_file_system(f"ram://workdir_test_{os.getpid()}/run")


def _lock_on_url_file_system(run):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with workdir_lib.Lock(run) as lock:
        assert workdir_lib.Lock(run)._read()["token"] == lock.token  # pylint: disable=protected-access
        with pytest.raises(errors.UserError, match=r"in use by another run \(pid "):
            workdir_lib.Lock(run).acquire()
        workdir_lib.write_json(run, workdir_lib.CONFIG, {"a": 1})
        workdir_lib.write_json(run, workdir_lib.CONFIG, {"a": 2})  # over the first
        assert workdir_lib.read_json(run, workdir_lib.CONFIG) == {"a": 2}
        assert sorted(tf.io.gfile.listdir(run)) == ["config.json", "lock.json"]
    assert not tf.io.gfile.exists(workdir_lib.path(run, workdir_lib.LOCK_FILE))
    # A lock left by a process that is gone is taken over there too.
    with tf.io.gfile.GFile(workdir_lib.path(run, workdir_lib.LOCK_FILE), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": _gone_pid(), "heartbeat": time.time(),
                   "token": "someone-else"}, f)
    with workdir_lib.Lock(run) as lock:
        assert workdir_lib.Lock(run)._read()["token"] == lock.token  # pylint: disable=protected-access
    tf.io.gfile.rmtree(os.path.dirname(run))


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    run = str(tmp_path / "run")
    _write_holder(run, pid=_gone_pid())
    with workdir_lib.Lock(run) as lock:
        holder = json.loads((tmp_path / "run" / "lock.json").read_text())
        assert holder["token"] == lock.token


def test_a_reused_pid_is_not_the_holder(tmp_path):
    """Our own pid, but a process that started at another time: the holder is gone and its
    lock is taken over. With our own start time it is this process: refused."""
    run = str(tmp_path / "run")
    _write_holder(run, process_start=workdir_lib._process_start(os.getpid()))  # pylint: disable=protected-access
    with pytest.raises(errors.UserError, match=f"in use by another run \\(pid {os.getpid()} "):
        workdir_lib.Lock(run).acquire()
    _write_holder(run, process_start="1")
    with workdir_lib.Lock(run) as lock:
        holder = json.loads((tmp_path / "run" / "lock.json").read_text())
        assert holder["token"] == lock.token and holder["process_start"] != "1"


def test_another_hosts_lock_holds_until_its_heartbeat_is_stale(tmp_path):
    run = str(tmp_path / "run")
    _write_holder(run, host="elsewhere", pid=1, heartbeat=time.time() - 30)
    with pytest.raises(errors.UserError, match="pid 1 on elsewhere.*heartbeat 30s ago"):
        workdir_lib.Lock(run, stale_after_secs=60).acquire()
    _write_holder(run, host="elsewhere", pid=1, heartbeat=time.time() - 120)
    workdir_lib.Lock(run, stale_after_secs=60).acquire().release()


def test_a_damaged_lock_file_is_taken_over_only_once_stale(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "lock.json").write_text("")  # a holder killed while writing it, or one writing
    with pytest.raises(errors.UserError, match="being written or is damaged"):
        workdir_lib.Lock(str(run), stale_after_secs=60).acquire()
    old = time.time() - 120
    os.utime(run / "lock.json", (old, old))
    workdir_lib.Lock(str(run), stale_after_secs=60).acquire().release()


def test_the_heartbeat_is_refreshed(tmp_path):
    run = str(tmp_path / "run")
    with workdir_lib.Lock(run, heartbeat_secs=0.05):
        first = json.loads((tmp_path / "run" / "lock.json").read_text())["heartbeat"]
        deadline = time.time() + 10
        while json.loads((tmp_path / "run" / "lock.json").read_text())["heartbeat"] == first:
            assert time.time() < deadline, "no heartbeat"
            time.sleep(0.05)


def test_a_workdir_made_by_the_lock_and_left_empty_is_removed(tmp_path):
    made = tmp_path / "new"
    workdir_lib.Lock(str(made)).acquire().release()
    assert not made.exists()
    kept = tmp_path / "kept"
    with workdir_lib.Lock(str(kept)):
        (kept / "config.json").write_text("{}")
    assert os.listdir(kept) == ["config.json"]


def test_a_workdir_that_is_a_file_or_cannot_be_made(tmp_path):
    path = tmp_path / "file"
    path.write_text("mine")
    with pytest.raises(errors.UserError, match=f"--workdir={path} is a file, not a directory"):
        workdir_lib.Lock(str(path)).acquire()
    assert path.read_text() == "mine"
    # /sys refuses new directories, to root too (as a read-only file system does).
    with pytest.raises(errors.UserError, match="--workdir=/sys/electra_run: cannot create"):
        workdir_lib.Lock("/sys/electra_run").acquire()


def test_half_written_files_are_removed_and_nothing_else(tmp_path):
    run = tmp_path / "run"
    checkpoints = run / "checkpoints"
    (checkpoints / "ckpt-20_temp").mkdir(parents=True)
    (checkpoints / "ckpt-20_temp" / "part-00000-of-00001.index").write_bytes(b"")
    for name in ("checkpoint.tmp0123abcd", "checkpoint", "ckpt-10.index",
                 "ckpt-10.data-00000-of-00001"):
        (checkpoints / name).write_bytes(b"")
    # Both spellings of a file written aside: .NAME.tmp (`aside`), NAME.tmp (before it).
    for name in (".config.json.tmp", "config.json.tmp", "config.json", "vocab.txt",
                 "notes.tmp", ".lock.json.old.tmp", "lock.json.old.tmp", "lock.json.new.tmp"):
        (run / name).write_text("")
    old = time.time() - 3600
    for name in (".lock.json.old.tmp", "lock.json.old.tmp"):  # killed taking the lock
        os.utime(run / name, (old, old))
    removed = workdir_lib.remove_partial_files(str(run))
    assert sorted(os.path.relpath(p, run) for p in removed) == [
        ".config.json.tmp", ".lock.json.old.tmp", "checkpoints/checkpoint.tmp0123abcd",
        "checkpoints/ckpt-20_temp", "config.json.tmp", "lock.json.old.tmp"]
    assert sorted(os.listdir(checkpoints)) == [
        "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index"]
    # The user's own file, and a lock being taken right now, stay.
    assert sorted(os.listdir(run)) == ["checkpoints", "config.json", "lock.json.new.tmp",
                                       "notes.tmp", "vocab.txt"]


def test_two_runs_taking_over_one_stale_lock_do_not_both_hold_it(tmp_path):
    run = str(tmp_path / "run")
    _write_holder(run, pid=_gone_pid())
    stale = json.loads((tmp_path / "run" / "lock.json").read_text())
    with workdir_lib.Lock(run) as first:  # took it over
        # The second read the same stale holder before the first took over; its takeover
        # must leave the first's new lock in place, and its create then fails.
        second = workdir_lib.Lock(run)
        second._take_over(stale)  # pylint: disable=protected-access
        holder = json.loads((tmp_path / "run" / "lock.json").read_text())
        assert holder["token"] == first.token
        # The same where the stale lock was unreadable (judged by its age).
        second._take_over({})  # pylint: disable=protected-access
        assert json.loads((tmp_path / "run" / "lock.json").read_text()) == holder
        with pytest.raises(errors.UserError, match="in use by another run"):
            second.acquire()


def test_a_holder_that_beats_while_it_is_taken_over_keeps_its_lock(tmp_path):
    run = str(tmp_path / "run")
    _write_holder(run, heartbeat=1000.0)
    stale = json.loads((tmp_path / "run" / "lock.json").read_text())
    _write_holder(run, heartbeat=2000.0)  # the same holder, alive: it beat since
    workdir_lib.Lock(run)._take_over(stale)  # pylint: disable=protected-access
    assert json.loads((tmp_path / "run" / "lock.json").read_text())["heartbeat"] == 2000.0


def test_without_hard_links_the_lock_is_an_exclusive_create(tmp_path, monkeypatch):
    def no_links(*_):
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_links)
    run = str(tmp_path / "run")
    with workdir_lib.Lock(run) as lock:
        assert json.loads((tmp_path / "run" / "lock.json").read_text())["token"] == lock.token
        with pytest.raises(errors.UserError, match="in use by another run"):
            workdir_lib.Lock(run).acquire()


def test_a_holder_in_another_pid_namespace_is_judged_by_its_heartbeat(tmp_path):
    # Same host name and a dead pid, but another container: its pids are not ours.
    run = str(tmp_path / "run")
    _write_holder(run, pid=_gone_pid(), pid_space="another-boot another-namespace")
    with pytest.raises(errors.UserError, match="in use by another run"):
        workdir_lib.Lock(run).acquire()
    _write_holder(run, pid=_gone_pid(), pid_space="another-boot another-namespace",
                  heartbeat=time.time() - 3600)
    workdir_lib.Lock(run).acquire().release()


def test_a_holder_from_before_this_machines_boot_is_gone(tmp_path, monkeypatch):
    """A preemptible VM restarted: its lock names this host and machine id, another boot,
    and a heartbeat from before the boot. Taken over after two heartbeats of waiting,
    not 10 minutes; a clone (another machine id) is not, nor a holder that beats while
    we wait (a live clone of the same id whose clock is behind ours)."""
    if not workdir_lib._machine_id():  # pylint: disable=protected-access
        pytest.skip("no machine id here")
    run = str(tmp_path / "run")
    machine = workdir_lib._machine_id()  # pylint: disable=protected-access
    boot = time.time() - 300
    monkeypatch.setattr(workdir_lib, "_boot_time", lambda: boot)
    before_boot = {"pid": _gone_pid(), "pid_space": "an-earlier-boot ns", "heartbeat": boot - 60}
    waits = []
    def sleep_and_maybe_beat(seconds, beat):
        waits.append(seconds)
        if beat:
            _write_holder(run, **{**before_boot, "heartbeat": time.time()}, machine_id=machine)
    for fields in ({"machine_id": "a-clone"}, {}):
        _write_holder(run, **before_boot, **fields)
        with pytest.raises(errors.UserError, match="in use by another run"):
            workdir_lib.Lock(run).acquire()
    assert not waits  # not this machine's: the 10-minute rule, no wait
    for beat in (False, True):
        _write_holder(run, **before_boot, machine_id=machine)
        monkeypatch.setattr(workdir_lib.time, "sleep",
                            lambda s, b=beat: sleep_and_maybe_beat(s, b))
        lock = workdir_lib.Lock(run, heartbeat_secs=30)
        if beat:
            with pytest.raises(errors.UserError, match="in use by another run"):
                lock.acquire()
        else:
            lock.acquire().release()
    assert waits == [60, 60]


def test_a_heartbeat_survives_a_failed_read(tmp_path, monkeypatch):
    """A read of the lock that fails (a storage hiccup, or the lock moved aside for a
    moment) must not stop the heartbeat: after 10 minutes without one, another host
    would take the live run's workdir."""
    run = str(tmp_path / "run")
    lock = workdir_lib.Lock(run, heartbeat_secs=0.05).acquire()
    try:
        # Unreadable once ({}), then gone for a moment (None: moved aside by a run that
        # puts it back, as it is not stale).
        real_read, failures = workdir_lib.Lock._read, [None, {}]  # pylint: disable=protected-access
        def flaky(self):
            return failures.pop() if failures else real_read(self)
        monkeypatch.setattr(workdir_lib.Lock, "_read", flaky)
        first = real_read(lock)["heartbeat"]
        deadline = time.time() + 5
        while real_read(lock)["heartbeat"] == first and time.time() < deadline:
            time.sleep(0.05)
        assert not failures and real_read(lock)["heartbeat"] > first
    finally:
        lock.release()


def test_the_binary_refuses_a_held_workdir_and_writes_nothing(tmp_path):
    vocab = helpers.write_vocab(str(tmp_path))
    data = helpers.make_data(str(tmp_path), vocab, max_seq_length=32)
    run = tmp_path / "run"
    with workdir_lib.Lock(str(run)):
        before = sorted(os.listdir(run))
        result = subprocess.run(
            helpers.train_command({"train": data, "eval": "", "vocab": vocab.path}, str(run),
                                  steps=2),
            cwd=helpers.ROOT, capture_output=True, text=True, timeout=300,
            env=helpers.child_env())
        assert sorted(os.listdir(run)) == before
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: {run} is in use by another run (pid {os.getpid()}")
    assert "Traceback" not in result.stderr


# Files that hold a run's names for another format or their own folder, not a run's.
_OTHER_FORMATS = {
    "electra_tf/convert/hf.py": "Hugging Face's own config.json and vocab.txt",
    "electra_tf/convert/tf1.py": "the vocab.txt beside an original TF1 checkpoint",
    "electra_tf/convert/files.py": "any format's output folder gets a vocab.txt",
    "electra_tf/text/packer.py": "the export's vocab asset",
    "electra_tf/benchmark/sample.py": "the benchmark's own cache of sample data",
}


def test_only_workdir_py_spells_a_runs_file_names():
    """Every file a run writes and reads is named in electra_tf/workdir.py alone, by the
    package and by the tools (string constants outside docstrings). `train` and `eval`
    also name config sections and data splits: they count only where a path is joined;
    `tmp` is too common a word to scan."""
    import ast  # pylint: disable=g-import-not-at-top
    names = {workdir_lib.CONFIG, workdir_lib.VOCAB, workdir_lib.CHECKPOINTS,
             workdir_lib.CONVERTED, workdir_lib.PRETRAINED, workdir_lib.RESULTS,
             workdir_lib.LOCK_FILE, workdir_lib.LOGS}
    in_paths = {workdir_lib.TRAIN_LOGS, workdir_lib.EVAL_LOGS}
    joins = {"join", "path", "logs"}  # os.path.join, workdir_lib.path and .logs

    def joined(node):  # the constants passed to a call that makes a path
        name = getattr(node.func, "attr", getattr(node.func, "id", None))
        return node.args if name in joins else []

    found = []
    for top in ("electra_tf", "tools"):
        for folder, _, files in os.walk(os.path.join(helpers.ROOT, top)):
            for file in files:
                path = os.path.join(folder, file)
                relative = os.path.relpath(path, helpers.ROOT)
                if not file.endswith(".py") or relative in (
                        "electra_tf/workdir.py", *_OTHER_FORMATS):
                    continue
                tree = ast.parse(open(path, encoding="utf-8").read())
                docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                              if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                              and node.body and isinstance(node.body[0], ast.Expr)}
                in_joins = {id(arg) for node in ast.walk(tree)
                            if isinstance(node, ast.Call) for arg in joined(node)}
                found += [f"{relative}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
                          if isinstance(node, ast.Constant) and id(node) not in docstrings
                          and (node.value in names
                               or node.value in in_paths and id(node) in in_joins)]
    assert not found, found
