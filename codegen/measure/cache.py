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

__all__ = ["Cache", "cache_key", "cache_root", "default_cache_path"]


def cache_root() -> str:
    """Where the project keeps what it remembers (measurements, baselines, device locks):
    ``$DRAGON_CACHE_DIR``, else ``$XDG_CACHE_HOME/little-dragon`` or
    ``~/.cache/little-dragon``."""
    return os.environ.get("DRAGON_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "little-dragon")


def default_cache_path() -> str:
    return os.path.join(cache_root(), "measure.sqlite")


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
        """The outcome stored under ``key``, or None.  A row that does not hold a complete
        outcome (edited, truncated, from an older layout) is a miss, overwritten by the next
        put: a correct outcome always has its latency."""
        row = self.db.execute("SELECT outcome FROM outcomes WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return _outcome(row[0])

    def query(self, *, workload: str | None = None, target: str | None = None,
              device: str | None = None, status: str | None = None) -> list[dict]:
        """Stored rows matching every given field (``workload`` is the identity, ``status``
        an outcome status such as "correct"), newest first: dicts with the row's columns and
        its ``Outcome`` under "outcome"; unreadable rows are left out."""
        where = [(c, v) for c, v in (("workload", workload), ("target", target),
                                     ("device", device)) if v is not None]
        sql = "SELECT key, workload, script, target, device, settings, outcome, created " \
              "FROM outcomes"
        if where:
            sql += " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
        rows = []
        for values in self.db.execute(sql + " ORDER BY created DESC", [v for _, v in where]):
            row = dict(zip(("key", "workload", "script", "target", "device", "settings",
                            "outcome", "created"), values, strict=True))
            row["outcome"] = _outcome(row["outcome"])
            if row["outcome"] is not None and (status is None
                                               or row["outcome"].status.value == status):
                rows.append(row)
        return rows

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


def _outcome(text: str) -> Outcome | None:
    try:
        data = Outcome.from_json(text).as_dict()
        data["cached"] = True
        return Outcome.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
