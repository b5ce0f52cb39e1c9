"""Print pip constraints that pin every dependency pyproject.toml declares to its lower bound.

pip has no "lowest versions" resolution, so .ci/lowest.sh installs the package with these pins
(`name==lower bound` for the requirements and the extras named on the command line) and
smoke-tests every face. torch is the exception: its Linux wheels on PyPI pull CUDA, so it
stays at the CPU wheel constraints.txt names.

Run: `python .ci/lowest_constraints.py hdf5 spacy hf probe vectors > lowest.txt`
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
KEPT = {"torch"}  # pinned by constraints.txt instead (see the module docstring)


def lowest_pins(extras: list[str]) -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*>=\s*([^,;\s]+).*", requirement)
        if match is None:
            raise SystemExit(f"{requirement!r} has no lower bound (>=): declare one in pyproject.toml.")
        name, version = match.group(1).lower(), match.group(3)
        if name not in KEPT:
            pins[name] = max(pins.get(name, version), version, key=_version_key)
    pinned = [line for line in (REPO / "constraints.txt").read_text().splitlines() if line.split("==")[0] in KEPT]
    return [*pinned, *(f"{name}=={version}" for name, version in sorted(pins.items()))]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


if __name__ == "__main__":
    print("\n".join(lowest_pins(sys.argv[1:])))
