"""The workdir of a run: the files it holds (their names, read and written here alone),
one run at a time (`Lock`), and what a killed run left half-written cleared before the
next one writes (`remove_partial_files`).

    WORKDIR/config.json      the resolved config the run was started with (CONFIG)
            vocab.txt        a copy of the vocab the data was made with (VOCAB)
            checkpoints/     tf.train.CheckpointManager's (CHECKPOINTS)
            logs/            TensorBoard: train, eval (fine-tuning: one per dev split)
            lock.json        the run that holds the workdir (LOCK_FILE)
            converted.json   a converted run: what it came from (CONVERTED)
            pretrained.json  fine-tuning: the encoder's shape and tokenization (PRETRAINED)
            results.json     fine-tuning: every evaluation and the best (RESULTS)
            best/, export/   fine-tuning: the best checkpoint, its SavedModel per step
            tmp/worker_N/    multi-worker: what the other workers must write aside (TMP)

A lock is a file, `WORKDIR/lock.json`, naming its holder (host, pid, when it started, the
command) and a heartbeat the holder refreshes. It is made by an atomic "create if absent"
(a hard link on a local disk; on `gs://` and other tf.io.gfile file systems a rename
that refuses to overwrite, then read back: best effort, as object stores offer no
exclusive create). A lock whose holder is gone is taken over, so that the same command
resumes after `kill -9` or a preemption with no cleanup by hand: on the same host, when
its process no longer runs, or when it ran there before the machine last booted (the
same host name and machine id, no heartbeat since the boot, nor in two heartbeats of
waiting); from another host, when its heartbeat is older than `stale_after_secs`.

>>> import tempfile
>>> run = tempfile.mkdtemp()
>>> with Lock(run) as lock:
...     try:
...         Lock(run).acquire()
...     except errors.UserError as e:
...         print(str(e).split(" (")[0].replace(run, "RUN"))
RUN is in use by another run
>>> tf.io.gfile.exists(os.path.join(run, LOCK_FILE))
False
"""

import datetime
import errno
import json
import os
import socket
import sys
import threading
import time
import uuid

import tensorflow as tf
from absl import logging

from electra_tf import errors

CONFIG = "config.json"
VOCAB = "vocab.txt"
CHECKPOINTS = "checkpoints"
LOGS = "logs"
TRAIN_LOGS, EVAL_LOGS = "train", "eval"  # under LOGS (fine-tuning: one per dev split)
LOCK_FILE = "lock.json"
CONVERTED = "converted.json"
PRETRAINED = "pretrained.json"
RESULTS = "results.json"
BEST = "best"
EXPORT = "export"
TMP = "tmp"
# Refreshed by the holder this often; a lock from another host whose heartbeat is older
# than STALE_AFTER_SECS is taken to be left by a run that is gone.
HEARTBEAT_SECS = 60
STALE_AFTER_SECS = 600
# os.link's errors where a file system has no hard links (it then makes the lock by an
# exclusive create).
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK, errno.EXDEV)


def path(workdir: str, *names: str) -> str:
    """WORKDIR/NAME/...: `path(workdir, CHECKPOINTS)`."""
    return os.path.join(workdir, *names)


def checkpoints(workdir: str) -> str:
    return path(workdir, CHECKPOINTS)


def logs(workdir: str, which: str) -> str:
    """WORKDIR/logs/WHICH: the TensorBoard events of `which` (TRAIN_LOGS, EVAL_LOGS)."""
    return path(workdir, LOGS, which)


def latest_checkpoint(workdir: str) -> str | None:
    """The prefix of the newest checkpoint the workdir's state file names, or None."""
    return tf.train.latest_checkpoint(checkpoints(workdir))


def worker_dir(workdir: str, worker_id: int) -> str:
    """Where a multi-worker run's non-chief worker writes what it must (collectives)."""
    return path(workdir, TMP, f"worker_{worker_id}")


def read_json(workdir: str, name: str) -> dict | None:
    """WORKDIR/NAME's object, None if there is no such file; a one-line error naming the
    file if it is not a JSON object."""
    file = path(workdir, name)
    if not tf.io.gfile.exists(file):
        return None
    try:
        with tf.io.gfile.GFile(file) as f:
            value = json.load(f)
    except ValueError as e:
        raise errors.UserError(f"{file}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise errors.UserError(f"{file}: not a JSON object")
    return value


def write_text(workdir: str, name: str, text: str | bytes) -> str:
    """WORKDIR/NAME (NAME may hold folders) written whole or not at all: a temporary file,
    then a rename (a crash leaves the old file or the new). Returns the path. `bytes`
    are written as they are (a PNG)."""
    file = path(workdir, name)
    tf.io.gfile.makedirs(os.path.dirname(file))
    tmp = aside(file)
    with tf.io.gfile.GFile(tmp, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, file, overwrite=True)
    return file


def write_json(workdir: str, name: str, value: dict) -> str:
    return write_text(workdir, name, json.dumps(value, indent=2) + "\n")


def copy_vocab(workdir: str, vocab_file: str) -> str:
    """WORKDIR/vocab.txt: a copy of `vocab_file` (whole or not at all) unless it is that
    file; returns its path."""
    copy = path(workdir, VOCAB)
    if absolute(vocab_file) != absolute(copy):
        tf.io.gfile.copy(vocab_file, aside(copy), overwrite=True)
        tf.io.gfile.rename(aside(copy), copy, overwrite=True)
    return copy


def aside(file: str, tag: str = "tmp") -> str:
    """Where `file` (or a folder) is written before its rename into place: DIR/.NAME.TAG.
    Not NAME.TAG: a name that extends the target's breaks file systems whose exists()
    matches by prefix (TF's `ram://` says DIR/NAME exists while DIR/NAME.tmp does, and a
    rename onto it then fails); the dot also hides it from `ls` and TF Serving's scan."""
    directory, name = os.path.split(file.rstrip("/"))
    return os.path.join(directory, f".{name}.{tag}")


def rename_folder(source: str, target: str, last: str | None = None) -> None:
    """Renames the folder `source` to `target`, which must not exist: one atomic rename
    on a local disk; on a URL file system file by file, `last` (a file of `source`, e.g.
    saved_model.pb) after the others, so that a reader waiting for it finds the rest (an
    object store has no folder to rename, and `ram://` renames the folder's entry alone)."""
    if _is_local(source):
        tf.io.gfile.rename(source, target)
        return
    source = source.rstrip("/")
    # Only what is there: `ram://` lists DIR/assets.extra/F under DIR/assets as ".extra".
    files = sorted((path[len(source) + 1:] for path in (
        os.path.join(folder, name) for folder, _, names in tf.io.gfile.walk(source)
        for name in names) if tf.io.gfile.exists(path)), key=lambda name: name == last)
    for name in files:
        tf.io.gfile.makedirs(os.path.dirname(os.path.join(target, name)))
        tf.io.gfile.rename(os.path.join(source, name), os.path.join(target, name))
    try:
        tf.io.gfile.rmtree(source)
    except tf.errors.NotFoundError:  # `ram://`, deleting what its listing made up
        pass


def _is_local(path: str) -> bool:
    return "://" not in path


def is_absolute(path: str) -> bool:
    """Whether `path` names the same file from any working directory: `/a/b`, or a URL
    (`gs://b/a`, `ram://a`), which `os.path.isabs` calls relative."""
    return not _is_local(path) or os.path.isabs(path)


def absolute(path: str) -> str:
    """`path` from any working directory (a URL as it is)."""
    return path if is_absolute(path) else os.path.abspath(path)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first); None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot), which tells a pid that
    was reused by another process; None where /proc is not there."""
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def _read_first_line(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.readline().strip()
    except (OSError, ValueError):
        return ""


def _boot_id() -> str:
    """This boot of the machine's id (another after each reboot); "" without /proc."""
    return _read_first_line("/proc/sys/kernel/random/boot_id")


def _pid_space() -> str:
    """This machine's boot and pid namespace: two processes can test each other's pids
    only where these match (containers may share a host name, not their pids)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{_boot_id()} {namespace}"


def _machine_id() -> str:
    """The id systemd gives an installation (kept across boots); "" where there is none."""
    return (_read_first_line("/etc/machine-id")
            or _read_first_line("/var/lib/dbus/machine-id"))


def _boot_time() -> float | None:
    """When this machine booted (seconds since the epoch: /proc/stat's btime)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _process_runs(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    fields = _stat_fields(pid)
    if fields and fields[0] == "Z":  # exited, not yet reaped
        return False
    return start is None or _process_start(pid) in (None, start)


def prepare(workdir: str, flag: str = "--workdir") -> bool:
    """Makes `workdir` if needed; returns whether it was made. A one-line error for a
    path that is a file or cannot be written."""
    if tf.io.gfile.exists(workdir) and not tf.io.gfile.isdir(workdir):
        raise errors.UserError(f"{flag}={workdir} is a file, not a directory")
    made = not tf.io.gfile.exists(workdir)
    try:
        tf.io.gfile.makedirs(workdir)
    except (tf.errors.OpError, OSError) as e:
        raise errors.UserError(f"{flag}={workdir}: cannot create the directory ("
                               f"{_reason(e)})") from None
    if _is_local(workdir) and not os.access(workdir, os.W_OK | os.X_OK):
        raise errors.UserError(f"{flag}={workdir}: cannot write there (permission denied "
                               "or a read-only file system)")
    return made


def _reason(e: Exception) -> str:
    message = getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)
    return " ".join(str(message).split()) or type(e).__name__


class Lock:
    """Holds `workdir` for this process: `with Lock(workdir): ...`, or `acquire()` and
    `release()`. A second `Lock` on the same workdir, in any process on any host, raises
    a `UserError` naming the holder, unless the holder is gone (module docstring)."""

    def __init__(self, workdir: str, flag: str = "--workdir",
                 heartbeat_secs: float = HEARTBEAT_SECS,
                 stale_after_secs: float = STALE_AFTER_SECS):
        self.workdir, self.flag = workdir, flag
        self.path = os.path.join(workdir, LOCK_FILE)
        self.heartbeat_secs, self.stale_after_secs = heartbeat_secs, stale_after_secs
        self.token = uuid.uuid4().hex
        self._made_workdir = False
        self._stop = threading.Event()
        self._thread = None

    # ------------------------------------------------------------------ holder
    def _holder(self) -> dict:
        now = time.time()
        return {"host": socket.gethostname(), "pid": os.getpid(),
                "process_start": _process_start(os.getpid()), "pid_space": _pid_space(),
                "machine_id": _machine_id(),
                "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                "heartbeat": now, "command": " ".join(sys.argv)[:500], "token": self.token}

    def _read(self) -> dict | None:
        """The lock file's holder; {} for a file being written or damaged; None if absent."""
        try:
            with tf.io.gfile.GFile(self.path) as f:
                holder = json.load(f)
            return holder if isinstance(holder, dict) else {}
        except tf.errors.NotFoundError:
            return None
        except (ValueError, tf.errors.OpError):
            return {}

    def _gone(self, holder: dict) -> bool:
        """Whether the run named by `holder` no longer runs."""
        if (holder.get("host") == socket.gethostname()
                and holder.get("pid_space", _pid_space()) == _pid_space()
                and isinstance(holder.get("pid"), int)):
            return not _process_runs(holder["pid"], holder.get("process_start"))
        rebooted = self._died_with_a_reboot(holder)
        if rebooted is not None:
            return rebooted
        beat = holder.get("heartbeat")
        if not isinstance(beat, (int, float)):  # a file being written, or damaged
            try:
                beat = tf.io.gfile.stat(self.path).mtime_nsec / 1e9
            except tf.errors.OpError:
                return False
        return time.time() - beat > self.stale_after_secs

    def _died_with_a_reboot(self, holder: dict) -> bool | None:
        """Whether `holder`, which ran on this machine (its host name and machine id) in
        an earlier boot and has not beaten since this boot began, died with the machine
        (a preemptible VM restarted resumes after two heartbeats, not after
        `stale_after_secs`); None where that is not the case. A live holder elsewhere (a
        clone of the same name and id, whose clock may differ from ours) beats every
        `heartbeat_secs`: wait two of them and read the lock again, whatever the clocks
        say; a new heartbeat or holder means it runs."""
        machine, boot, beat = _machine_id(), _boot_time(), holder.get("heartbeat")
        if not (machine and boot and holder.get("host") == socket.gethostname()
                and holder.get("machine_id") == machine
                and str(holder.get("pid_space", "")).split(" ")[0] != _boot_id()
                and isinstance(beat, (int, float)) and beat < boot):
            return None
        wait = 2 * self.heartbeat_secs
        logging.warning("%s was held by a run on this machine before it booted (%s): "
                        "waiting %.0fs for a heartbeat, to be sure it is gone", self.path,
                        _describe(holder), wait)
        time.sleep(wait)
        again = self._read()
        return again is None or (again.get("token") == holder.get("token")
                                 and again.get("heartbeat") == beat)

    # ------------------------------------------------------------------ taking it
    def _create(self, holder: dict) -> bool:
        """Writes the lock file if there is none; whether this call made it."""
        tmp = aside(self.path, f"{self.token}.tmp")
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(json.dumps(holder, indent=2) + "\n")
        try:
            if _is_local(self.path):
                try:
                    os.link(tmp, self.path)  # atomic, and fails if the lock exists
                except FileExistsError:
                    return False
                except OSError as e:  # no hard links here (FUSE mounts of object stores)
                    if e.errno not in _NO_LINKS:
                        raise
                    return self._create_exclusive(holder)
                return True
            try:
                tf.io.gfile.rename(tmp, self.path, overwrite=False)
            except tf.errors.AlreadyExistsError:
                return False
            written = self._read() or {}
            return written.get("token") == self.token
        finally:
            if tf.io.gfile.exists(tmp):
                tf.io.gfile.remove(tmp)

    def _create_exclusive(self, holder: dict) -> bool:
        """The lock by an exclusive create and a write (a reader meanwhile sees a file being
        written: `_read` gives {}, which counts as held until stale)."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(holder, indent=2) + "\n")
        return True

    def _take_over(self, stale: dict) -> None:
        """Moves the stale lock aside, if it is still the one read as `stale`: of two runs
        taking over at once, only one moves it (a rename is atomic), and neither removes
        a lock the other has just made."""
        moved_aside = aside(self.path, f"{self.token}.stale")
        try:
            tf.io.gfile.rename(self.path, moved_aside, overwrite=False)
        except (tf.errors.NotFoundError, FileNotFoundError):
            return  # another run moved it first: `_create` says who won
        try:
            with tf.io.gfile.GFile(moved_aside) as f:
                moved = json.load(f)
        except (ValueError, tf.errors.OpError):
            moved = {}
        if (moved.get("token"), moved.get("heartbeat")) != (stale.get("token"),
                                                             stale.get("heartbeat")):
            # A new lock was made, or its holder beat, between our read and the rename:
            # put it back.
            tf.io.gfile.rename(moved_aside, self.path, overwrite=False)
            return
        tf.io.gfile.remove(moved_aside)

    def acquire(self) -> "Lock":
        self._made_workdir = prepare(self.workdir, self.flag)
        try:
            self._acquire()
        except BaseException:
            self._remove_if_made_and_empty()
            raise
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="workdir-lock",
                                        daemon=True)
        self._thread.start()
        return self

    def _acquire(self) -> None:
        try:
            if self._create(self._holder()):
                return
            holder = self._read()
            if holder is not None and not self._gone(holder):
                raise errors.UserError(
                    f"{self.workdir} is in use by another run ({_describe(holder)}); wait "
                    f"for it to end or use another {self.flag}. If that run is gone, "
                    f"remove {self.path}")
            if holder is not None:
                logging.warning("Taking over %s from a run that is gone (%s)", self.path,
                                _describe(holder))
                self._take_over(holder)
            if not self._create(self._holder()):
                raise errors.UserError(
                    f"{self.workdir} is in use by another run ({_describe(self._read() or {})}"
                    f"); wait for it to end or use another {self.flag}")
        except (tf.errors.OpError, OSError) as e:
            raise errors.UserError(f"{self.flag}={self.workdir}: cannot write there ("
                                   f"{_reason(e)})") from None

    def _beat(self):
        while not self._stop.wait(self.heartbeat_secs):
            try:
                holder = self._read()
                if not holder:  # unreadable now (a storage hiccup), or moved aside for a
                    # moment by a run that takes it over only if it is stale: try again
                    logging.warning("Cannot read %s to refresh it; trying again in %.0fs",
                                    self.path, self.heartbeat_secs)
                    continue
                if holder.get("token") != self.token:
                    logging.error("%s is no longer this run's (%s): another run may write "
                                  "into %s", self.path, _describe(holder), self.workdir)
                    return
                holder["heartbeat"] = time.time()
                tmp = aside(self.path, f"{self.token}.tmp")
                with tf.io.gfile.GFile(tmp, "w") as f:
                    f.write(json.dumps(holder, indent=2) + "\n")
                tf.io.gfile.rename(tmp, self.path, overwrite=True)
            except (tf.errors.OpError, OSError) as e:  # a storage hiccup: try next time
                logging.warning("Cannot refresh %s (%s)", self.path, _reason(e))

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            holder = self._read()
            if holder and holder.get("token") == self.token:
                tf.io.gfile.remove(self.path)
            self._remove_if_made_and_empty()
        except (tf.errors.OpError, OSError) as e:  # never hide the run's own error
            logging.warning("Cannot release %s (%s)", self.path, _reason(e))

    def _remove_if_made_and_empty(self) -> None:
        """A workdir this lock made and nothing else wrote into (the run stopped on bad
        input before writing): leave no trace of it."""
        if self._made_workdir and not tf.io.gfile.listdir(self.workdir):
            tf.io.gfile.rmtree(self.workdir)

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, *exc_info):
        self.release()


def _describe(holder: dict) -> str:
    if not holder:
        return "its lock file is being written or is damaged"
    beat = holder.get("heartbeat")
    ago = (f", last heartbeat {time.time() - beat:.0f}s ago"
           if isinstance(beat, (int, float)) else "")
    return (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, since "
            f"{holder.get('started', '?')}{ago}")


# Left by a run killed while writing: TF's checkpoint state file written aside
# (checkpoint.tmp<hex>), a checkpoint's shards before their merge (ckpt-N_temp/), and the
# run's own files written aside (`write_text`: .NAME.tmp; NAME.tmp before `aside`). Only
# names a run writes: a workdir may be a folder that holds the user's own *.tmp files.
_PARTIAL = tuple(pattern.format(name) for name in (CONFIG, VOCAB, RESULTS, PRETRAINED, CONVERTED)
                 for pattern in (".{}.tmp", "{}.tmp")) + (
    f"{CHECKPOINTS}/checkpoint.tmp*", f"{CHECKPOINTS}/*_temp", f"{CHECKPOINTS}/*_temp_*",
    f"{BEST}/*_temp", f"{BEST}/*_temp_*")
# A run killed while taking the lock leaves .LOCK_FILE.<token>.tmp or .stale (before
# `aside`: LOCK_FILE.<token>.…); one younger than this may be another run's, taking it now.
_LOCK_LEFTOVER_SECS = 60


def remove_partial_files(workdir: str) -> list[str]:
    """Removes what a killed run left half-written in `workdir` (call it holding the
    workdir's `Lock`); returns the paths removed."""
    found = [p for pattern in _PARTIAL for p in tf.io.gfile.glob(os.path.join(workdir, pattern))]
    for leftover in (tf.io.gfile.glob(os.path.join(workdir, f".{LOCK_FILE}.*"))
                     + tf.io.gfile.glob(os.path.join(workdir, f"{LOCK_FILE}.*"))):
        try:
            age = time.time() - tf.io.gfile.stat(leftover).mtime_nsec / 1e9
        except tf.errors.NotFoundError:
            continue
        if age > _LOCK_LEFTOVER_SECS:
            found.append(leftover)
    removed = []
    for path in found:
        try:
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
        except tf.errors.NotFoundError:
            continue
        removed.append(path)
    if removed:
        logging.info("Removed what an interrupted run left half-written: %s",
                     ", ".join(os.path.relpath(p, workdir) for p in removed))
    return removed
