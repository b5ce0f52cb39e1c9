"""transformers' own common model/config tests against our classes (opt-in: needs transformers' sdist)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).parent / "transformers_common" / "run_transformers_common_tests.py"


def test_transformers_common_model_and_config_tests_pass():
    sdist = os.environ.get("TRANSFORMERS_SDIST")
    if not sdist:
        pytest.skip(
            "set TRANSFORMERS_SDIST to transformers' source distribution (.tar.gz) of the installed version to "
            f"run its common tests against ElmoModel/ElmoForTokenClassification; see {RUNNER.name}"
        )
    pytest.importorskip(
        "parameterized", reason="transformers' common tests import parameterized: pip install parameterized"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(RUNNER), sdist], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
