"""Run transformers' own common model/config tests against ElmoModel and ElmoForTokenClassification.

transformers' `ModelTesterMixin` (tests/test_modeling_common.py) and `ConfigTester`
(tests/test_configuration_common.py) check the generic contract every model keeps. They
ship only in transformers' source distribution, so they are not part of the default
suite. Fetch the sdist of the installed version and point this script at it:

    version=$(python -c 'import transformers; print(transformers.__version__)')
    pip download --no-deps --no-binary :all: "transformers==$version" -d sdist/
    pip install parameterized            # imported by transformers' common tests
    python tests/hf_elmo/transformers_common/run_transformers_common_tests.py \
        sdist/transformers-*.tar.gz [-- pytest args]

The script unpacks the two test files (and nothing else of transformers) into a temporary
package, adds `elmo_common.py` (our model tester, and the list of tests that cannot apply
to ELMo, each with its reason), and runs pytest there. Three modules those files import
are not in the sdist and are replaced by stand-ins, explained here:

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
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

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


def unpack(sdist: Path, package: Path) -> None:
    """Copy the two common test files from an sdist (.tar.gz) or an unpacked source tree."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, help="transformers-<version>.tar.gz, or its unpacked folder")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="elmo-transformers-common-") as tmp:
        package = Path(tmp) / "transformers_common_tests"
        unpack(args.sdist, package)
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(package / "test_elmo_common.py"),
            "-p",
            "no:cacheprovider",
            "-rs",
            "-q",
            "--rootdir",
            tmp,
            "-c",
            "/dev/null",
            *args.pytest_args,
        ]
        return subprocess.call(command, cwd=tmp)


if __name__ == "__main__":
    raise SystemExit(main())
