"""The fused kernels (`elmo_core.runtime.compiled`): compiled where torch.compile can build
them, torch's eager operators otherwise, with the same numbers."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from elmo_core.runtime import compiled as compiled_module
from elmo_core.runtime.compiled import fused_kernel, fused_rowwise

from .test_paired_bptt import _clip_free_lm, _loss_and_grads


def _no_compiler(fn):  # what torch.compile's first call raises without a C++ compiler
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
    monkeypatch.setattr(compiled_module.torch, "compile", lambda fn: builds.append(fn.__name__) or _no_compiler(fn))

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
    monkeypatch.setattr(compiled_module.torch, "compile", lambda fn: pytest.fail("compiled"))
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
    with pytest.raises(ValueError, match=r"^ELMO_COMPILE must be 0 .* or 1 .*; got 'false'\.$"):
        compiled_module.compile_enabled()
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    held = tmp_path / "held.txt"
    command = [exe, "data", "hold-out", str(tmp_path / "missing.txt"), "--out-kept", "k", "--out-held-out", str(held)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines()) == (
        2,
        ["error: ELMO_COMPILE must be 0 (torch's eager operators) or 1 (the fused kernels, the default); got 'false'."],
    )
    for setting in ("0", "1", ""):
        monkeypatch.setenv("ELMO_COMPILE", setting)
        assert compiled_module.compile_enabled() is (setting != "0")


def test_a_kernel_whose_recompilation_for_a_new_shape_fails_goes_on_eagerly(monkeypatch):
    # torch compiles a kernel again for a second size; a failure there used to end the run.
    monkeypatch.setattr(compiled_module, "_BUILD_FAILED", [], raising=False)

    def compiles_once(fn):
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
