"""How many CPU threads a biLM forward uses: no more than the CPUs that are free.

Each of the LSTMs' many small operations ends at an OpenMP barrier that waits for a busy
core. So `forward_threads` sets the forward's own thread count to

    min(torch's own count, usable CPUs, round(usable CPUs - other processes' load)),

shared among concurrent forwards. GNU OpenMP is not fork-safe: a forked child's forking
thread runs with one thread. See docs/guides/speed.md.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from ..model.environment import environment_value

__all__ = ["set_thread_policy"]

ThreadPolicy = str | int
"""`"auto"` (the default), `"torch"` or a whole number of threads."""

ENV_VAR = "ELMO_THREADS"
MIN_INTERVAL_S = 0.1
"""Shortest interval over which `/proc/stat` is read (10 ticks per CPU at 100 Hz)."""
STALE_AFTER_S = 2.0
"""After a pause this long the last interval says little about now: look at runnable tasks."""

_PROC = Path("/proc")
_CGROUP = Path("/sys/fs/cgroup")


def _parse_policy(value: object, source: str) -> ThreadPolicy:
    if isinstance(value, str) and value.strip().lower() in ("auto", "torch"):
        return value.strip().lower()
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(
        f"{source} must be 'auto', 'torch' or a whole number of threads >= 1; got {value!r}. "
        "Use 'auto' to follow the free CPUs, 'torch' to keep torch's own setting."
    )


_policy: ThreadPolicy | None = None  # None: not chosen yet; ELMO_THREADS is read at first use


def set_thread_policy(policy: str | int) -> None:
    """Choose how biLM forwards on the CPU pick their thread count, for this process.

    `ELMO_THREADS` sets the same, read at the first forward.

    Args:
        policy: `"auto"` (default): the free usable CPUs, at most torch's own count.
            `"torch"`: torch's count (slow when a core is busy). N >= 1: exactly N threads.

    Raises:
        ValueError: for anything else.
    """
    global _policy
    _policy = _parse_policy(policy, "the thread policy")


def thread_policy() -> ThreadPolicy:
    """The policy in force (`set_thread_policy`, else `ELMO_THREADS`, else "auto").

    Raises:
        ElmoError: for an `ELMO_THREADS` that is not "auto", "torch" or a whole number >= 1.
    """
    global _policy
    if _policy is None:
        _policy = environment_value(ENV_VAR)
    return _policy


# ---------------------------------------------------------------- usable CPUs
def _affinity() -> set[int] | None:
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return None


def _cgroup_quota(proc: Path | None = None, cgroup: Path | None = None) -> float | None:
    """The tightest CPU quota (in CPUs) of this process's cgroup and its parents: v2 `cpu.max`, v1 `cpu.cfs_*`."""
    proc, cgroup = proc or _PROC, cgroup or _CGROUP
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: walk from the process's group up to the root
            folder = cgroup / path.lstrip("/")
            while True:
                with contextlib.suppress(OSError, ValueError):
                    quota, period = (folder / "cpu.max").read_text().split()
                    if quota != "max":
                        quotas.append(int(quota) / int(period))
                if folder == cgroup or cgroup not in folder.parents:
                    break
                folder = folder.parent
        elif "cpu" in controllers.split(","):
            for folder in (cgroup / "cpu" / path.lstrip("/"), cgroup / "cpu,cpuacct" / path.lstrip("/")):
                with contextlib.suppress(OSError, ValueError):
                    quota_us = int((folder / "cpu.cfs_quota_us").read_text())
                    period_us = int((folder / "cpu.cfs_period_us").read_text())
                    if quota_us > 0:
                        quotas.append(quota_us / period_us)
    return min(quotas) if quotas else None


@functools.cache
def _quota() -> float | None:
    return _cgroup_quota()  # read once: a process's cgroup rarely changes


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, capped by whole CPUs of its cgroup quota."""
    affinity = _affinity()
    count = len(affinity) if affinity else (os.cpu_count() or 1)
    quota = _quota()
    if quota is not None:
        count = min(count, math.floor(quota))
    return max(1, count)


# ---------------------------------------------------------------- other processes' load
@dataclass(frozen=True)
class _Sample:
    wall: float  # time.monotonic()
    busy_ticks: int  # summed over the usable CPUs
    total_ticks: int
    cpus: int
    own_cpu_s: float  # time.process_time(): every thread of this process


def _read_stat(cpus: set[int] | None, proc: Path | None = None) -> tuple[int, int, int] | None:
    try:
        text = ((proc or _PROC) / "stat").read_text()
    except OSError:
        return None
    busy = total = count = 0
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        # user nice system idle iowait irq softirq steal [guest guest_nice: inside user]
        values = [int(v) for v in fields[:8]]
        total += sum(values)
        busy += total_busy(values)
        count += 1
    return (busy, total, count) if count else None


def total_busy(values: list[int]) -> int:
    """Busy ticks of one /proc/stat CPU line: all but idle and iowait (steal counts as busy)."""
    return sum(values) - values[3] - values[4]


def _runnable_others(cpus: int, proc: Path | None = None) -> float | None:
    proc = proc or _PROC
    try:
        running = int((proc / "loadavg").read_text().split()[3].split("/")[0])
        own = 0
        for task in (proc / "self" / "task").iterdir():
            with contextlib.suppress(OSError):
                stat = (task / "stat").read_text()
                own += stat[stat.rindex(")") + 2] == "R"
    except (OSError, ValueError, IndexError):
        return None
    online = os.cpu_count() or cpus
    return max(0, running - max(own, 1)) * min(1.0, cpus / online)


_lock = threading.Lock()
_last: _Sample | None = None
_last_others: float = 0.0
_active = 0  # forwards running now in this process


def other_load(cpus: set[int] | None = None, now: float | None = None) -> float:
    """CPUs' worth of work other processes do on `cpus`: from `/proc/stat` since the last call, else `/proc/loadavg`."""
    global _last, _last_others
    cpus = _affinity() if cpus is None else cpus
    now = time.monotonic() if now is None else now
    with _lock:
        last = _last
        if last is not None and now - last.wall < MIN_INTERVAL_S:
            return _last_others
        stat = _read_stat(cpus)
        own = time.process_time()
        if stat is None:
            return 0.0
        sample = _Sample(now, stat[0], stat[1], stat[2], own)
        if last is None or now - last.wall > STALE_AFTER_S or last.cpus != sample.cpus:
            others = _runnable_others(sample.cpus)
            others = 0.0 if others is None else others
        else:
            ticks = sample.total_ticks - last.total_ticks
            busy_cpus = (sample.busy_ticks - last.busy_ticks) / ticks * sample.cpus if ticks > 0 else 0.0
            own_cpus = (sample.own_cpu_s - last.own_cpu_s) / (sample.wall - last.wall)
            others = max(0.0, busy_cpus - own_cpus)
        _last, _last_others = sample, others
        return others


def choose_threads(ceiling: int, usable: int, others: float, running: int = 1) -> int:
    """`max(1, min(ceiling, usable, round(usable - others)) // running)`: free CPUs per running forward."""
    free = math.floor(usable - others + 0.5)
    return max(1, min(ceiling, usable, free) // max(1, running))


@contextlib.contextmanager
def forward_threads(device: torch.device) -> Iterator[int]:
    """Run the block with the policy's thread count.

    Off the CPU, nested, or under "torch" (but in a forked thread), do nothing.
    """
    global _active
    if device.type != "cpu" or getattr(_nesting, "depth", 0) > 0:
        yield torch.get_num_threads()
        return
    watch_forks()
    policy = thread_policy()
    forked = _forked_thread == threading.get_ident()
    if policy == "torch" and not forked:
        yield torch.get_num_threads()
        return
    before = torch.get_num_threads()
    with _lock:
        _active += 1
        running = _active
    try:
        if forked:
            chosen = 1  # the parent's OpenMP team is gone: never wait for it
        elif isinstance(policy, int):
            chosen = policy
        else:
            chosen = choose_threads(before, usable_cpus(), other_load(), running)
        if chosen != before:
            _use_threads(chosen, before)
        _nesting.depth, _nesting.torch_count = 1, before
        try:
            yield chosen
        finally:
            _nesting.depth = 0
            if chosen != before:
                torch.set_num_threads(before)  # this thread's count and the default: both torch's
    finally:
        with _lock:
            _active -= 1


def _use_threads(count: int, default: int) -> None:
    """Give the calling thread `count` threads. `set_num_threads` also sets the default: put `default` back."""
    torch.set_num_threads(count)
    if count != default:
        restore = threading.Thread(target=torch.set_num_threads, args=(default,), name="elmo-thread-count")
        restore.start()
        restore.join()


_watching = False
_forked_thread: int | None = None  # in a forked child: the thread that forked it


def watch_forks() -> None:
    """Install the fork hook once, at first use: a child's forking thread then runs with one thread."""
    global _watching
    if _watching or not hasattr(os, "register_at_fork"):
        return
    with _lock:
        if not _watching:
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _watching = True


def _after_fork_in_child() -> None:
    global _forked_thread, _lock, _active
    _forked_thread = threading.get_ident()
    _lock = threading.Lock()  # another thread of the parent may have held it: it does not exist here
    _active = 1 if getattr(_nesting, "depth", 0) > 0 else 0


_nesting = threading.local()


# ---------------------------------------------------------------- the two directions at once
SIDE_BY_SIDE_MIN_WEIGHTS = 1 << 20
"""Recurrent weights (4 * dim * projection_dim) from which the two LSTM directions run side by
side. The shipped 512/128's steps are too short for two threads (docs/results/speed-memory.md)."""

T = TypeVar("T")
U = TypeVar("U")


def directions_side_by_side(device: torch.device, recurrent_weights: int) -> int:
    """Threads per direction when the two LSTM directions should run at once, else 0.

    Only on the CPU, without autograd, for layers of `SIDE_BY_SIDE_MIN_WEIGHTS` or more.
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or torch.is_grad_enabled() or thread_policy() == "torch" or threads < 2:
        return 0
    return threads // 2 if recurrent_weights >= SIDE_BY_SIDE_MIN_WEIGHTS else 0


def run_side_by_side(first: Callable[[], T], second: Callable[[], U], threads: int) -> tuple[T, U]:
    """`(first(), second())`, `second` in a new thread with the caller's inference mode and CPU autocast."""
    inference = torch.is_inference_mode_enabled()
    autocast = torch.is_autocast_enabled("cpu")
    dtype = torch.get_autocast_dtype("cpu")
    before = torch.get_num_threads()
    default = getattr(_nesting, "torch_count", before)  # torch's count outside the forward
    results: list = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            _use_threads(threads, default)
            with torch.inference_mode(inference), torch.no_grad(), torch.autocast("cpu", dtype, enabled=autocast):
                results.append(second())
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            errors.append(err)

    worker = threading.Thread(target=work, name="elmo-backward-direction")
    worker.start()
    try:
        _use_threads(threads, default)
        with _nested():
            first_result = first()
    finally:
        worker.join()
        _use_threads(before, default)  # also MKL's count, which is per thread
    if errors:
        raise errors[0]
    return first_result, results[0]


@contextlib.contextmanager
def _nested() -> Iterator[None]:
    depth = getattr(_nesting, "depth", 0)
    _nesting.depth = depth + 1
    try:
        yield
    finally:
        _nesting.depth = depth


class CpuThreadRule:
    """The runtime's `ThreadRule` for a biLM's recurrence: `forward_threads`, and directions side by side."""

    def forward(self, device: torch.device) -> contextlib.AbstractContextManager:
        return forward_threads(device)

    def run_directions(
        self, device: torch.device, recurrent_weights: int
    ) -> Callable[[Callable[[], T], Callable[[], U]], tuple[T, U]] | None:
        """`run_side_by_side` with the threads chosen here, or None."""
        split = directions_side_by_side(device, recurrent_weights)
        if not split:
            return None
        return lambda first, second: run_side_by_side(first, second, split)


THREAD_RULE = CpuThreadRule()
"""The thread rule of every loader's `Recurrence`."""
