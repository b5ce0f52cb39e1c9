"""Fetch Mermaid for the docs site, so its diagrams render offline.

Mermaid is not kept in the repository. This script takes the pinned release from the npm
registry (`npm pack`), checks the archive's SHA-256, and keeps `dist/mermaid.min.js` and the
licence in `local/mermaid/` (ignored by git). The docs hook (`tools/docs_hooks.py`) copies
them into the built site.

    python tools/fetch_mermaid.py
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "11.17.2"
SHA256 = "6ad2f42c3fc26bbf9e45cbb6d11898972573ea52b33a5f4ff51952899f950ffd"  # mermaid-11.17.2.tgz
FILES = {"package/dist/mermaid.min.js": "mermaid.min.js", "package/LICENSE": "LICENSE"}
TARGET = Path(__file__).resolve().parent.parent / "local" / "mermaid"


def fetch(target: Path = TARGET) -> Path:
    """Unpack the pinned Mermaid into `target` unless it is there; return `target`."""
    if all((target / name).is_file() for name in FILES.values()):
        return target
    if shutil.which("npm") is None:
        sys.exit("fetch_mermaid: npm is not installed (Debian: apt-get install npm)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", f"mermaid@{VERSION}", "--silent"], cwd=tmp, check=True, capture_output=True)
        archive = Path(tmp) / f"mermaid-{VERSION}.tgz"
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != SHA256:
            sys.exit(f"fetch_mermaid: {archive.name} has SHA-256 {digest}, expected {SHA256}")
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            for member, name in FILES.items():
                source = tar.extractfile(member)
                assert source is not None  # a regular file in the pinned archive
                (target / name).write_bytes(source.read())
    return target


if __name__ == "__main__":
    print(fetch())
