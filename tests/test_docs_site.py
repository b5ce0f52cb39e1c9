"""The built docs site: a reference a user reads, and a site that works offline.

The site is built once for the module (about 15 s; `mkdocs build --strict` in .ci/run
builds it too). The diagram test opens a copy in headless Chromium with the network cut
off; it skips where Chromium is not installed (.ci/run installs it).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from .conftest import REPO

pytest.importorskip("mkdocstrings_handlers.python", reason="the docs site needs the docs extra: pip install '.[docs]'")

REFERENCE_PAGES = ["elmo-core", "hf-elmo", "spacy-elmo"]
LINE_LENGTH = 88  # mkdocs.yml: line_length


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if not (REPO / "local" / "mermaid" / "mermaid.min.js").is_file():
        pytest.skip("the site bundles Mermaid: fetch it once with python tools/fetch_mermaid.py (.ci/run does)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


class _Page(HTMLParser):
    """A page's element ids, signatures, and the code spans of its prose (not links, not types)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.signatures: list[str] = []
        self.codes: list[str] = []
        self._open: list[tuple[str, dict[str, str | None]]] = []
        self._text: list[str] | None = None
        self.feed(text)

    def _inside(self, tag: str, **attrs: str) -> bool:
        return any(t == tag and all(a.get(k) is not None and v in (a[k] or "") for k, v in attrs.items())
                   for t, a in self._open)  # fmt: skip

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        self._open.append((tag, found))
        if tag == "div" and "doc-signature" in (found.get("class") or ""):
            self.signatures.append("")
        if tag == "code" and not self._inside("pre") and not self._inside("a"):
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "code" and self._text is not None:
            self.codes.append("".join(self._text))
            self._text = None
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self.signatures and self._inside("div", **{"class": "doc-signature"}):
            self.signatures[-1] += data
        # A type annotation is a span with a title (the full path); prose is what is left.
        if self._text is not None and not self._inside("a") and not self._inside("span", title=""):
            self._text.append(data)


def _page(site: Path, name: str) -> _Page:
    return _Page((site / "reference" / name / "index.html").read_text(encoding="utf-8"))


def _internal_names() -> set[str]:
    """Module-level functions, classes and constants of the three packages."""
    names = set()
    for package in ("core", "spacy_elmo", "hf_elmo"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


@pytest.mark.parametrize("name", REFERENCE_PAGES)
def test_the_reference_names_no_private_or_internal_name(site, name):
    """Prose names only what a reader can look up: the public API, or what the page documents."""
    import elmo_core
    import hf_elmo
    import spacy_elmo

    public = {*elmo_core.__all__, *spacy_elmo.__all__, *hf_elmo.__all__}
    page = _page(site, name)
    documented = {anchor.rsplit(".", 1)[-1] for anchor in page.ids}
    internal = _internal_names() - public - documented
    found = set()
    for code in page.codes:
        for dotted in re.findall(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*", code):
            last = dotted.rsplit(".", 1)[-1]
            ours = "." not in dotted or dotted.startswith(("elmo_core.", "spacy_elmo.", "hf_elmo."))
            looks_like_code = "_" in last or sum(c.isupper() for c in last) >= 2
            if re.match(r"_[a-z]", last) or (ours and looks_like_code and last in internal):
                found.add(dotted)
    assert not found, f"reference/{name} names what a reader cannot look up: {sorted(found)}"


def test_internals_are_not_rendered_as_public_api(site):
    ids = _page(site, "elmo-core").ids
    assert {"elmo_core.BiLM.forward", "elmo_core.Elmo.forward", "elmo_core.EmbedSettings"} <= ids
    for internal in ("elmo_core.BiLM.run_sorted", "elmo_core.BiLM.reset_buffers", "elmo_core.EmbedSettings.given"):
        assert internal not in ids


def test_signatures_are_wrapped_and_show_values_as_defaults(site):
    signatures = [s for name in REFERENCE_PAGES for s in _page(site, name).signatures]
    assert len(signatures) > 30
    for signature in signatures:
        assert max(map(len, signature.splitlines())) <= LINE_LENGTH, signature
    load_elmo = next(s for s in signatures if s.startswith("load_elmo("))
    assert len(load_elmo.splitlines()) > 3  # one argument a line
    # A default given by a constant's name shows its value.
    assert not [s for s in signatures if re.search(r"= [A-Z][A-Z0-9_]{3,}\b", s)]
    assert "batch_tokens: int = 4096" in "".join(signatures)


def test_the_docs_extra_brings_a_formatter_for_signatures():
    """mkdocstrings wraps signatures with Black or Ruff; without one they run off the page."""
    import tomllib

    docs = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(re.match(r"(ruff|black)\b", requirement) for requirement in docs["docs"])


def _table_rows(html: str, anchor: str, section: str) -> list[str]:
    """The rows of one section table ("Parameters:", "Returns:") of one object."""
    start = html.index(f'id="{anchor}"')
    end = html.find('<div class="doc doc-object', start)
    body = html[start:end]
    table = body[body.index(f'<span class="doc-section-title">{section}</span>') :]
    table = table[: table.index("</table>")]
    return re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table, re.DOTALL)


def test_a_returns_section_is_one_row(site):
    html = (site / "reference" / "elmo-core" / "index.html").read_text(encoding="utf-8")
    (row,) = _table_rows(html, "elmo_core.words_to_char_ids", "Returns:")
    assert "char_ids" in row and "mask" in row and "longest sentence" in row


def test_load_elmo_lists_its_arguments_with_their_defaults(site):
    html = (site / "reference" / "elmo-core" / "index.html").read_text(encoding="utf-8")
    rows = _table_rows(html, "elmo_core.load_elmo", "Parameters:")
    cells = [re.sub(r"<[^>]+>|\s+", " ", row).split() for row in rows]
    names = [cell[0] for cell in cells]
    assert names == ["path", "options", "weights", "map_location", "**settings"]
    assert not any("required" in row for row in rows)
    assert all(cell[-1] == "None" for cell in cells[:3])


def test_the_site_loads_nothing_from_the_network(site):
    """No font, script or style from another host: the site reads the same offline."""
    remote = re.compile(r"""<(?:script|link|img)\b[^>]*(?:src|href)=["']?(?:https?:)?//""", re.IGNORECASE)
    for page in site.rglob("*.html"):
        assert not remote.search(page.read_text(encoding="utf-8")), page
    assert (site / "javascripts" / "mermaid.min.js").stat().st_size > 1_000_000


# Material draws each diagram in a closed shadow root, which --dump-dom leaves out: the copy
# opens shadow roots (before Material's script runs) and copies each diagram's SVG into the page.
_OPEN_SHADOW_ROOTS = """<script>
const attachShadow = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) { return attachShadow.call(this, {...init, mode: "open"}); };
</script>"""
_SHOW_DIAGRAMS = """<script>
setInterval(() => {
  for (const d of document.querySelectorAll("div.mermaid")) {
    const svg = d.shadowRoot && d.shadowRoot.querySelector("svg");
    if (svg && !d.dataset.copied) {
      d.dataset.copied = "1";
      const out = document.createElement("pre");
      out.className = "rendered-diagram";
      out.textContent = svg.outerHTML;
      document.body.appendChild(out);
    }
  }
}, 100);
</script>"""


def test_the_design_diagram_renders_offline_in_a_headless_browser(site, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium); .ci/run installs it")
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    page = copy / "design" / "index.html"
    html = page.read_text(encoding="utf-8").replace("<head>", "<head>" + _OPEN_SHADOW_ROOTS, 1)
    page.write_text(html.replace("</body>", _SHOW_DIAGRAMS + "</body>"), encoding="utf-8")
    offline = ["--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"]
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", *offline, "--virtual-time-budget=20000"]
    done = subprocess.run(
        [*command, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rendered = re.findall(r'<pre class="rendered-diagram">(.*?)</pre>', done.stdout, re.DOTALL)
    assert len(rendered) == 1, done.stdout[-2000:]
    svg = rendered[0]
    assert svg.startswith("&lt;svg") and "flowchart" in svg
    for label in ("spacy_elmo: the elmo component", "hf_elmo/remote_code", "runtime: thread rule"):
        assert label in svg
