"""Cross-process locks per device, so that two measuring processes on one machine never time
kernels on the same device at once (nor cache what they measured while contending).

A lock is an ``flock`` on a file under ``$DRAGON_CACHE_DIR/locks`` (or
``~/.cache/little-dragon/locks``), named after the device; the kernel releases it when its
holder dies.  Timing takes it exclusively.  On a CPU device, builds, which run on the same
cores, take it shared: a measurement waits for other processes' builds and they wait for it.

>>> with device_lock("doctest device"):
...     pass
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import time
from collections.abc import Iterator

from .cache import cache_root

__all__ = ["device_lock", "lock_dir"]


def lock_dir() -> str:
    return os.path.join(cache_root(), "locks")


def _path(device: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-")[:60]
    digest = hashlib.sha256(device.encode()).hexdigest()[:12]
    return os.path.join(lock_dir(), f"{slug}-{digest}.lock")


# A wait this long is said once on stderr (logging), naming the lock: a measuring process that
# was stopped (Ctrl-Z, SIGSTOP) keeps its lock, and every other one waits for it.
WARN_AFTER_S = 30.0
LOG = logging.getLogger(__name__)


@contextlib.contextmanager
def device_lock(device: str, *, shared: bool = False,
                warn_after_s: float = WARN_AFTER_S) -> Iterator[float]:
    """Hold the device's lock (exclusive, or ``shared``); yields the seconds spent waiting."""
    path = _path(device)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        start = time.monotonic()
        _acquire(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, device, path, warn_after_s)
        yield time.monotonic() - start
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _acquire(fd: int, mode: int, device: str, path: str, warn_after_s: float) -> None:
    """``flock`` without a time limit; past ``warn_after_s`` of waiting, a warning, once."""
    start, pause, warned = time.monotonic(), 0.001, False
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if not warned and time.monotonic() - start >= warn_after_s:
            LOG.warning("waiting %.0f s for the device %r: another process measures on it "
                        "(its lock %s; a stopped process holds it until it is resumed or "
                        "ends)", time.monotonic() - start, device, path)
            warned = True
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
