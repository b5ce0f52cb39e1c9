"""Files appear only when complete (`elmo_core.files.atomic_files`)."""

from __future__ import annotations

import os
import stat

import pytest

from elmo_core.files.atomic_files import atomic_path, atomic_write


def test_a_file_appears_whole_with_the_usual_permissions_and_replaces_the_old_one(tmp_path):
    target = tmp_path / "data.txt"
    target.write_text("old", encoding="utf-8")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".data.txt.partial-") and tmp.suffix == ".txt"
        tmp.write_text("new", encoding="utf-8")
        assert target.read_text(encoding="utf-8") == "old"  # nothing changes until the block ends
    assert target.read_text(encoding="utf-8") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")

    def fail(tmp):
        tmp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, fail)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_the_temporary_file_can_live_in_another_folder(tmp_path):
    (tmp_path / "work").mkdir()
    with atomic_path(tmp_path / "out.h5", tmp_dir=tmp_path / "work") as tmp:
        assert tmp.parent == tmp_path / "work"
        tmp.write_bytes(b"x")
    assert (tmp_path / "out.h5").read_bytes() == b"x" and list((tmp_path / "work").iterdir()) == []
