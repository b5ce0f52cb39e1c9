"""The thread count of a biLM forward on the CPU: the free CPUs, never more than torch's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from elmo_core.model.characters import words_to_char_ids
from elmo_core.runtime import threads
from elmo_core.runtime.threads import choose_threads, forward_threads, set_thread_policy
from tests.conftest import rebuilt


@pytest.fixture
def policy():
    """Restore the process's policy and torch's count after each test."""
    before_policy, before_threads = threads.thread_policy(), torch.get_num_threads()
    yield
    set_thread_policy(before_policy)
    torch.set_num_threads(before_threads)


@pytest.mark.parametrize(
    ("ceiling", "usable", "others", "running", "expected"),
    [
        (2, 2, 0.0, 1, 2),  # idle machine: every CPU
        (2, 2, 1.0, 1, 1),  # a busy-looping process holds one core: one thread
        (2, 2, 0.67, 1, 1),  # the busy loop seen while our two threads shared its core
        (2, 2, 0.3, 1, 2),  # light background work: keep both
        (2, 2, 2.0, 1, 1),  # everything taken: still one
        (1, 2, 0.0, 1, 1),  # torch.set_num_threads(1) / OMP_NUM_THREADS=1 is never raised
        (16, 4, 0.0, 1, 4),  # affinity or quota of 4 CPUs on a 16-core machine
        (4, 4, 0.0, 2, 2),  # two forwards at once share the free CPUs
        (4, 4, 3.0, 2, 1),
    ],
)
def test_choose_threads_takes_the_free_cpus(ceiling, usable, others, running, expected):
    assert choose_threads(ceiling, usable, others, running) == expected


def _fake_proc(tmp_path: Path, running: int, own_states: list[str], cgroup: str = "0::/\n") -> Path:
    proc = tmp_path / "proc"
    (proc / "self" / "task").mkdir(parents=True)
    (proc / "loadavg").write_text(f"0.50 0.40 0.30 {running}/300 1234\n")
    for k, state in enumerate(own_states):
        (proc / "self" / "task" / str(k)).mkdir()
        (proc / "self" / "task" / str(k) / "stat").write_text(f"{k} (py thon) {state} 1 2 3\n")
    (proc / "self" / "cgroup").write_text(cgroup)
    return proc


def test_runnable_others_does_not_count_this_process(tmp_path, monkeypatch):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    # 3 runnable tasks now, 2 of them ours (the caller and a spinning OpenMP thread): 1 other.
    proc = _fake_proc(tmp_path, running=3, own_states=["R", "R", "S"])
    assert threads._runnable_others(2, proc) == 1.0
    # On a 16-CPU machine of which we may use 2, 8 others are 1 per 2 CPUs.
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 16)
    proc = _fake_proc(tmp_path / "b", running=9, own_states=["R", "S"])
    assert threads._runnable_others(2, proc) == 1.0


def test_other_load_from_proc_stat_subtracts_our_own_cpu_time(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    monkeypatch.setattr(threads, "_PROC", tmp_path)
    monkeypatch.setattr(threads, "_last", None)
    monkeypatch.setattr(threads, "_runnable_others", lambda cpus, proc=None: 0.0)
    own = iter([10.0, 10.5])  # this process used 0.5 CPU-seconds in the second
    monkeypatch.setattr(threads.time, "process_time", lambda: next(own))

    def write(busy0: int, busy1: int, total: int) -> None:
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        for k, busy in enumerate((busy0, busy1)):
            lines.append(f"cpu{k} {busy} 0 0 {total - busy} 0 0 0 0 0 0")
        stat.write_text("\n".join(lines) + "\n")

    write(1000, 1000, 5000)
    assert threads.other_load({0, 1}, now=100.0) == 0.0  # first look: runnable tasks (faked 0)
    write(1050, 1100, 5100)  # 1 s later (100 ticks per CPU): CPU 0 half busy, CPU 1 busy
    # 1.5 CPUs busy, 0.5 of it ours: others 1.0.
    assert threads.other_load({0, 1}, now=101.0) == pytest.approx(1.0)


def test_cgroup_v2_quota_caps_the_usable_cpus(tmp_path):
    proc = _fake_proc(tmp_path, 1, ["R"], cgroup="0::/job/step\n")
    cgroup = tmp_path / "cgroup"
    (cgroup / "job" / "step").mkdir(parents=True)
    (cgroup / "job" / "step" / "cpu.max").write_text("max 100000\n")
    (cgroup / "job" / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs, set on the parent
    assert threads._cgroup_quota(proc, cgroup) == pytest.approx(1.5)


def test_cgroup_v1_quota_and_no_quota(tmp_path):
    proc = _fake_proc(tmp_path, 1, ["R"], cgroup="2:cpu,cpuacct:/ci\n1:memory:/x\n")
    cgroup = tmp_path / "cgroup"
    (cgroup / "cpu,cpuacct" / "ci").mkdir(parents=True)
    (cgroup / "cpu,cpuacct" / "ci" / "cpu.cfs_quota_us").write_text("200000\n")
    (cgroup / "cpu,cpuacct" / "ci" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads._cgroup_quota(proc, cgroup) == pytest.approx(2.0)
    (cgroup / "cpu,cpuacct" / "ci" / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads._cgroup_quota(proc, cgroup) is None


def test_usable_cpus_follows_affinity_and_quota(monkeypatch):
    monkeypatch.setattr(threads, "_affinity", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(threads, "_quota", lambda: None)
    assert threads.usable_cpus() == 4
    monkeypatch.setattr(threads, "_quota", lambda: 1.5)
    assert threads.usable_cpus() == 1


def _forward_thread_count(model, sentences) -> list[int]:
    seen: list[int] = []
    handle = model.bilm.char_cnn.register_forward_hook(lambda *_: seen.append(torch.get_num_threads()))
    try:
        char_ids, mask = words_to_char_ids(sentences, model.options.char_cnn.max_characters_per_token)
        with torch.inference_mode():
            model.bilm(char_ids, mask)
    finally:
        handle.remove()
    return seen


def test_bilm_forward_runs_on_the_free_cpus_and_restores_torchs_count(tiny_elmo, sentences, policy, monkeypatch):
    tiny_elmo = rebuilt(tiny_elmo, token_cache_words=0)
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(threads, "other_load", lambda: 1.0)  # another process holds a core
    assert _forward_thread_count(tiny_elmo, sentences) == [1]
    assert torch.get_num_threads() == 2  # put back after the call
    monkeypatch.setattr(threads, "other_load", lambda: 0.0)
    assert _forward_thread_count(tiny_elmo, sentences) == [2]


def test_thread_policy_override(tiny_elmo, sentences, policy, monkeypatch):
    tiny_elmo = rebuilt(tiny_elmo, token_cache_words=0)
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "other_load", lambda: 1.0)
    set_thread_policy("torch")  # leave torch's count alone
    assert _forward_thread_count(tiny_elmo, sentences) == [2]
    set_thread_policy(3)
    assert _forward_thread_count(tiny_elmo, sentences) == [3]
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", ["fast", 0, -1, 1.5, True])
def test_thread_policy_rejects_bad_values(bad, policy):
    with pytest.raises(ValueError, match="'auto', 'torch' or a whole number of threads"):
        set_thread_policy(bad)


def test_forward_threads_leaves_other_devices_alone(policy, monkeypatch):
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "other_load", lambda: 1.0)
    with forward_threads(torch.device("meta")) as chosen:
        assert chosen == 2 == torch.get_num_threads()


def test_directions_side_by_side_give_the_sequential_vectors(sentences, policy, monkeypatch):
    from elmo_core import embed_sentences
    from tests.conftest import make_tiny_elmo

    model = make_tiny_elmo(token_cache_words=0)
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(threads, "other_load", lambda: 0.0)
    sequential = embed_sentences(model, sentences, layers="all")
    monkeypatch.setattr(threads, "SIDE_BY_SIDE_MIN_WEIGHTS", 0)  # the tiny model's layers qualify
    names: list[str] = []
    handle = model.bilm.backward_layers.register_forward_hook(
        lambda *_: names.append(threads.threading.current_thread().name)
    )
    side_by_side = embed_sentences(model, sentences, layers="all")
    handle.remove()
    assert names and all(name == "elmo-backward-direction" for name in names)
    for a, b in zip(sequential, side_by_side):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert torch.get_num_threads() == 2


def test_a_bad_ELMO_THREADS_fails_at_first_use_and_is_one_line_from_the_cli(tmp_path):
    # Not at import: `import elmo_core` works, and the command says what is wrong in one line.
    import subprocess
    import sys

    env = {**os.environ, "ELMO_THREADS": "bogus"}
    imported = subprocess.run([sys.executable, "-c", "import elmo_core"], capture_output=True, text=True, env=env)
    assert imported.returncode == 0, imported.stderr
    text = tmp_path / "in.txt"
    text.write_text("a b\n", encoding="utf-8")
    elmo = Path(sys.executable).parent / "elmo"
    ran = subprocess.run([elmo, "embed", text, tmp_path / "out.h5"], capture_output=True, text=True, env=env)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        "error: ELMO_THREADS must be 'auto' (follow the free CPUs), 'torch' (keep torch's own setting) or a whole "
        "number of threads >= 1; got 'bogus'. Set it to one of those, or unset it (empty means unset: auto)."
    ]
    assert not (tmp_path / "out.h5").exists()


def _thread_started_during(run, start_inside) -> int:
    """torch's count of a thread whose first torch work ran during `run()`, read after it returned.

    `start_inside` is patched (by the caller) to call the returned `start` hook: the thread
    starts there, does its first parallel torch work at once, and waits until `run()` has
    returned before doing its own work and reading its count (a server's pool growing
    while a forward runs).
    """
    started = threads.threading.Event()
    finished = threads.threading.Event()
    counts: list[int] = []

    def worker() -> None:
        torch.ones(1 << 20).sum()  # its first parallel region: torch reads the count in force now
        started.set()
        finished.wait(60)
        torch.ones(256, 256) @ torch.ones(256, 256)
        counts.append(torch.get_num_threads())

    workers: list[threads.threading.Thread] = []

    def start() -> None:
        if not workers:
            workers.append(threads.threading.Thread(target=worker))
            workers[0].start()
            assert started.wait(60)

    start_inside(start)
    run()
    finished.set()
    workers[0].join(60)
    assert counts, "the thread started during the forward never ran"
    return counts[0]


def test_threads_started_during_a_forward_keep_torchs_count_afterwards(tiny_elmo, sentences, policy, monkeypatch):
    from elmo_core import embed_sentences
    from elmo_core.model.bilm import BiLM

    torch.set_num_threads(3)  # torch's own count; the policy runs every forward with 1
    set_thread_policy(1)
    inner = BiLM._forward

    def start_inside(start):
        def forward(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            start()
            return inner(self, *args, **kwargs)

        monkeypatch.setattr(BiLM, "_forward", forward)

    count = _thread_started_during(lambda: embed_sentences(tiny_elmo, sentences), start_inside)
    assert count == 3, f"a thread started during a biLM forward has {count} torch threads, not torch's 3"
    assert torch.get_num_threads() == 3


def test_threads_started_while_the_directions_run_side_by_side_keep_torchs_count(sentences, policy, monkeypatch):
    from elmo_core import embed_sentences
    from tests.conftest import make_tiny_elmo

    model = make_tiny_elmo(token_cache_words=0)
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(threads, "other_load", lambda: 0.0)
    monkeypatch.setattr(threads, "SIDE_BY_SIDE_MIN_WEIGHTS", 0)  # the tiny model's layers qualify

    def start_inside(start):
        model.bilm.forward_layers.register_forward_pre_hook(lambda *_: start())

    count = _thread_started_during(lambda: embed_sentences(model, sentences), start_inside)
    assert count == 2, f"a thread started while the directions ran side by side has {count} torch threads, not 2"
    assert torch.get_num_threads() == 2


_FORK_HOOKS = """
import os, sys
hooks = []
register = os.register_at_fork
def recording(**kwargs):
    hooks.extend(f.__module__ for f in kwargs.values())
    register(**kwargs)
os.register_at_fork = recording
import elmo_core, hf_elmo, spacy_elmo, spacy
spacy.blank("en")
ours = lambda: [m for m in hooks if (m or "").split(".")[0] in ("elmo_core", "spacy_elmo", "hf_elmo")]
print("after import:", ours())
elmo = elmo_core.load_elmo(sys.argv[1])
print("after first use:", ours())
"""


def test_importing_the_plugins_installs_no_fork_hook_until_first_use(tmp_path):
    import subprocess
    import sys

    from elmo_core import save_model_folder
    from tests.conftest import make_tiny_elmo

    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    done = subprocess.run(
        [sys.executable, "-c", _FORK_HOOKS, str(tmp_path / "model")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "after import: []", lines
    assert lines[1] == "after first use: ['elmo_core.runtime.threads']", lines


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_runs_the_library_on_one_thread_and_keeps_torchs_count(policy):
    threads.watch_forks()  # what the first load or forward does
    torch.set_num_threads(2)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the library's count in the forking thread, torch's count, then leave at once
        try:
            with forward_threads(torch.device("cpu")) as chosen:
                inside = torch.get_num_threads()
            os.write(write, f"{chosen} {inside} {torch.get_num_threads()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    report = os.read(read, 64).decode()
    os.close(read)
    assert report == "1 1 2"  # one thread inside the library's work, the user's 2 outside it
    set_thread_policy(2)
    with forward_threads(torch.device("cpu")) as chosen:
        assert chosen == 2  # the parent is not a forked child
