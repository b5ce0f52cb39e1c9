"""Generate the self-contained code files that a saved model folder holds.

    python -m hf_elmo.remote_code.generate        # rewrites hf_elmo/remote_code/*_elmo.py

Each generated file is one hf_elmo module (`configuration_elmo`, `modeling_elmo`,
`tokenization_elmo`) with the elmo_core definitions it needs inlined ahead of it, so
that it imports nothing from elmo-bilm (see `hf_elmo.remote_code` for why):

1. The hf_elmo module is read with its `# >>> hf_elmo only` ... `# <<< hf_elmo only`
   blocks removed (the code that writes these very files into a folder).
2. Every name it imports from `elmo_core` is looked up in the core's source, and with
   it, transitively, every top-level definition (class, function, constant) that
   definition refers to, across the core's relative imports, including the lazy ones
   inside functions. Definitions come out as their code, without their docstrings and
   comments (`_code_only`: those stay in the core's source, which each section names),
   in the order Python would execute them (a module after the modules it imports, source order
   inside a module). Standard and third-party imports are merged at the top.
3. `configuration_elmo.py` (the base) holds every core definition the other two share;
   `modeling_elmo.py` and `tokenization_elmo.py` import those from `.configuration_elmo`
   instead of inlining them again (so a tokenizer saved alone writes the configuration
   file beside it).

It is a plain reader of Python source (the `ast` module), written for this project;
it raises `GenerationError` for anything it does not handle (two different
definitions of one name, a `from . import module`), rather than guess.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["GenerationError", "generate", "generated_sources", "main"]

HF_DIR = Path(__file__).resolve().parents[1]
_CORE_SPEC = importlib.util.find_spec("elmo_core")  # found, not imported
if _CORE_SPEC is None or _CORE_SPEC.origin is None:
    raise ImportError("elmo_core is not installed; install elmo-bilm first (pip install -e .).")
CORE_DIR = Path(_CORE_SPEC.origin).resolve().parent
OUT_DIR = Path(__file__).resolve().parent
COMMAND = "python -m hf_elmo.remote_code.generate"

# Generated file -> the sibling it may import from (relative imports are what transformers copies).
# The configuration holds every core definition the other two share, so each is written once.
BASE = "configuration_elmo"
TARGETS: dict[str, str | None] = {
    BASE: None,
    "modeling_elmo": BASE,
    "tokenization_elmo": BASE,
}

_PACKAGE_ONLY = re.compile(r"^[ \t]*# >>> hf_elmo only.*?^[ \t]*# <<< hf_elmo only[^\n]*\n", re.M | re.S)
_LINE_LENGTH = 120


class GenerationError(ValueError):
    """The generator met source it cannot flatten safely; the message names the place."""


@dataclass(eq=False)
class _Statement:
    """One top-level statement of a module: its source text and the names it binds and reads."""

    module: str
    text: str
    binds: set[str]
    uses: set[str]
    lazy: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (core module, name)
    lines: tuple[int, int] = (0, 0)  # [start, end) in the module's source


@dataclass
class _Module:
    """A parsed module: its definitions and where each imported name comes from."""

    name: str
    statements: list[_Statement] = field(default_factory=list)
    defined: dict[str, _Statement] = field(default_factory=dict)
    imports: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)  # local -> (kind, module, name)
    core_imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local -> (core module, name)
    guarded: dict[str, _Statement] = field(default_factory=dict)  # names bound in try: import blocks
    depends_on: list[str] = field(default_factory=list)  # core modules imported at top level
    docstring: str = ""
    header_lines: set[int] = field(default_factory=set)  # docstring and imports: not part of the body


def _core_module(import_from: ast.ImportFrom, in_core: bool, where: str, importer: str = "") -> str | None:
    """The core module an import reads from, as a dotted path inside elmo_core (`"model.bilm"`;
    a package is its `__init__`: `"model.__init__"`, `"__init__"`), or None if not the core.

    `importer` is the importing core module's dotted path (for relative imports)."""
    if in_core and import_from.level >= 1:
        if import_from.module is None:
            raise GenerationError(f"{where}: `from . import ...` cannot be flattened; import the names.")
        package = importer.split(".")[:-1]  # a module's package; a package's __init__ is its own
        if import_from.level - 1 > len(package):
            raise GenerationError(f"{where}: a relative import above elmo_core.")
        base = package[: len(package) - (import_from.level - 1)]
        return ".".join([*base, *import_from.module.split(".")])
    if import_from.level == 0 and import_from.module and import_from.module.split(".")[0] == "elmo_core":
        return ".".join(import_from.module.split(".")[1:]) or "__init__"
    return None


def _segment(lines: list[str], node: ast.stmt) -> tuple[int, int]:
    """0-based [start, end) lines of a statement, with its decorators and the comments just above."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return start, node.end_lineno or node.lineno


def _parse(name: str, source: str, in_core: bool) -> _Module:
    module = _Module(name)
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    where = f"{'elmo_core' if in_core else 'hf_elmo'}/{name}.py"
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        module.docstring = "".join(lines[body[0].lineno - 1 : body[0].end_lineno])
        module.header_lines.update(range(body[0].lineno - 1, body[0].end_lineno or 0))
        body = body[1:]
    previous: _Statement | None = None
    for node in body:
        start, end = _segment(lines, node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module.header_lines.update(range(start, end))
            _record_import(module, node, in_core, where)
            previous = None
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            module.header_lines.update(range(start, end))  # names for annotations only
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and previous is not None:
            previous.text += "".join(lines[previous.lines[1] : end])  # an attribute docstring: its constant's
            previous.lines = (previous.lines[0], end)
            continue
        statement = _Statement(name, "".join(lines[start:end]), _binds(node), set(), lines=(start, end))
        _collect_uses(node, statement, in_core, where)
        if isinstance(node, ast.Try):
            module.header_lines.update(range(start, end))
            module.guarded.update(dict.fromkeys(statement.binds, statement))
            continue
        if statement.binds == {"__all__"} and in_core:
            continue
        module.statements.append(statement)
        for bound in statement.binds:
            module.defined[bound] = statement
        previous = statement if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    return module


def _record_import(module: _Module, node: ast.Import | ast.ImportFrom, in_core: bool, where: str) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] in ("elmo_core", "hf_elmo"):
                raise GenerationError(f"{where}: `import {alias.name}` cannot be flattened; use `from ... import`.")
            local = alias.asname or alias.name.split(".")[0]
            module.imports[local] = ("import", alias.name, alias.asname)
        return
    if node.module == "__future__":
        return
    core = _core_module(node, in_core, where, module.name)
    for alias in node.names:
        local = alias.asname or alias.name
        if core is not None:
            module.core_imports[local] = (core, alias.name)
            if core not in module.depends_on:
                module.depends_on.append(core)
        elif node.level == 0:
            module.imports[local] = ("from" if alias.asname is None else "from-as", node.module or "", alias.name)
        # A relative import in an hf_elmo module names a sibling generated file; kept by the caller.


def _binds(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Try):
        return {
            (alias.asname or alias.name).split(".")[0]
            for n in ast.walk(node)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for alias in n.names
        }
    return set()


def _collect_uses(node: ast.stmt, statement: _Statement, in_core: bool, where: str) -> None:
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            statement.uses.add(child.id)
        elif isinstance(child, ast.ImportFrom) and child is not node:
            core = _core_module(child, in_core, where, statement.module)
            if core is not None:  # a lazy import of the core, inside a function: dropped below
                for alias in child.names:
                    if alias.asname not in (None, alias.name):
                        raise GenerationError(f"{where}: `import {alias.name} as {alias.asname}` inside a function.")
                    statement.lazy[alias.name] = (core, alias.name)
    if statement.lazy:
        statement.text = _drop_lazy_core_imports(statement.text, in_core)


def _drop_lazy_core_imports(text: str, in_core: bool) -> str:
    """Remove `from .x import y` (core) or `from elmo_core... import y` lines inside a definition."""
    source = r"(\.|elmo_core)" if in_core else "elmo_core"
    pattern = rf"^[ \t]+from {source}[\w.]* import [^\n]*\n"
    cleaned = re.sub(pattern, "", text, flags=re.M)
    if "import (" in cleaned and re.search(r"^[ \t]+from (\.|elmo_core)", cleaned, re.M):
        raise GenerationError(f"a multi-line lazy import of the core cannot be flattened:\n{text[:200]}")
    return cleaned


FOLDED = {"files.model_folder": ("ELMO_SETTINGS",)}
"""Core constants computed from other definitions, written into the folder as their value.

`ELMO_SETTINGS` is read from `Elmo.__init__`'s signature (its defaults are declared there,
once); written as the computation, it would pull `Elmo`, and with it the whole model, into
`configuration_elmo.py`."""


def _fold(module: _Module) -> None:
    """Replace each `FOLDED` constant of `module` by its value (a literal of str, number, bool, None)."""
    for name in FOLDED.get(module.name, ()):
        value = getattr(importlib.import_module(f"elmo_core.{module.name}"), name)
        if not isinstance(value, dict) or ast.literal_eval(repr(value)) != value:
            raise GenerationError(f"elmo_core/{_file(module.name)}: {name} is not a dict of literals.")
        statement = module.defined[name]
        items = "".join(f"    {_literal(key)}: {_literal(item)},\n" for key, item in value.items())
        statement.text = f"{name}: dict[str, Any] = {{\n{items}}}\n"
        statement.uses = {"Any"}
        statement.lazy = {}


def _literal(value: object) -> str:
    """Python source for a literal, strings in double quotes (as ruff formats them)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


class _Flattener:
    """Resolves names across the core's modules and collects the definitions one file needs."""

    def __init__(self, core_dir: Path) -> None:
        self.core_dir = core_dir
        self.core: dict[str, _Module] = {}

    def module(self, name: str) -> _Module:
        """The parsed core module `name` ("model.bilm"); a package ("model") is its `__init__`."""
        if name not in self.core:
            real = f"{name}.__init__" if (self.core_dir / name.replace(".", "/")).is_dir() else name
            path = self.core_dir / f"{real.replace('.', '/')}.py"
            if not path.is_file():
                raise GenerationError(f"elmo_core module {name!r} not found at {path}.")
            if real not in self.core:
                self.core[real] = _parse(real, path.read_text(encoding="utf-8"), in_core=True)
                _fold(self.core[real])
            self.core[name] = self.core[real]
        return self.core[name]

    def resolve(self, module: _Module, name: str, lazy: dict[str, tuple[str, str]] | None = None) -> tuple | None:
        """Where `name`, read in `module`, is defined: a core statement, an import, or None (a builtin or local)."""
        if name in module.defined and module.name in self.core and self.core[module.name] is module:
            return ("core", module.defined[name])
        if name in module.core_imports or (lazy and name in lazy):
            core, original = module.core_imports.get(name) or (lazy or {})[name]
            return self.resolve(self.module(core), original)
        if name in module.imports:
            return ("import", name, module.imports[name])
        if name in module.guarded:
            return ("guarded", module.guarded[name])
        return None  # defined in the hf_elmo module itself, a builtin, or a local variable

    def needs(self, module: _Module) -> tuple[list[_Statement], dict[str, tuple], list[_Statement]]:
        """Core statements (in execution order), imports and guarded blocks that `module` needs."""
        statements: dict[int, _Statement] = {}
        imports: dict[str, tuple] = {}
        guarded: dict[int, _Statement] = {}
        pending: list[tuple[_Module, _Statement]] = [(module, s) for s in module.statements]
        pending += [(module, s) for s in module.guarded.values()]
        seen: set[int] = set()
        while pending:
            owner, statement = pending.pop()
            if id(statement) in seen:
                continue
            seen.add(id(statement))
            for name in sorted(statement.uses | set(statement.lazy)):
                found = self.resolve(owner, name, statement.lazy)
                if found is None:
                    continue
                if found[0] == "import":
                    imports[found[1]] = found[2]
                elif found[0] == "guarded":
                    guarded[id(found[1])] = found[1]
                elif found[0] == "core":
                    statements[id(found[1])] = found[1]
                    pending.append((self.core[found[1].module], found[1]))
        return self._in_execution_order(statements.values()), imports, list(guarded.values())

    def _in_execution_order(self, statements) -> list[_Statement]:  # noqa: ANN001
        order: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in order:
                return
            if name in path:
                cycle = " -> ".join(path + (name,))
                raise GenerationError(f"elmo_core modules import each other at top level: {cycle}.")
            for dependency in self.module(name).depends_on:
                visit(dependency, path + (name,))
            order.append(name)

        wanted = {s.module for s in statements}
        for name in sorted(wanted):
            visit(name, ())
        rank = {name: i for i, name in enumerate(order)}
        position = {id(s): i for m in self.core.values() for i, s in enumerate(m.statements)}
        return sorted(statements, key=lambda s: (rank[s.module], position[id(s)]))


def _format_imports(imports: dict[str, tuple]) -> str:
    """`import x` and `from x import a, b` lines, standard library first, as isort would."""
    plain: set[str] = set()
    froms: dict[str, set[str]] = {}
    for local, (kind, module, name) in imports.items():
        if kind == "import":
            plain.add(module if name is None else f"{module} as {name}")
        elif kind == "from":
            froms.setdefault(module, set()).add(name)
        else:  # from-as
            froms.setdefault(module, set()).add(f"{name} as {local}")
    sections: dict[bool, list[str]] = {True: [], False: []}  # standard library?
    for line in sorted(plain):
        sections[line.split(".")[0].split()[0] in sys.stdlib_module_names].append(f"import {line}")
    for module, names in sorted(froms.items()):
        text = f"from {module} import {', '.join(sorted(names))}"
        if len(text) > _LINE_LENGTH:
            text = f"from {module} import (\n" + "".join(f"    {n},\n" for n in sorted(names)) + ")"
        sections[module.split(".")[0] in sys.stdlib_module_names].append(text)
    return "\n\n".join("\n".join(sections[std]) for std in (True, False) if sections[std])


def _file(module: str) -> str:
    """A core module's file inside elmo_core: "model.bilm" -> "model/bilm.py"."""
    return module.replace(".", "/") + ".py"


def _banner(name: str, core_modules: list[str]) -> str:
    """The generated file's first lines: where it comes from (each core section is headed by its
    file) and how to regenerate it."""
    text = (
        f"Generated from hf_elmo/{name}.py and the code of the {len(core_modules)} elmo_core modules named "
        "in its sections, so that a saved model folder needs no elmo-bilm. Do not edit: edit those, then run"
    )
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, 96, break_on_hyphens=False)) + f"#     {COMMAND}\n"


def _body(source: str, module: _Module) -> str:
    """The hf_elmo module's source without its docstring and top-level imports."""
    lines = source.splitlines(keepends=True)
    kept = "".join(line for i, line in enumerate(lines) if i not in module.header_lines)
    return re.sub(r"\n{3,}", "\n\n\n", kept).strip("\n") + "\n"


def _check_names(definitions: list[tuple[str, str]]) -> None:
    """Refuse two definitions of one name, from two files, that would share one generated file."""
    owners: dict[str, str] = {}
    for owner, name in definitions:
        if owners.setdefault(name, owner) != owner:
            raise GenerationError(
                f"the name {name!r} is defined by both {owners[name]} and {owner}, which would share one "
                "generated file; rename one of them."
            )


def generated_sources(hf_dir: Path = HF_DIR, core_dir: Path = CORE_DIR) -> dict[str, str]:
    """The text of every generated file, by file name (nothing is written).

    Args:
        hf_dir: The folder of the hf_elmo modules named in `TARGETS`.
        core_dir: The folder of elmo_core's modules.

    Raises:
        GenerationError: for source the generator cannot flatten safely (the message
            names the file and the reason).
    """
    flattener = _Flattener(Path(core_dir))
    sources = {
        name: _PACKAGE_ONLY.sub("", (Path(hf_dir) / f"{name}.py").read_text(encoding="utf-8")) for name in TARGETS
    }
    modules = {name: _parse(name, source, in_core=False) for name, source in sources.items()}
    needed = {name: flattener.needs(module) for name, module in modules.items()}
    folder = _Folder(flattener, sources, modules, needed, _base_ids(needed))
    return {f"{name}.py": folder.text(name, sibling) for name, sibling in TARGETS.items()}


_Needs = tuple[list[_Statement], dict[str, tuple], list[_Statement]]
"""What `_Flattener.needs` returns: core statements, imports, guarded blocks."""


def _base_ids(needed: dict[str, _Needs]) -> set[int]:
    """The core statements the base file holds: what it needs and every core definition two files need
    (a closed set: what such a definition reads, both files need too); the others import those from it."""
    users: dict[int, int] = {}
    for statements, _, _ in needed.values():
        for statement in statements:
            users[id(statement)] = users.get(id(statement), 0) + 1
    return {id(s) for s in needed[BASE][0]} | {key for key, count in users.items() if count > 1}


@dataclass
class _Folder:
    """The hf_elmo modules of a folder, parsed, and the core definitions each one needs."""

    flattener: _Flattener
    sources: dict[str, str]  # module name -> source without its `hf_elmo only` blocks
    modules: dict[str, _Module]
    needed: dict[str, _Needs]
    base_ids: set[int]  # ids of the core statements the base file holds (`_base_ids`)

    def contents(self, name: str, sibling: str | None) -> tuple[list[_Statement], dict[str, tuple], set[str]]:
        """The core statements file `name` inlines (each text once), its imports, and the names it
        imports from `sibling`."""
        statements, imports, _ = self.needed[name]
        from_sibling: set[str] = set()
        if sibling is None:  # the base: its own definitions and the shared ones, in execution order
            every = {id(s): s for statements_, _, _ in self.needed.values() for s in statements_}
            statements = self.flattener._in_execution_order([every[key] for key in self.base_ids])
            read = _uses(statements)
            imports = {k: v for _, imports_, _ in self.needed.values() for k, v in imports_.items() if k in read}
            imports |= self.needed[BASE][1]
        else:  # what the base defines is imported from it, not inlined again; only what is read here
            module = self.modules[name]
            statements = [s for s in statements if id(s) not in self.base_ids]
            read_here = _uses(statements) | _uses(module.statements) | _uses(list(module.guarded.values()))
            from_base = {n for s in self.needed[name][0] if id(s) in self.base_ids for n in s.binds}
            from_sibling = (from_base & read_here) | _relative_names(self.sources[name], sibling)
            imports = {k: v for k, v in imports.items() if k in read_here}
        unique: list[_Statement] = []
        texts: set[str] = set()
        for statement in statements:  # the same line in two modules (`logger = ...`) comes out once
            if statement.text not in texts:
                texts.add(statement.text)
                unique.append(statement)
        return unique, imports, from_sibling

    def text(self, name: str, sibling: str | None) -> str:
        """The generated file `name`.py: banner, docstring, imports, core definitions, the module's body."""
        module = self.modules[name]
        unique, imports, from_sibling = self.contents(name, sibling)
        _check_names(
            [(f"elmo_core/{_file(s.module)}", n) for s in unique for n in s.binds]
            + [(f"hf_elmo/{name}.py", n) for n in module.defined]
            + [(f"{sibling}.py", n) for n in from_sibling if sibling is not None]
        )
        core_modules = list(dict.fromkeys(s.module for s in unique))
        parts = [_banner(name, core_modules) + module.docstring.rstrip("\n"), "from __future__ import annotations"]
        parts.append(_format_imports(imports))
        parts += [g.text.rstrip("\n") for g in self.needed[name][2]]
        if sibling is not None:
            parts.append(f"from .{sibling} import (\n" + "".join(f"    {n},\n" for n in sorted(from_sibling)) + ")")
        header = "\n\n".join(p.strip("\n") for p in parts if p.strip())
        text = header + "\n\n\n" + _definitions(unique) + f"# ---- hf_elmo/{name}.py " + "-" * (62 - len(name))
        text += "\n\n" + _body(self.sources[name], module)
        compile(text, f"{name}.py", "exec")
        return text


def _code_only(text: str) -> str:
    """A core statement without its docstrings, full-line comments and inner blank lines (the
    folder carries the code; the documentation is the core's). A body left empty gets `pass`."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()  # 0-based lines
    empty: dict[int, str] = {}  # line of a removed docstring that was a whole body -> its indent
    inside_strings: set[int] = set()  # lines a multi-line string runs over: kept as they are
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and node.end_lineno != node.lineno:
            inside_strings.update(range(node.lineno, node.end_lineno or node.lineno))
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for k, child in enumerate(body):
            if not (isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant)):
                continue
            after_assignment = k and isinstance(body[k - 1], (ast.Assign, ast.AnnAssign))
            if not isinstance(child.value.value, str) or (k and not after_assignment):
                continue  # only docstrings: a body's first string, or an attribute's string after it
            drop.update(range(child.lineno - 1, child.end_lineno or child.lineno))
            if len(body) == 1:
                empty[child.lineno - 1] = lines[child.lineno - 1][: child.col_offset]
    kept = []
    for i, line in enumerate(lines):
        if i in empty:
            kept.append(f"{empty[i]}pass\n")
        elif i in inside_strings - drop or (i not in drop and line.strip() and not line.lstrip().startswith("#")):
            kept.append(line)
    return "".join(kept)


def _definitions(statements: list[_Statement]) -> str:
    """The inlined core statements under one heading per module, spaced as in their source."""
    text, previous = "", None
    for statement in statements:
        if previous is None or statement.module != previous.module:
            if previous is not None:
                text += "\n\n"
            text += f"# ---- elmo_core/{_file(statement.module)} " + "-" * (63 - len(_file(statement.module))) + "\n\n"
        elif statement.lines[0] - previous.lines[1] <= 1:  # neighbours in the source (constants)
            text += "\n" * (statement.lines[0] - previous.lines[1])
        else:
            text += "\n\n"
        text += _code_only(statement.text).rstrip("\n") + "\n"
        previous = statement
    return text + "\n\n" if text else ""


def _uses(statements: list[_Statement]) -> set[str]:
    """Every name the statements read."""
    return {name for statement in statements for name in statement.uses}


def _relative_names(source: str, sibling: str) -> set[str]:
    """Names an hf_elmo module imports from its sibling (`from .configuration_elmo import ElmoConfig`)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == sibling:
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def generate(out_dir: str | Path = OUT_DIR) -> list[Path]:
    """Write the generated files into `out_dir` (default: this package, where they are committed).

    Returns:
        The paths written.
    """
    written = []
    for file_name, text in generated_sources().items():
        path = Path(out_dir) / file_name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    """`python -m hf_elmo.remote_code.generate`: rewrite the committed files (a developer's step)."""
    for path in generate():
        print(path)  # noqa: T201 - a developer tool's output


if __name__ == "__main__":
    main()
