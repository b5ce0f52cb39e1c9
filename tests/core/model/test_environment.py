"""The environment a launcher leaves: empty means unset, anything else invalid is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from elmo_core.model.environment import VARIABLES, check_environment, environment_value
from elmo_core.model.errors import ElmoError

PARSED = sorted(name for name, variable in VARIABLES.items() if variable.parse is not str)
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("name", sorted(VARIABLES))
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_or_blank_variable_means_unset(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert environment_value(name) == VARIABLES[name].default


@pytest.mark.parametrize("name", PARSED)
@pytest.mark.parametrize("value", ["two", "2.0", "-2", "0x2", "²"])
def test_a_bad_variable_is_one_line_naming_it_its_value_and_what_it_accepts(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ElmoError) as caught:
        environment_value(name)
    message = str(caught.value)
    assert message.startswith(f"{name} must be {VARIABLES[name].accepts}; got {value!r}.")
    assert "\n" not in message
    with pytest.raises(ElmoError, match=f"^{name} must be"):
        check_environment()


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("WORLD_SIZE", " 2 ", 2),  # padded, as `export WORLD_SIZE=" 2"` leaves it; torch's int() reads it too
        ("RANK", "0", 0),
        ("LOCAL_RANK", "3", 3),
        ("ELMO_THREADS", " Torch ", "torch"),
        ("ELMO_THREADS", "4", 4),
        ("ELMO_COMPILE", "0", False),
        ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0", 0),
    ],
)
def test_a_good_variable_is_read_with_its_spaces_ignored(monkeypatch, name, value, expected):
    monkeypatch.setenv(name, value)
    assert environment_value(name) == expected


@pytest.mark.parametrize(("name", "value"), [("ELMO_THREADS", "0"), ("WORLD_SIZE", "0"), ("ELMO_COMPILE", "2")])
def test_a_number_out_of_range_is_refused(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ElmoError, match=f"^{name} must be .*; got '{value}'"):
        environment_value(name)


def _elmo(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "elmo"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
    )


@pytest.mark.parametrize("name", PARSED)
def test_every_command_refuses_a_bad_variable_in_one_line_before_any_work(tmp_path, name):
    held = tmp_path / "held.txt"
    args = ["data", "hold-out", str(tmp_path / "missing.txt"), "--out-kept", "k", "--out-held-out", str(held)]
    ran = _elmo(args, {name: "two"}, tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.splitlines() == [
        f"error: {name} must be {VARIABLES[name].accepts}; got 'two'. Set it to one of those, or unset it "
        f"(empty means unset: {VARIABLES[name].unset})."
    ]


def test_elmo_embed_runs_with_the_empty_variables_a_launcher_leaves(tmp_path):
    # `export WORLD_SIZE=` used to stop elmo embed with a bare "invalid literal for int()".
    text = tmp_path / "in.txt"
    text.write_text("a b c\n", encoding="utf-8")
    empty = {name: "" for name in VARIABLES}
    ran = _elmo(["embed", "--no-progress", str(text), str(tmp_path / "out.h5")], empty, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "out.h5").is_file()
