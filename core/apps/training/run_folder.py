"""A run's output folder: the files it writes, and the rule that a run never overwrites another's.

Rank 0 holds the folder's `FolderLock` for the run's life. A new run refuses a folder that
holds a run's files, unless it resumes the checkpoint in it.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist

from ...files.folder_lock import LOCK_NAME, FolderLock
from ...files.model_folder import MODEL_FOLDER_FILES
from ...files.text_files import check_output_is_new, same_file
from ...model.errors import ElmoError
from .checkpoint import CHECKPOINT_NAME
from .model import LM_HEAD_NAME, VOCAB_NAME
from .train_log import LOG_NAME

TRAINING_FILES = (CHECKPOINT_NAME, LOG_NAME, VOCAB_NAME, LM_HEAD_NAME, *MODEL_FOLDER_FILES)
"""Name patterns of the files a run writes in its output folder."""


def check_glob_spares_out(pattern: str, out: Path) -> None:
    """Refuse a --train glob that would read what the run writes in --out.

    `tg/*.txt` with `--out tg` would read the run's own vocab.txt when it is resumed.
    """
    folder, name = os.path.split(pattern)
    if not any(c in name for c in "*?[") or any(c in folder for c in "*?["):
        return
    if Path(folder or ".").resolve() != out.resolve():
        return
    written = [w.replace("*", "") for w in TRAINING_FILES]  # a name of each kind the run writes
    caught = [w for w in written if fnmatch.fnmatch(w, name)]
    if caught:
        raise ElmoError(
            f"--train {pattern!r} is a pattern in --out {out}, where this command writes {caught[0]!r}: a resumed "
            "run would read it as training text. Keep the training text in another folder, or give another --out."
        )


def own_out_folder(out: Path, resume: str | Path | None, rank: int, distributed: bool) -> FolderLock | None:
    """Rank 0 locks --out for the run's life and checks it (`check_no_other_run`).

    The other ranks learn its answer. A killed run's lock dies with it.

    Raises:
        ElmoError: On every rank, when another run holds --out or its files are there.
    """
    answer: list[str | None] = [None]
    lock = None
    if rank == 0:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            lock = FolderLock(out, busy=_busy_message(out))
            check_no_other_run(out, resume)
        except (ElmoError, OSError) as err:  # an OSError too: the other ranks must hear of it, not hang
            answer[0] = str(err)
            if lock is not None:
                lock.release(delete=True)
                lock = None
    if distributed:
        dist.broadcast_object_list(answer, src=0)
    if answer[0] is not None:
        raise ElmoError(answer[0])
    return lock


def check_no_other_run(out: Path, resume: str | Path | None) -> None:
    """Refuse an --out that holds a run's files, unless this run resumes the checkpoint there.

    Raises:
        ElmoError: One line naming --out, the files there, --resume and a fresh --out.
    """
    if resume is not None and same_file(Path(resume).parent, out):
        return
    checkpoint = out / CHECKPOINT_NAME
    if resume is not None:
        fix = (
            f"Resume a run in its own folder (--out {Path(resume).parent} --resume {resume}), "
            "or give a fresh --out (a new or empty folder)."
        )
    elif checkpoint.is_file():
        fix = f"Continue that run with --resume {checkpoint}, or give a fresh --out (a new or empty folder)."
    else:
        fix = f"Give a fresh --out (a new or empty folder); there is no {CHECKPOINT_NAME} there to --resume from."
    check_output_is_new("--out", out, fix, patterns=TRAINING_FILES, what="another training run's files")


def _busy_message(out: Path) -> str:
    return (
        f"another elmo train is running in --out {out} (it holds {out / LOCK_NAME}): wait for it to finish "
        f"(if it stops, --resume {out / CHECKPOINT_NAME} continues it), or give another --out. To train on "
        "several processes or GPUs at once, start them together with torchrun: "
        "torchrun --nproc-per-node N -m elmo_core train ..."
    )


def check_out_dir_is_new(out_dir: Path, is_main: bool, agree: Callable[[bool], bool]) -> None:
    """`Trainer.fit`'s rule: a new run refuses an `out_dir` that holds a run's files.

    `agree` is True on every rank when it is on any, so all ranks refuse with rank 0.

    Raises:
        ElmoError: One line naming `out_dir`, the files there, `load_checkpoint` and a fresh folder.
    """
    checkpoint = out_dir / CHECKPOINT_NAME
    fresh = "a fresh out_dir (a new or empty folder)."
    if checkpoint.is_file():
        fix = f"Continue that run with trainer.load_checkpoint({str(checkpoint)!r}) before fit(), or give {fresh}"
    else:
        fix = f"Give {fresh}"
    refusal: ElmoError | None = None
    if is_main:
        try:
            check_output_is_new("out_dir", out_dir, fix, patterns=TRAINING_FILES, what="another run's files")
        except ElmoError as err:
            refusal = err
    if agree(refusal is not None):  # every rank stops with rank 0 (alone, it would leave them waiting)
        raise refusal or ElmoError(f"rank 0 refused out_dir {out_dir}: it holds another run's files. {fix}")
