"""The benchmark scripts are modules of one package that share `benchmarks.common` (no sys.path tricks)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "benchmarks").glob("bench_*.py"))


def _imports(path: Path) -> list[str]:
    """The module names a file imports (`from X import ...` gives X, `import X.Y` gives X.Y)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def _private_core_names(path: Path) -> list[str]:
    """`_name`s a file imports from elmo_core (the library's internals, which may change any day)."""
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("elmo_core")
        for alias in node.names
        if alias.name.startswith("_") and alias.name != "__version__"
    ]


def test_benchmarks_import_only_the_shared_module_and_the_core():
    """The core's public API or the module of a concept (its layers re-export nothing), never a private name."""
    assert len(SCRIPTS) >= 10
    wrong = {
        script.name: name
        for script in SCRIPTS
        for name in _imports(script)
        if name.startswith("bench_")  # a sibling script through sys.path
        or (name.startswith("benchmarks") and name != "benchmarks.common")  # scripts never import each other
    }
    assert wrong == {}
    assert {script.name: _private_core_names(script) for script in SCRIPTS if _private_core_names(script)} == {}


def test_every_benchmark_imports_as_a_module_of_the_package():
    modules = ", ".join(f"benchmarks.{script.stem}" for script in SCRIPTS)
    done = subprocess.run([sys.executable, "-c", f"import {modules}"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_bench_train_pairs_each_repeats_new_and_old_runs():
    from benchmarks.bench_train import paired_ratios

    each = {
        ("default", "bf16", "old"): [2000.0, 1000.0, 4000.0],
        ("default", "bf16", "new"): [6000.0, 3500.0, 10000.0],
        ("default", "fp32", "new"): [5000.0],  # no old run: no ratio
    }
    assert paired_ratios(each) == {("default", "bf16"): [3.0, 3.5, 2.5]}


def test_bench_train_softmax_input_dtype_is_what_autocast_gives_log_softmax_on_the_device():
    # On CUDA it is float32 (log_softmax is on CUDA autocast's float32 list); not testable here.
    import torch

    from benchmarks.bench_train import autocast_log_softmax_dtype

    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert autocast_log_softmax_dtype(torch.device("cpu")) == torch.bfloat16
        assert torch.log_softmax(torch.zeros(1, 2, dtype=torch.bfloat16), dim=-1).dtype == torch.bfloat16


def test_bench_precision_fraction_is_the_bilm_rate_over_the_mean_of_the_gemm_rates_around_it():
    from benchmarks.bench_precision import Run

    run = Run(
        "bf16",
        tokens=900,
        positions=1000,
        seconds=2.0,
        gemm_before=300.0,
        gemm_after=500.0,
        flops_per_position=int(2e8),
    )
    assert run.tokens_per_second == 450.0
    assert run.gflops == 100.0  # 2e8 FLOP x 1000 positions / 2 s
    assert run.fraction == 0.25  # 100 / mean(300, 500)


def test_bench_precision_runs_every_precision_in_turn_on_a_tiny_model():
    from benchmarks.bench_precision import models_for, rounds
    from benchmarks.common import flops_per_position
    from elmo_core.model.precision import cpu_bf16_support

    from .conftest import make_tiny_elmo

    precisions = ["fp32", "int8"] + (["bf16"] if cpu_bf16_support() else [])
    model = make_tiny_elmo()
    sentences = [["a", "tiny", "run"], ["of", "two", "sentences", "."]]
    runs = rounds(models_for(model, precisions), sentences, batch_tokens=64, count=2, gemm=(32, 0.01))
    assert [r.precision for r in runs] == precisions * 2
    assert {(r.tokens, r.positions, r.flops_per_position) for r in runs} == {(7, 11, flops_per_position(model.options))}
    assert all(r.seconds > 0 and r.gemm_before > 0 and r.gemm_after > 0 for r in runs)


def test_bench_precision_cosines_are_one_where_int8_leaves_a_layer_in_fp32():
    from benchmarks.bench_precision import cosine_table
    from elmo_core import quantize_int8

    from .conftest import make_tiny_elmo

    model = make_tiny_elmo()
    table = cosine_table({"fp32": model, "int8": quantize_int8(model)}, [["a", "b", "c"], ["x", "y"]], 64)
    rows = [line.split() for line in table.splitlines()[2:]]
    assert [row[:2] for row in rows] == [["int8", "0"], ["int8", "1"], ["int8", "2"], ["int8", "all"]]
    assert rows[0][2:] == ["1.00000", "1.00000"]  # layer 0 stays float32 under int8
    assert all(0.9 < float(row[3]) <= float(row[2]) <= 1.0 for row in rows)
