"""Files replaced in one step: the one atomic writer every layer uses.

A reader (or a run killed half-way) sees the old file or the whole new one, never a part:
the content goes to a temporary file in the same folder, is flushed to disk, given the mode a
plain ``open`` would give (an existing file's own mode), and renamed over the target.  A
folder (a Hugging Face dataset, a MetaSchedule database) is filled beside its target and
renamed the same way by ``replace_dir``.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> write_atomic(os.path.join(folder, "a.txt"), "hello\\n")
>>> open(os.path.join(folder, "a.txt")).read()
'hello\\n'
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["atomic_file", "current_umask", "replace_dir", "unwritable", "write_atomic"]


def current_umask() -> int:
    """The process's umask (read without changing it for good)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def unwritable(path: str | os.PathLike[str], *, folder: bool = False) -> str | None:
    """Why ``path`` cannot be written, or None when it can: checked before a long run, so that
    its result is not lost at the end.  ``folder``: ``path`` is a folder that will be created or
    filled; else a file, written by ``write_atomic`` (a temporary file in its folder, renamed).
    The folder (or the nearest one that exists, when ``path`` would be created) is tried for
    real, with a temporary file, since permission bits do not say what root or a read-only
    mount may do.

    >>> unwritable("/proc/x")
    '/proc/x: cannot create a file in /proc (No such file or directory)'
    """
    target = os.path.realpath(path)
    if folder:
        if os.path.exists(target) and not os.path.isdir(target):
            return f"{path}: exists and is not a directory"
        probe = target
    else:
        if os.path.isdir(target):
            return f"{path}: is a directory, not a file"
        probe = os.path.dirname(target)
    while not os.path.exists(probe):  # the folder would be created: try its nearest parent
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{path}: {probe} is not a directory"
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".tmp-writable-")
    except OSError as exc:
        return f"{path}: cannot create a file in {probe} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(tmp)
    return None


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """A file object (``mode`` ``"w"``, UTF-8, or ``"wb"``) whose content replaces ``path`` in
    one step when the block ends; on an error the temporary file is removed and ``path`` is
    left as it was.  A symbolic link is written through, as a plain ``open`` would."""
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    try:
        file_mode = os.stat(target).st_mode & 0o7777
    except OSError:
        file_mode = 0o666 & ~current_umask()  # mkstemp's file is private (0600)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".tmp-{os.path.basename(target)}-")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """``data`` (text as UTF-8, or bytes) as the whole content of ``path``, through
    ``atomic_file``."""
    with atomic_file(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


@contextlib.contextmanager
def replace_dir(path: str | os.PathLike[str]) -> Iterator[str]:
    """A new, empty folder beside ``path`` to fill in the block; when the block ends it
    replaces ``path`` (and everything in it) in one rename, with the modes a plain ``mkdir``
    and ``open`` would give.  On an error the new folder is removed and the old one kept.

    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "data")
    >>> with replace_dir(out) as tmp:
    ...     write_atomic(os.path.join(tmp, "x"), "1")
    >>> os.listdir(out)
    ['x']
    """
    target = os.path.abspath(path)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{name}-")
    old = None
    try:
        yield tmp
        _plain_modes(tmp)
        if os.path.exists(target):
            old = tempfile.mkdtemp(dir=parent, prefix=f".old-{name}-")
            os.replace(target, os.path.join(old, name))
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not os.path.exists(target):  # put the old one back
            with contextlib.suppress(OSError):
                os.replace(os.path.join(old, name), target)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _plain_modes(path: str) -> None:
    """The modes a plain ``mkdir``/``open`` would give (temporary files are private)."""
    umask = current_umask()
    for root, _dirs, files in os.walk(path):
        os.chmod(root, 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)
