"""The fused kernels (`elmo_core.model.kernels`): compiled where torch.compile can build
them, torch's eager operators otherwise, with the same numbers."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from elmo_core.apps.cli import process as process_module
from elmo_core.model import kernels as compiled_module
from elmo_core.model.kernels import fused_kernel, fused_rowwise
from tests.core.model.recurrence.test_paired_bptt import _clip_free_lm, _loss_and_grads


def _no_compiler(fn, **options):  # what torch.compile's first call raises without a C++ compiler
    def call(*args):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    return call


def test_a_kernel_torch_cannot_compile_warns_once_and_runs_eagerly(monkeypatch):
    monkeypatch.setattr(compiled_module, "_BUILD_FAILED", [], raising=False)
    monkeypatch.setattr(compiled_module.torch, "compile", _no_compiler)
    calls = []

    @fused_kernel
    def double(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return 2 * x

    with pytest.warns(RuntimeWarning, match="could not build the fused kernel.*InvalidCxxCompiler"):
        first = double(torch.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call neither compiles again nor warns again
        second = double(torch.ones(2))
    assert first.tolist() == [2.0, 2.0, 2.0] and second.tolist() == [2.0, 2.0]
    assert calls == [3, 2]


def test_without_a_compiler_a_run_warns_once_and_builds_no_other_kernel(monkeypatch):
    # A training step has four fused kernels; without a C++ compiler each used to try its own
    # build and warn on its own (four warnings in one `elmo train`).
    monkeypatch.setattr(compiled_module, "_BUILD_FAILED", [], raising=False)
    builds = []
    monkeypatch.setattr(
        compiled_module.torch, "compile", lambda fn, **_: builds.append(fn.__name__) or _no_compiler(fn)
    )

    @fused_kernel
    def double(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    @fused_rowwise(block_rows=2)
    def row_sums(x: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(x.sum(dim=1))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        doubled = double(torch.ones(3))
        out = torch.empty(3)
        row_sums(torch.ones(3, 2), out)
    assert [str(w.message).split(" (")[0].rsplit(".", 1)[-1] for w in caught] == ["double"]
    assert builds == ["double"]  # the second kernel went straight to the eager operators
    assert doubled.tolist() == [2.0, 2.0, 2.0] and out.tolist() == [2.0, 2.0, 2.0]


def test_elmo_compile_0_runs_the_eager_operators_without_compiling(monkeypatch):
    monkeypatch.setenv("ELMO_COMPILE", "0")
    monkeypatch.setattr(compiled_module.torch, "compile", lambda fn, **options: pytest.fail("compiled"))
    blocks = []

    @fused_rowwise(block_rows=4)
    def row_sums(x: torch.Tensor, out: torch.Tensor) -> None:
        blocks.append(x.shape[0])
        out.copy_(x.sum(dim=1))

    x = torch.arange(30.0).view(10, 3)
    out = torch.empty(10)
    row_sums(x, out)
    assert blocks == [4, 4, 2]  # eager: blocks of block_rows rows, the last one partial
    assert out.tolist() == x.sum(dim=1).tolist()


def test_a_rowwise_kernel_compiled_gives_the_eager_formulas_numbers(monkeypatch):
    monkeypatch.setenv("ELMO_COMPILE", "1")

    @fused_rowwise(block_rows=4)
    def log_sum_exp(x: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(torch.logsumexp(x.float(), dim=1))

    x = torch.randn(37, 301, generator=torch.Generator().manual_seed(0)).bfloat16()
    out = torch.empty(37)
    log_sum_exp(x, out)
    torch.testing.assert_close(out, torch.logsumexp(x.float(), dim=1), atol=1e-5, rtol=1e-6)


def test_the_training_step_gives_the_same_loss_and_gradients_compiled_and_eager(monkeypatch):
    lm = _clip_free_lm()
    results = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("ELMO_COMPILE", setting)
        results[setting] = _loss_and_grads(lm, "auto")
    (loss_c, grads_c), (loss_e, grads_e) = results["1"], results["0"]
    torch.testing.assert_close(loss_c, loss_e, atol=1e-6, rtol=1e-6)
    for name, g in grads_e.items():
        torch.testing.assert_close(grads_c[name], g, atol=1e-6, rtol=1e-5, msg=name)


def test_an_elmo_compile_other_than_0_or_1_is_refused_in_one_line_before_any_work(monkeypatch, tmp_path):
    # "false" used to compile (only "0" chose the eager operators).
    monkeypatch.setenv("ELMO_COMPILE", "false")
    with pytest.raises(
        ValueError, match=r"^ELMO_COMPILE must be 0 .* or 1 .*; got 'false'\. .*\(empty means unset: 1\)\.$"
    ):
        compiled_module.compile_enabled()
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    held = tmp_path / "held.txt"
    command = [exe, "data", "hold-out", str(tmp_path / "missing.txt"), "--out-kept", "k", "--out-held-out", str(held)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines()) == (
        2,
        [
            "error: ELMO_COMPILE must be 0 (torch's eager operators) or 1 (the fused kernels, the default); "
            "got 'false'. Set it to one of those, or unset it (empty means unset: 1)."
        ],
    )
    for setting in ("0", "1", ""):
        monkeypatch.setenv("ELMO_COMPILE", setting)
        assert compiled_module.compile_enabled() is (setting != "0")


def test_a_kernel_whose_recompilation_for_a_new_shape_fails_goes_on_eagerly(monkeypatch):
    # torch compiles a kernel again for a second size; a failure there used to end the run.
    monkeypatch.setattr(compiled_module, "_BUILD_FAILED", [], raising=False)

    def compiles_once(fn, **options):
        def call(x):
            if x.shape[0] != 3:
                raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")
            return fn(x)

        return call

    monkeypatch.setattr(compiled_module.torch, "compile", compiles_once)

    @fused_kernel
    def double(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    assert double(torch.ones(3)).tolist() == [2.0] * 3
    with pytest.warns(RuntimeWarning, match="could not build the fused kernel"):
        assert double(torch.ones(2)).tolist() == [2.0] * 2
    assert compiled_module._BUILD_FAILED == [double.__qualname__]


# ---------------------------------------------------------------- the compile cache folder (R60)
CACHE_SCRIPT = """
import os, sys, warnings
import torch
from elmo_core.apps.cli.process import use_writable_compile_cache
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    use_writable_compile_cache()
spare = os.environ["TORCHINDUCTOR_CACHE_DIR"]
torch.optim.Adam([torch.zeros(2, requires_grad=True)])  # loads torch's compiler, which makes its cache folder
print(spare)
for warning in caught:
    print(f"{warning.category.__name__}: {warning.message}")
"""


def test_a_compile_cache_folder_that_cannot_be_written_is_replaced_by_a_temporary_one_with_a_warning(tmp_path):
    (tmp_path / "a_file").write_text("not a folder\n")
    cache = tmp_path / "a_file" / "inductor"  # cannot be created, as on a read-only file system
    env = {**__import__("os").environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "ELMO_COMPILE": "1"}
    done = subprocess.run([sys.executable, "-c", CACHE_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    spare, *warned = done.stdout.splitlines()
    assert Path(spare) != cache and not Path(spare).exists()  # used, then deleted at exit
    assert len(warned) == 1 and warned[0].startswith("RuntimeWarning: the compile cache folder "), done.stdout
    assert f"{cache} (TORCHINDUCTOR_CACHE_DIR) is not writable (Not a directory)" in warned[0]
    assert "ELMO_COMPILE=0 to train without compiling" in warned[0]


def test_a_writable_compile_cache_folder_is_left_as_set(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        process_module.use_writable_compile_cache()
    assert compiled_module.os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache")
    assert (tmp_path / "cache").is_dir()


def test_no_writable_folder_for_the_compile_cache_is_one_error_naming_the_variable(tmp_path, monkeypatch):
    from elmo_core import ElmoError

    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "a_file" / "cache"))

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(compiled_module.tempfile, "mkdtemp", read_only)
    with pytest.raises(ElmoError) as caught:
        process_module.use_writable_compile_cache()
    message = str(caught.value)
    assert "\n" not in message and "(TORCHINDUCTOR_CACHE_DIR) is not writable" in message
    assert "set TORCHINDUCTOR_CACHE_DIR to a writable folder" in message


def test_a_kernel_whose_cache_file_cannot_be_written_names_the_compile_cache(monkeypatch):
    monkeypatch.setattr(compiled_module, "_BUILD_FAILED", [], raising=False)

    def read_only_cache(fn, **options):
        def call(*args):
            raise OSError(30, "Read-only file system")

        return call

    monkeypatch.setattr(compiled_module.torch, "compile", read_only_cache)

    @fused_kernel
    def double(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    with pytest.warns(RuntimeWarning, match="Set TORCHINDUCTOR_CACHE_DIR to a writable folder") as caught:
        assert double(torch.ones(2)).tolist() == [2.0, 2.0]
    assert "C++ compiler" not in str(caught[0].message)
