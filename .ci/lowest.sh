#!/usr/bin/env bash
# The lowest versions pyproject.toml allows, installed together with elmo-bilm and smoke-tested in every
# face (.ci/smoke_test.py: the core, elmo embed, the spaCy component, AutoModel and AutoTokenizer, the
# feature pipeline). pip has no "lowest" resolution, so .ci/lowest_constraints.py pins each declared
# dependency to its lower bound; torch stays at the CPU wheel of constraints.txt (PyPI's Linux torch
# wheels pull CUDA). Packages that ours need in turn take the newest versions the pins allow, as a
# user's pip would give them. A few minutes, most of it downloads.
# Run: .ci/lowest.sh [PACKAGE]   (PACKAGE: a wheel, or by default this checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
package=${1:-$repo}
extras="hdf5,spacy,hf,probe,vectors"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 .ci/lowest_constraints.py ${extras//,/ } > "$work/lowest.txt"
echo "[lowest] pins:" $(cat "$work/lowest.txt")
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --no-compile -c "$work/lowest.txt" "$package[$extras]"
"$work/venv/bin/pip" check
"$work/venv/bin/python" - "$work/lowest.txt" <<'PY'  # each pin is what got installed (4.3 == 4.3.0)
import sys
from importlib.metadata import version
from packaging.version import Version
pins = [line.split("==") for line in open(sys.argv[1]).read().split()]
wrong = [f"{name}=={pin} (installed: {version(name)})" for name, pin in pins if Version(Version(version(name)).public) != Version(pin)]
sys.exit(f"[lowest] not installed at its lower bound: {', '.join(wrong)}" if wrong else None)
PY
(cd "$work" && "$work/venv/bin/python" "$repo/.ci/smoke_test.py")
for command in "" embed train perplexity convert probe widen "data pretokenize" "data vocab" "data hold-out"; do
    "$work/venv/bin/elmo" $command --help > /dev/null  # typer and click build every command's help
done
echo "[lowest] the lowest allowed versions install together and every face runs"
