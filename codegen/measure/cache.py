"""The measurement cache: one SQLite table of outcomes keyed by workload identity, canonical
script, target, device and measurement settings, so the same script is never measured twice.

A file that is not a readable cache is moved aside (never deleted) and a fresh one started, with
a warning that names both paths.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
import warnings

from .outcomes import Outcome

__all__ = ["Cache", "cache_key", "default_cache_path"]


def default_cache_path() -> str:
    root = os.environ.get("DRAGON_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "little-dragon")
    return os.path.join(root, "measure.sqlite")


def cache_key(workload_id: str, script: str, target: str, device: str, settings: str) -> str:
    text = "\x1f".join((workload_id, script, target, device, settings))
    return hashlib.sha256(text.encode()).hexdigest()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS outcomes (
    key TEXT PRIMARY KEY,
    workload TEXT NOT NULL,
    script TEXT NOT NULL,
    target TEXT NOT NULL,
    device TEXT NOT NULL,
    settings TEXT NOT NULL,
    outcome TEXT NOT NULL,
    created REAL NOT NULL
)"""


class Cache:
    """Outcomes on disk.

    >>> import tempfile, os
    >>> from codegen.measure.outcomes import Status
    >>> c = Cache(os.path.join(tempfile.mkdtemp(), "m.sqlite"))
    >>> c.put("k", Outcome(Status.CORRECT, latency_s=1e-3), workload="w", script="s")
    >>> c.get("k").latency_s, c.get("k").cached
    (0.001, True)
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path or default_cache_path()
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:
            aside = f"{self.path}.corrupt-{int(time.time())}"
            os.replace(self.path, aside)
            warnings.warn(f"measurement cache {self.path} is not a readable SQLite cache "
                          f"({exc}); moved it to {aside} and started a fresh one", stacklevel=2)
            self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
        db.execute("SELECT count(*) FROM outcomes").fetchone()  # fails on a corrupt file
        db.commit()
        return db

    def get(self, key: str) -> Outcome | None:
        row = self.db.execute("SELECT outcome FROM outcomes WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            data = Outcome.from_json(row[0]).as_dict()
        except (ValueError, KeyError, TypeError):
            return None  # an unreadable row is a miss; it is overwritten by the next put
        data["cached"] = True
        return Outcome.from_dict(data)

    def put(self, key: str, outcome: Outcome, *, workload: str = "", script: str = "",
            target: str = "", device: str = "", settings: str = "") -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key, workload, script, target, device, settings, outcome.to_json(), time.time()))
        self.db.commit()

    def __len__(self) -> int:
        return self.db.execute("SELECT count(*) FROM outcomes").fetchone()[0]

    def close(self) -> None:
        self.db.close()
