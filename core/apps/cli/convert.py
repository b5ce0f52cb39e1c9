"""`elmo convert`: between bilm-tf's files and a model folder.

elmo_core does not depend on transformers, so the Hugging Face model folder is written by
hf_elmo's plug-in `hf` of the group `elmo_core.converters`. `--to-hdf5` needs only the core.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ...files.text_files import check_input_file, check_output_is_new, check_output_spares_inputs
from ...model.errors import ElmoError

__all__ = ["convert"]


def convert(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATHS",
            help="OPTIONS WEIGHTS OUT_DIR, or MODEL_DIR OUT_PREFIX with --to-hdf5, or OUT_DIR with --download: "
            "see the forms above.",
        ),
    ],
    to_hdf5: Annotated[
        bool,
        typer.Option(
            "--to-hdf5",
            help="Write MODEL_DIR back to bilm-tf's files: OUT_PREFIX_options.json and OUT_PREFIX_weights.hdf5.",
        ),
    ] = False,
    download: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Download a published model (small, medium, original, original_5.5B) and convert it into OUT_DIR.",
        ),
    ] = None,
) -> None:
    """Convert between bilm-tf's files (options.json + weights.hdf5) and a model folder.

    elmo convert OPTIONS WEIGHTS OUT_DIR writes a complete model folder, code included. It
    loads with AutoModel.from_pretrained(OUT_DIR, trust_remote_code=True) and with every elmo
    command (--model OUT_DIR). Needs transformers (the package's hf extra).

    elmo convert --to-hdf5 MODEL_DIR OUT_PREFIX writes OUT_PREFIX_options.json and
    OUT_PREFIX_weights.hdf5. Every dataset is exactly the original's.

    elmo convert --download NAME OUT_DIR fetches a published model from AllenNLP's
    public storage and converts it on arrival.
    """
    _check_convert_paths(paths, to_hdf5, download)
    _check_convert_spares_inputs(paths, to_hdf5, download)
    _check_out_is_a_folder(
        paths[-1].parent if to_hdf5 else paths[-1], "the folder of OUT_PREFIX" if to_hdf5 else "OUT_DIR"
    )
    if to_hdf5:
        _write_bilm_tf_files(*paths)
        return
    converter = _hf_converter()
    out = converter.download_published(download, paths[0]) if download else converter.convert_bilm_tf_to_hf(*paths)
    typer.echo(f"wrote model folder {out}", err=True)


def _check_convert_paths(paths: list[Path], to_hdf5: bool, download: str | None) -> None:
    if to_hdf5 and download:
        raise ElmoError("--to-hdf5 and --download do not go together.")
    expected = (
        (1, "OUT_DIR") if download else (2, "MODEL_DIR OUT_PREFIX") if to_hdf5 else (3, "OPTIONS WEIGHTS OUT_DIR")
    )
    if len(paths) != expected[0]:
        raise ElmoError(
            f"this form of elmo convert takes {expected[1]}; got {len(paths)} path(s): {[str(p) for p in paths]}."
        )
    if not to_hdf5 and not download:
        check_input_file(paths[0], "OPTIONS")
        check_input_file(paths[1], "WEIGHTS")


def _check_out_is_a_folder(folder: Path, what: str) -> None:
    taken = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if taken is not None and not taken.is_dir():
        where = f"{taken} is a file" if taken == folder else f"{folder} lies inside {taken}, which is a file"
        raise ElmoError(f"{what} {where}, not a folder; give a folder's path (it is created if missing).")


def _bilm_tf_paths(prefix: Path) -> tuple[Path, Path]:
    return prefix.with_name(prefix.name + "_options.json"), prefix.with_name(prefix.name + "_weights.hdf5")


def _check_convert_spares_inputs(paths: list[Path], to_hdf5: bool, download: str | None) -> None:
    from ...files.model_folder import MODEL_FOLDER_FILES

    if to_hdf5:
        model_dir, prefix = paths
        inputs = [("a file of MODEL_DIR", p) for p in sorted(model_dir.glob("*")) if p.is_file()]
        options_path, weights_path = _bilm_tf_paths(prefix)
        outputs = [("OUT_PREFIX_options.json", options_path), ("OUT_PREFIX_weights.hdf5", weights_path)]
        check_output_spares_inputs(outputs, inputs)
        for name, path in outputs:
            check_output_is_new(name, path, "Give another OUT_PREFIX, or delete the old files first.")
        return
    if not download:
        check_output_spares_inputs(
            [], [("OPTIONS", paths[0]), ("WEIGHTS", paths[1])], folders=[("OUT_DIR", paths[2], MODEL_FOLDER_FILES)]
        )
    check_output_is_new(
        "OUT_DIR",
        paths[-1],
        "Give a fresh OUT_DIR (a new or empty folder), or delete the old model first.",
        patterns=MODEL_FOLDER_FILES,
        what="a model folder's files",
    )


def _write_bilm_tf_files(model_dir: Path, prefix: Path) -> None:
    import json

    from ...files.atomic_files import atomic_write
    from ...files.model_folder import load_model_folder
    from ...files.weights import save_bilm_tf

    elmo = load_model_folder(model_dir)
    options_path, weights_path = _bilm_tf_paths(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    data = elmo.options.to_dict()  # bilm-tf's two sections only, as the published files
    text = json.dumps({k: data[k] for k in ("lstm", "char_cnn")}, indent=2) + "\n"
    atomic_write(options_path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    save_bilm_tf(elmo, weights_path)
    typer.echo(f"wrote {options_path} and {weights_path}", err=True)


def _hf_converter() -> Any:
    from ...files.plugins import load_plugin

    return load_plugin(
        "elmo_core.converters",
        "hf",
        "elmo convert writes a transformers model folder: pip install 'elmo-bilm[hf]'.",
    )
