"""Run transformers' own common model/config tests against ElmoModel and its task models.

transformers' `ModelTesterMixin` (tests/test_modeling_common.py) and `ConfigTester`
(tests/test_configuration_common.py) check the generic contract every model keeps. They
ship only in transformers' source distribution (sdist), so the default suite runs them
only when `TRANSFORMERS_SDIST` names one (`.ci/run` fetches it). By hand, from the
repository root:

    .venv/bin/python -m tests.hf_elmo.transformers_common.run_transformers_common_tests [SDIST] [-- pytest args]

Without SDIST it fetches the sdist of the installed transformers version with
`pip download --no-deps --no-binary :all: transformers==<version>` into a temporary folder;
`--fetch DIR` only fetches it into DIR and prints its path. An sdist of another version
than the installed one is refused.

The script unpacks the two test files (and nothing else of transformers) into a temporary
package, adds `elmo_common.py` (our model tester) and `skips.py` (every test that does not
run, each with its reason), runs pytest there, and then checks the run against `skips.py`:
a skip no entry explains, or an entry that names no collected test, fails the run. Three
modules the test files import are not in the sdist and are replaced by stand-ins:

- `exporters/test_export.py` (`ExportTesterMixin`): an empty mixin; torch.export tests
  do not apply to ELMo's data-dependent LSTM loop.
- `generation/test_utils.py` (`GenerationTesterMixin`): an empty mixin; ELMo does not
  generate text.
- `utils/test_configuration_utils.py` (`config_common_kwargs`): a few of the common
  config keys with non-default values, for `check_config_arguments_init`.

Nothing of transformers is copied into this repository; the temporary folder is removed.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from .skips import NEEDS_HARDWARE, NOT_APPLICABLE, SKIPS

HERE = Path(__file__).resolve().parent
NEEDED = ("tests/test_modeling_common.py", "tests/test_configuration_common.py")
STANDINS = {
    "exporters/__init__.py": "",
    "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
    "generation/__init__.py": "",
    "generation/test_utils.py": "class GenerationTesterMixin:\n    pass\n",
    "utils/__init__.py": "",
    "utils/test_configuration_utils.py": (
        "config_common_kwargs = {\n"
        '    "return_dict": False,\n'
        '    "output_hidden_states": True,\n'
        '    "dtype": "float16",\n'
        '    "architectures": ["ElmoModel"],\n'
        '    "id2label": {0: "O", 1: "B-PER"},\n'
        "}\n"
    ),
}


def installed_version() -> str:
    """The installed transformers version (read from its package metadata, without importing it)."""
    from importlib.metadata import version

    return version("transformers")


def fetch_sdist(dest: Path) -> Path:
    """Download the sdist of the installed transformers version into `dest` with pip.

    Raises:
        SystemExit: pip could not fetch it (no package index reachable, or no sdist published).
    """
    wanted = installed_version()
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
    done = subprocess.run([*command, f"transformers=={wanted}", "-d", str(dest)], capture_output=True, text=True)
    found = sorted(dest.glob(f"transformers-{wanted}.tar.gz"))
    if done.returncode != 0 or not found:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(
            f"pip could not fetch the source distribution of transformers=={wanted} ({said}); "
            "give the path of transformers-<version>.tar.gz instead"
        )
    return found[0]


def sdist_version(sdist: Path) -> str:
    """The `Version:` in an sdist's PKG-INFO (a .tar.gz, or its unpacked folder)."""
    if sdist.is_dir():
        text = (sdist / "PKG-INFO").read_text(encoding="utf-8")
    else:
        with tarfile.open(sdist) as archive:
            member = next((m for m in archive.getmembers() if Path(m.name).parts[1:] == ("PKG-INFO",)), None)
            if member is None:
                raise SystemExit(f"{sdist} has no PKG-INFO; give transformers' source distribution (.tar.gz)")
            text = archive.extractfile(member).read().decode("utf-8")  # type: ignore[union-attr]
    match = re.search(r"^Version: *(\S+)", text, re.MULTILINE)
    return match.group(1) if match else "unknown"


def unpack(sdist: Path, package: Path) -> None:
    """Copy the two common test files from an sdist of the installed version, with our tester and stand-ins.

    Raises:
        SystemExit: the sdist is of another transformers version, or lacks the test files.
    """
    found, wanted = sdist_version(sdist), installed_version()
    if found != wanted:
        raise SystemExit(
            f"{sdist} is transformers {found}, but {wanted} is installed: give the sdist of {wanted} "
            "(or leave SDIST out to fetch it)"
        )
    package.mkdir(parents=True)
    if sdist.is_dir():
        for name in NEEDED:
            shutil.copyfile(sdist / name, package / Path(name).name)
    else:
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts
                if len(parts) >= 3 and "/".join(parts[1:]) in NEEDED:
                    (package / parts[-1]).write_bytes(archive.extractfile(member).read())  # type: ignore[union-attr]
    missing = [name for name in NEEDED if not (package / Path(name).name).is_file()]
    if missing:
        raise SystemExit(f"{sdist} does not hold {missing}; give transformers' source distribution (.tar.gz).")
    (package / "__init__.py").write_text("", encoding="utf-8")
    for name, text in STANDINS.items():
        (package / name).parent.mkdir(exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    shutil.copyfile(HERE / "elmo_common.py", package / "test_elmo_common.py")
    shutil.copyfile(HERE / "skips.py", package / "skips.py")


def pytest_ini(package: Path) -> str:
    """A pytest.ini registering the marks transformers' tests use (its own conftest registers them)."""
    marks = {"slow"}  # set by transformers.testing_utils.slow
    for name in NEEDED:
        marks |= set(re.findall(r"@(?:pytest\.)?mark\.(\w+)", (package / Path(name).name).read_text(encoding="utf-8")))
    marks -= {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
    return "[pytest]\nmarkers =\n" + "".join(f"    {mark}\n" for mark in sorted(marks))


def read_outcomes(junit_xml: Path) -> dict[str, str]:
    """Each test's outcome in a JUnit XML report: "failed", "skipped" (any subtest skipped) or "passed"."""
    outcomes = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            outcomes[case.get("name", "")] = "failed"
        elif "skipped" in tags:
            outcomes[case.get("name", "")] = "skipped"
        else:
            outcomes[case.get("name", "")] = "passed"
    return outcomes


def explain(name: str, lists: Mapping[str, Mapping[str, str]]) -> tuple[str, str] | None:
    """The (list name, reason) of the first entry whose key or pattern matches `name`, if any."""
    for list_name, entries in lists.items():
        for key, reason in entries.items():
            if fnmatch.fnmatchcase(name, key):
                return list_name, reason
    return None


def check_outcomes(
    outcomes: Mapping[str, str],
    skips: Mapping[str, str] = SKIPS,
    not_applicable: Mapping[str, str] = NOT_APPLICABLE,
    needs_hardware: Mapping[str, str] = NEEDS_HARDWARE,
    complete: bool = True,
) -> list[str]:
    """What is wrong with a run against the lists of `skips.py` (an empty list: nothing).

    Every skipped test must match an entry; with `complete` (the whole module ran), every
    SKIPS and NOT_APPLICABLE entry must match a collected test, and one that matches a
    test that ran is out of date. NEEDS_HARDWARE entries may pass or skip.
    """
    lists = {"SKIPS": skips, "NOT_APPLICABLE": not_applicable, "NEEDS_HARDWARE": needs_hardware}
    problems = [
        f"{name} was skipped, and no entry of skips.py explains it: add it with the reason it does not apply "
        "to ELMo, or make it run"
        for name, outcome in sorted(outcomes.items())
        if outcome == "skipped" and explain(name, lists) is None
    ]
    if complete:
        for list_name, entries in (("SKIPS", skips), ("NOT_APPLICABLE", not_applicable)):
            for key in entries:
                matched = {outcomes[name] for name in outcomes if fnmatch.fnmatchcase(name, key)}
                if not matched:
                    problems.append(f"{list_name}[{key!r}] names no collected test (renamed or dropped?): remove it")
                elif matched != {"skipped"}:
                    problems.append(f"{list_name}[{key!r}] matches a test that ran: remove it, the test applies")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, nargs="?", help="transformers-<version>.tar.gz or its unpacked folder")
    parser.add_argument("--fetch", type=Path, metavar="DIR", help="only fetch the sdist into DIR; print its path")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.fetch is not None:
        args.fetch.mkdir(parents=True, exist_ok=True)
        print(fetch_sdist(args.fetch))
        return 0
    with tempfile.TemporaryDirectory(prefix="elmo-transformers-common-") as tmp:
        sdist = args.sdist or fetch_sdist(Path(tmp))
        package = Path(tmp) / "transformers_common_tests"
        unpack(sdist, package)
        (Path(tmp) / "pytest.ini").write_text(pytest_ini(package), encoding="utf-8")
        report = Path(tmp) / "report.xml"
        command = [sys.executable, "-m", "pytest", str(package / "test_elmo_common.py"), "-p", "no:cacheprovider"]
        command += ["-q", "--rootdir", tmp, "-c", str(Path(tmp) / "pytest.ini"), "--junitxml", str(report)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        code = subprocess.call([*command, *args.pytest_args], cwd=tmp, env=env)
        if not report.is_file():
            return code or 1
        outcomes = read_outcomes(report)
    lists = {"SKIPS": SKIPS, "NOT_APPLICABLE": NOT_APPLICABLE, "NEEDS_HARDWARE": NEEDS_HARDWARE}
    for name, outcome in sorted(outcomes.items()):
        if outcome == "skipped" and (why := explain(name, lists)):
            print(f"skipped {name}: {why[1]} ({why[0]})")
    problems = check_outcomes(outcomes, complete=not args.pytest_args)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if code == 0 and not problems:
        print(f"every skip explained by skips.py: {len(outcomes)} tests")
    return code or int(bool(problems))


if __name__ == "__main__":
    raise SystemExit(main())
