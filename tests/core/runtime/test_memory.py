"""Memory of one process: weights held once, freed heap handed back, peak flat in the input size.

Each measurement runs in a fresh process and reads its own `ru_maxrss` (`os.wait4`), so
nothing else this test session allocated counts.
"""

from __future__ import annotations

import gc
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from elmo_core import PUBLISHED_OPTIONS, Elmo, load_model_folder, save_bilm_tf, save_model_folder
from elmo_core.runtime import memory
from tests.conftest import data_file, make_tiny_elmo, missing_data

BIN = Path(sys.executable).parent
SHARD = data_file("lm/enwiki2015/train/train-01.txt.xz")


# Runs the command and prints its own peak RSS. It must be a fresh, small process: a
# process started straight from this one (vfork + exec) inherits this process's peak as
# its ru_maxrss, which would hide the measured command's own.
_MEASURE = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "p.returncode = os.waitstatus_to_exitcode(status)\n"
    "print(p.returncode, usage.ru_maxrss)\n"
)


def peak_rss_mib(command: list[str]) -> float:
    """Run `command` to completion in a fresh process; its own peak resident size in MiB."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=1800,
    )
    returncode, peak = done.stdout.split()
    assert returncode == "0", done.stderr
    return int(peak) / 2**20 if sys.platform == "darwin" else int(peak) / 2**10


def least_peak_rss_mib(command: list[str], runs: int = 3) -> float:
    """The least of `runs` peak resident sizes of `command`: what it needs, without the noise.

    Transient allocations and file pages touched through mmap only ever add to a peak: the
    same model-folder load measured 9.8 to 12.7 MiB above the built model in four runs, and
    16.3 once during a full test run, so a single run made the 16 MiB bound flaky.
    """
    return min(peak_rss_mib(command) for _ in range(runs))


def test_loading_holds_each_weight_once(tmp_path):
    # The small published shape: 13.6M parameters, 52 MiB of float32.
    options = PUBLISHED_OPTIONS["small"]
    torch.manual_seed(0)
    elmo = Elmo(options, dropout=0.0)
    weights_mib = sum(p.numel() for p in elmo.parameters()) * 4 / 2**20
    save_bilm_tf(elmo, tmp_path / "weights.hdf5")
    data = options.to_dict()
    (tmp_path / "options.json").write_text(json.dumps({k: data[k] for k in ("lstm", "char_cnn")}), encoding="utf-8")
    save_model_folder(elmo, tmp_path / "model")
    del elmo
    load = "from pathlib import Path; from elmo_core.apps.cli.shared import load_model; load_model({})"
    # A process that only builds the model holds each weight once, by construction.
    built = least_peak_rss_mib(
        [
            sys.executable,
            "-c",
            "import elmo_core.apps.cli, h5py, safetensors; from elmo_core import Elmo, "
            "PUBLISHED_OPTIONS; Elmo(PUBLISHED_OPTIONS['small'])",
        ]
    )
    from_folder = least_peak_rss_mib(
        [sys.executable, "-c", load.format(f"Path({str(tmp_path / 'model')!r}), None, None")]
    )
    from_hdf5 = least_peak_rss_mib(
        [
            sys.executable,
            "-c",
            load.format(f"None, Path({str(tmp_path / 'options.json')!r}), Path({str(tmp_path / 'weights.hdf5')!r})"),
        ]
    )
    # Loading adds only a few read blocks of 4 MiB; a second copy of the weights (52 MiB,
    # as safetensors' load_file + load_state_dict made) or of the largest tensors (16 MiB,
    # as reading whole hdf5 datasets did) would not fit.
    for name, peak in (("model folder", from_folder), ("hdf5", from_hdf5)):
        assert peak - built < 16, (
            f"{name}: {peak - built:.0f} MiB more than the built model ({weights_mib:.0f} MiB of weights)"
        )


GLIBC = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere release_free_memory does nothing")
def test_release_free_memory_hands_freed_heap_pages_back():
    # 1,000 blocks of 100 kB (below glibc's mmap threshold, so on the heap); every other
    # one freed leaves holes between live blocks that glibc keeps until trimmed.
    code = (
        "import ctypes, os\n"
        "from elmo_core.runtime.memory import release_free_memory\n"
        "def rss(): return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20\n"
        "blocks = [ctypes.create_string_buffer(100_000) for _ in range(1000)]\n"
        "del blocks[::2]\n"
        "before = rss(); released = release_free_memory(); after = rss()\n"
        "print(released, before - after)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "True"
    assert float(out[1]) > 30, f"only {out[1]} MiB of the ~48 MiB freed came back"


@pytest.mark.slow
@pytest.mark.skipif(not SHARD.is_file(), reason=missing_data("lm/enwiki2015/train/train-01.txt.xz"))
def test_embed_peak_memory_is_flat_in_the_input_size(tmp_path):
    """`elmo embed` on 1M tokens peaks within 10% of its peak on 100k tokens (issue 16)."""
    peaks = {}
    for count in (100_000, 1_000_000):
        path = tmp_path / f"{count}.txt"
        total = 0
        with lzma.open(SHARD, "rt", encoding="utf-8") as lines, open(path, "w", encoding="utf-8") as out:
            for line in lines:
                if total >= count:
                    break
                out.write(line)
                total += len(line.split())
        peaks[count] = peak_rss_mib(
            [str(BIN / "elmo"), "embed", str(path), str(tmp_path / "o.hdf5"), "--layers", "top", "--no-progress"]
        )
        (tmp_path / "o.hdf5").unlink()
    assert peaks[1_000_000] <= 1.10 * peaks[100_000], peaks


def test_the_elmo_command_keeps_training_blocks_in_the_heap(monkeypatch):
    import elmo_core.apps.cli as cli
    from elmo_core.runtime.memory import MMAP_THRESHOLD

    calls = []
    monkeypatch.setattr(cli, "use_mmap_for_large_blocks", lambda t: calls.append(("mmap", t)))
    monkeypatch.setattr(cli, "use_heap_for_every_block", lambda: calls.append(("heap", None)))
    monkeypatch.setattr(cli, "app", lambda: None)
    for argv in (["elmo", "train", "--resume", "run/checkpoint.pt"], ["elmo", "embed", "in.txt", "out.hdf5"]):
        monkeypatch.setattr(sys, "argv", argv)
        cli.main()
    assert calls == [("heap", None), ("mmap", MMAP_THRESHOLD)]


_WHERE_A_LARGE_BLOCK_LIVES = """
import sys, torch
from elmo_core.runtime.memory import use_heap_for_every_block
if sys.argv[1] == "heap":
    assert use_heap_for_every_block()
block = torch.empty(64 * 1024 * 1024, dtype=torch.uint8)  # twice glibc's largest mmap threshold
address = block.data_ptr()
for line in open("/proc/self/maps"):
    span, rest = line.split(" ", 1)
    low, high = (int(x, 16) for x in span.split("-"))
    if low <= address < high:
        print("heap" if rest.rstrip().endswith("[heap]") else "mapping")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc/self/maps are Linux's")
@pytest.mark.parametrize("setting", ["heap", "default"])
def test_a_block_over_glibcs_largest_mmap_threshold_comes_from_the_heap_only_when_asked(setting):
    # glibc maps any block over 32 MiB on its own, whatever M_MMAP_THRESHOLD says; the
    # training setting keeps it in the heap, whose pages stay mapped from step to step.
    out = subprocess.run(
        [sys.executable, "-c", _WHERE_A_LARGE_BLOCK_LIVES, setting], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["heap" if setting == "heap" else "mapping"]


def test_a_dropped_model_hands_its_heap_back_once_collected(monkeypatch, tmp_path):
    # Loaded, used in a reference cycle (as a spaCy pipeline holds it), dropped: the collection
    # that frees it ends with a trim, with no call from the user.
    if memory._MALLOC_TRIM is None:
        pytest.skip("no glibc: nothing to hand back")
    save_model_folder(make_tiny_elmo(), tmp_path)
    trims = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: trims.append(1) or True)
    holder: dict = {"model": load_model_folder(tmp_path)}
    holder["self"] = holder  # a cycle: only the collector frees it
    gc.collect()
    trims.clear()
    del holder
    gc.collect()
    assert trims == [1]
    gc.collect()
    assert trims == [1]  # once per freed model, not per collection
