"""CITATION.cff cites the paper and this release of the software."""

from __future__ import annotations

import pytest

from .conftest import REPO

CFF_REQUIRED = {"cff-version", "message", "title", "authors"}
"""The keys CFF 1.2.0 requires of a citation file (and of a preferred-citation, with type)."""


@pytest.fixture(scope="module")
def citation() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))


def test_citation_file_is_cff_1_2_0_for_this_version_and_licence(citation):
    tomllib = pytest.importorskip("tomllib")
    from elmo_core import __version__

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert CFF_REQUIRED <= citation.keys()
    assert citation["cff-version"] == "1.2.0"
    assert citation["type"] == "software"
    assert str(citation["version"]) == __version__
    assert citation["license"] == project["license"]
    assert all(author.get("name") or author.get("family-names") for author in citation["authors"])


def test_citation_prefers_the_elmo_paper(citation):
    paper = citation["preferred-citation"]
    assert {"type", "title", "authors"} <= paper.keys()
    assert paper["type"] == "conference-paper"
    assert paper["title"] == "Deep contextualized word representations"
    assert [a["family-names"] for a in paper["authors"]] == [
        "Peters",
        "Neumann",
        "Iyyer",
        "Gardner",
        "Clark",
        "Lee",
        "Zettlemoyer",
    ]
    assert (paper["year"], paper["start"], paper["end"]) == (2018, 2227, 2237)
    assert paper["conference"]["name"] == "NAACL-HLT 2018"
    assert {"type": "other", "value": "arXiv:1802.05365"}.items() <= paper["identifiers"][0].items()
