"""Preemption: on SIGTERM, a checkpoint at the next step boundary, then a clean exit.

Preemptible TPUs and spot GPUs get SIGTERM some seconds before they are taken away.

- One worker (the default strategy, `one_device`, `mirrored`), and a TPU:
  `SigtermWatcher` sets the trainer's `stop_requested` variable the moment the signal
  arrives, from a thread, so the compiled loop (which reads it before every step) stops
  after the step it is in, even in the middle of a long `steps_per_loop` call (the whole
  step on one GPU or a TPU, whose loop runs inside XLA, reads it once a loop: it stops at
  the loop's end). The loop then saves and returns.
- Several workers (`multi_worker`): they must all stop after the same step, so
  `tf.distribute.experimental.PreemptionCheckpointHandler` agrees on it through the
  coordination service and saves there, at a `steps_per_loop` boundary; its `exit_fn`
  raises `Preempted`, which the loop turns into a clean return. On a Google Cloud CPU VM
  that handler saves nothing (TF supports no CPU or TPU there; its TPU path serves
  Google's internal TPUs, so a TPU, one client process, has the watcher): a warning at
  the start says that SIGTERM loses the steps since the last checkpoint there. The
  watcher cannot stand in for it: one worker alone cannot save (saving is collective).

Python runs signal handlers in the main thread only once it gets back to the
interpreter, which a running `tf.function` does not do: the watcher therefore reads the
byte that Python's C-level handler writes to a `signal.set_wakeup_fd` socket at once.
"""

import signal
import socket
import threading

from absl import logging
import tensorflow as tf

from electra_tf import compat


class Preempted(Exception):
    """Raised by the multi-worker handler's `exit_fn` once the checkpoint is written."""


class SigtermWatcher:
    """Sets `flag` (a boolean `tf.Variable`) on SIGTERM; a context manager. Not
    `enabled`, it leaves SIGTERM alone (to `PreemptionCheckpointHandler`).

    Outside the main thread (where Python cannot install signal handlers) it watches
    nothing and logs why.
    """

    def __init__(self, flag: tf.Variable, enabled: bool = True):
        self._flag = flag
        self._enabled = enabled
        self.received = threading.Event()
        self._installed = False
        self._previous_handler = None
        self._previous_fd = -1
        self._read = self._write = None

    def __enter__(self):
        if not self._enabled:
            return self
        if threading.current_thread() is not threading.main_thread():
            logging.warning("Not in the main thread: SIGTERM will not stop training cleanly")
            return self
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._write.fileno(),
                                                 warn_on_full_buffer=False)
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_signal)
        self._installed = True
        threading.Thread(target=self._watch, name="sigterm-watcher", daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        if not self._installed:
            return
        signal.signal(signal.SIGTERM, self._previous_handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._write.close()  # ends the watcher thread's recv
        self._installed = False

    def _on_signal(self, signum, frame):  # in the main thread, between Python bytecodes
        del signum, frame
        self._stop()

    def _watch(self):
        with self._read:
            while True:
                try:
                    data = self._read.recv(64)
                except OSError:
                    return
                if not data:
                    return
                if signal.SIGTERM in data:
                    self._stop()

    def _stop(self):
        if self.received.is_set():
            return
        self.received.set()
        logging.warning("SIGTERM: stopping after the current step to save a checkpoint")
        self._flag.assign(True)


def multi_worker_handler(strategy, manager) -> "tf.distribute.experimental.PreemptionCheckpointHandler | None":
    """The `PreemptionCheckpointHandler` for a multi-worker strategy, saving with `manager`
    and raising `Preempted` once saved; None where `SigtermWatcher` is the one to act: one
    worker and a TPU."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None

    def exit_fn():
        raise Preempted()

    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, manager,
        termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=exit_fn))
    if not compat.preemption_handler_saves(handler):
        logging.warning("TF's PreemptionCheckpointHandler saves nothing on a Google Cloud "
                        "CPU VM: a SIGTERM there loses the steps since the last checkpoint "
                        "(config.train.checkpoint_every)")
    return handler
