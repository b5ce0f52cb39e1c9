"""transformers' own common model/config tests against our classes, from the sdist of the installed version.

`.ci/run` fetches the sdist and sets `TRANSFORMERS_SDIST`; without it (a user's clone, offline)
the run skips, saying how to run it. The checks of the runner itself always run.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from .transformers_common import run_transformers_common_tests as runner

REPO = Path(__file__).resolve().parents[2]
SDIST_ENV = "TRANSFORMERS_SDIST"


def test_transformers_common_model_and_config_tests_pass():
    sdist = os.environ.get(SDIST_ENV)
    if not sdist:
        pytest.skip(
            f"set {SDIST_ENV} to the source distribution (.tar.gz) of the installed transformers to run its "
            "common tests against ElmoModel and its task models; fetch it with `python -m "
            "tests.hf_elmo.transformers_common.run_transformers_common_tests --fetch DIR` "
            "(see CONTRIBUTING.md, transformers' common model tests)"
        )
    module = "tests.hf_elmo.transformers_common.run_transformers_common_tests"
    done = subprocess.run([sys.executable, "-m", module, sdist], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
    assert "every skip explained by skips.py" in done.stdout


def test_a_skip_no_entry_explains_fails_the_run():
    outcomes = {"test_save_load": "passed", "test_inputs_embeds": "skipped", "test_new_thing": "skipped"}
    problems = runner.check_outcomes(outcomes, skips={"test_inputs_embeds": "why"}, not_applicable={})
    assert len(problems) == 1 and problems[0].startswith("test_new_thing was skipped")


def test_a_pattern_explains_each_variant_of_a_parametrized_test():
    outcomes = {"test_rope_0_linear": "skipped", "test_rope_1_yarn": "skipped"}
    assert runner.check_outcomes(outcomes, skips={}, not_applicable={"test_rope_*": "no rotary embedding"}) == []


def test_an_entry_naming_no_collected_test_fails_the_run():
    outcomes = {"test_inputs_embeds": "skipped"}
    lists = {"skips": {"test_inputs_embeds": "why", "test_gone": "why"}, "not_applicable": {}}
    problems = runner.check_outcomes(outcomes, **lists)
    assert problems == ["SKIPS['test_gone'] names no collected test (renamed or dropped?): remove it"]
    assert runner.check_outcomes(outcomes, complete=False, **lists) == []  # a -k run collects a part only


def test_a_not_applicable_test_that_ran_fails_the_run_but_a_hardware_one_may_run():
    outcomes = {"test_sliding_window_mask": "passed", "test_cpu_offload": "passed"}
    listed = runner.check_outcomes(outcomes, skips={}, not_applicable={"test_sliding_window_mask": "no attention"})
    assert listed == ["NOT_APPLICABLE['test_sliding_window_mask'] matches a test that ran: remove it, the test applies"]
    hardware = runner.check_outcomes(outcomes, skips={}, not_applicable={}, needs_hardware={"test_cpu_offload": "gpu"})
    assert hardware == []


def _fake_sdist(path: Path, version: str) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in {"PKG-INFO": f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n"}.items():
            data = text.encode()
            member = tarfile.TarInfo(f"transformers-{version}/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


def test_an_sdist_of_another_transformers_version_is_refused(tmp_path):
    sdist = _fake_sdist(tmp_path / "transformers-0.0.1.tar.gz", "0.0.1")
    assert runner.sdist_version(sdist) == "0.0.1"
    with pytest.raises(SystemExit, match=rf"is transformers 0\.0\.1, but {runner.installed_version()} is installed"):
        runner.unpack(sdist, tmp_path / "package")
    assert not (tmp_path / "package").exists()
