from __future__ import annotations

import subprocess
import sys


def test_training_code_imports_no_tokenizer_or_framework():
    code = (
        "import sys, elmo_core.apps.training, elmo_core.apps.training.commands, elmo_core.apps.training.trainer, "
        "elmo_core.apps.cli.data, elmo_core.apps.cli.train; "
        "print(sorted(m for m in ('spacy', 'thinc', 'transformers', 'h5py') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
