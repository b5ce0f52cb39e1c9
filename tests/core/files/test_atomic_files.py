"""Files appear only when complete (`elmo_core.files.atomic_files`)."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from elmo_core.files.atomic_files import atomic_folder, atomic_path, atomic_write, check_free_space, disk_full_error
from elmo_core.model.errors import DiskFullError
from tests.conftest import make_tiny_elmo


def test_a_file_appears_whole_with_the_usual_permissions_and_replaces_the_old_one(tmp_path):
    target = tmp_path / "data.txt"
    target.write_text("old", encoding="utf-8")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".data.txt.partial-") and tmp.suffix == ".txt"
        tmp.write_text("new", encoding="utf-8")
        assert target.read_text(encoding="utf-8") == "old"  # nothing changes until the block ends
    assert target.read_text(encoding="utf-8") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()


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


def _umask() -> int:
    """The process umask, read without setting it (Linux)."""
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_saving_never_sets_the_process_umask(tmp_path, umask_022, monkeypatch):
    from elmo_core import save_model_folder
    from elmo_core.apps.embed_file import embed_file

    def refuse(mask):
        raise AssertionError(f"os.umask({mask:#o}) called: the umask is process-wide state")

    monkeypatch.setattr(os, "umask", refuse)
    atomic_write(tmp_path / "a.txt", lambda tmp: tmp.write_text("x", encoding="utf-8"))
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    with atomic_folder(tmp_path / "folder") as staging:
        (staging / "b.txt").write_text("y", encoding="utf-8")
    (tmp_path / "in.txt").write_text("the river bank\n", encoding="utf-8")
    embed_file(make_tiny_elmo(), tmp_path / "in.txt", tmp_path / "out.h5")
    written = ("a.txt", "model/model.safetensors", "model/config.json", "folder/b.txt", "out.h5")
    for path in (tmp_path / name for name in written):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_other_threads_create_files_with_the_umask_while_models_are_saved(tmp_path, umask_022, monkeypatch):
    import threading
    import time

    from elmo_core import save_model_folder

    real_umask = os.umask

    def slow_umask(mask: int) -> int:  # widens the moment a set umask lasts, so that the threads see it
        old = real_umask(mask)
        time.sleep(0.001)
        return old

    monkeypatch.setattr(os, "umask", slow_umask)

    model, stop, modes = make_tiny_elmo(), threading.Event(), []
    (tmp_path / "files").mkdir()

    def create(k: int) -> None:
        for i in range(20_000):
            if stop.is_set():
                return
            path = tmp_path / "files" / f"{k}-{i}"
            with open(path, "w") as f:
                f.write("x")
            modes.append(stat.S_IMODE(path.stat().st_mode))
            path.unlink()

    threads = [threading.Thread(target=create, args=(k,)) for k in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: a moment's umask of 0 would be seen
    for thread in threads:
        thread.start()
    try:
        for k in range(60):  # each save creates 3 files through the atomic writer
            save_model_folder(model, tmp_path / f"m{k % 4}")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)
    assert len(modes) > 0 and {oct(m) for m in modes} == {oct(0o644)}


def test_a_link_at_the_final_name_is_replaced_and_its_target_kept(tmp_path):
    shared = tmp_path / "blob"
    shared.write_text("shared", encoding="utf-8")
    (tmp_path / "snapshot").mkdir()
    link = tmp_path / "snapshot" / "config.json"
    link.symlink_to(shared)
    atomic_write(link, lambda tmp: tmp.write_text("new", encoding="utf-8"))
    assert shared.read_text(encoding="utf-8") == "shared"
    assert not link.is_symlink() and link.read_text(encoding="utf-8") == "new"


def test_a_folder_save_replaces_links_in_the_folder_and_its_subfolders(tmp_path):
    blobs, target = tmp_path / "blobs", tmp_path / "target"
    (blobs / "vocab").mkdir(parents=True)
    (blobs / "cfg").write_text("old cfg", encoding="utf-8")
    (blobs / "vocab" / "strings.json").write_text("old strings", encoding="utf-8")
    target.mkdir()
    (target / "cfg").symlink_to(blobs / "cfg")
    (target / "vocab").symlink_to(blobs / "vocab")  # a linked folder
    with atomic_folder(target) as staging:
        (staging / "cfg").write_text("new cfg", encoding="utf-8")
        (staging / "vocab").mkdir()
        (staging / "vocab" / "strings.json").write_text("new strings", encoding="utf-8")
        assert (target / "cfg").read_text(encoding="utf-8") == "old cfg"  # nothing changes until the block ends
    assert (blobs / "cfg").read_text(encoding="utf-8") == "old cfg"
    assert (blobs / "vocab" / "strings.json").read_text(encoding="utf-8") == "old strings"
    assert (target / "cfg").read_text(encoding="utf-8") == "new cfg" and not (target / "cfg").is_symlink()
    assert (target / "vocab" / "strings.json").read_text(encoding="utf-8") == "new strings"
    assert sorted(p.name for p in target.iterdir()) == ["cfg", "vocab"]  # no temporary folder left


@pytest.mark.parametrize(
    "failure",
    [
        OSError(28, "No space left on device"),
        Exception("Error while serializing: I/O error: No space left on device (os error 28)"),  # safetensors
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),  # torch.save
    ],
)
def test_a_full_disk_is_one_disk_full_error_and_leaves_nothing(tmp_path, failure):
    target = tmp_path / "model.safetensors"

    def fail(tmp):
        tmp.write_bytes(b"half")
        if isinstance(failure, RuntimeError):  # torch.save raises while handling the OSError of its write
            try:
                raise OSError(28, "No space left on device")
            except OSError:
                raise failure  # noqa: B904 - the OSError stays its __context__, as in torch.save
        raise failure

    with pytest.raises(DiskFullError, match=r"cannot write .*model.safetensors: its file system is full \(.* free\)"):
        atomic_write(target, fail)
    assert list(tmp_path.iterdir()) == []
    assert disk_full_error(ValueError("a bad value"), target) is None


def test_free_space_is_checked_with_what_is_needed_and_what_is_free(tmp_path, monkeypatch):
    import elmo_core.files.atomic_files as atomic_files

    monkeypatch.setattr(atomic_files, "free_bytes", lambda path: 1_500_000)
    check_free_space(tmp_path, 1_000_000, "OUTPUT out.h5")
    with pytest.raises(
        DiskFullError,
        match=r"^OUTPUT out.h5: its file system is full: the job needs 19.0 MB more and has 1.5 MB free\. .* resume\.$",
    ):
        check_free_space(tmp_path, 19_000_000, "OUTPUT out.h5", "Run it again to resume.")
