"""dragon_dsl.files: the one atomic writer (a file, a folder), its modes and its clean-up."""

import os

import pytest

from dragon_dsl.files import atomic_file, replace_dir, write_atomic


def test_write_atomic_text_and_bytes(tmp_path):
    path = tmp_path / "sub" / "a.txt"
    write_atomic(path, "héllo\n")
    assert path.read_text(encoding="utf-8") == "héllo\n"
    write_atomic(str(path), b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert os.listdir(path.parent) == ["a.txt"]


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(path) as f:
        f.write("half")
        raise RuntimeError
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_modes_a_plain_open_gives_and_an_existing_files_own(tmp_path):
    path = tmp_path / "a.txt"
    write_atomic(path, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    path.chmod(0o640)
    write_atomic(path, "y")
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_symbolic_link_is_written_through(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_replace_dir_replaces_whole_or_keeps_the_old(tmp_path):
    out = tmp_path / "data"
    with replace_dir(out) as tmp:
        write_atomic(os.path.join(tmp, "a"), "1")
    with replace_dir(out) as tmp:
        write_atomic(os.path.join(tmp, "b"), "2")
    assert os.listdir(out) == ["b"]
    with pytest.raises(RuntimeError), replace_dir(out) as tmp:
        write_atomic(os.path.join(tmp, "c"), "3")
        raise RuntimeError
    assert os.listdir(out) == ["b"]
    assert sorted(os.listdir(tmp_path)) == ["data"]
