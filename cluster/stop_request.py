"""Ctrl-C during training: the first finishes the current step, saves a checkpoint and stops; the second aborts."""
from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger(__name__)


class StopRequest:
    """First Ctrl-C: finish the current step, save, stop. Second Ctrl-C: abort at once."""

    def __init__(self):
        self.requested = False
        self._old = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._old = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
            log.warning("Ctrl-C: finishing this step, then saving a checkpoint (Ctrl-C again to abort now)")
        signal.signal(signal.SIGINT, handler)

    def uninstall(self) -> None:
        if self._old is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._old)
            self._old = None
