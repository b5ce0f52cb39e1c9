"""Convert bilm-tf / AllenNLP ELMo files into a model folder, and fetch the published ones.

The folder is what `save_pretrained` writes, so it loads with `AutoModel.from_pretrained(OUT_DIR,
trust_remote_code=True)` and with `elmo_core.load_model_folder`. The weights are copied exactly.
`elmo convert` reaches this module as the `hf` plug-in of `elmo_core.converters`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from elmo_core import load_bilm_tf, read_options
from elmo_core.face_api import atomic_path, disk_full_error

from .configuration_elmo import ElmoConfig
from .modeling_elmo import ElmoModel
from .tokenization_elmo import ElmoTokenizer

__all__ = ["PUBLISHED_MODELS", "convert_bilm_tf_to_hf", "download_published", "published_urls"]

logger = logging.getLogger(__name__)

BASE_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
PUBLISHED_MODELS = {
    # short name (as elmo_core.PUBLISHED_OPTIONS) -> file stem tag (docs/bilm_tf.md §10)
    "small": "2x1024_128_2048cnn_1xhighway",
    "medium": "2x2048_256_2048cnn_1xhighway",
    "original": "2x4096_512_2048cnn_2xhighway",
    "original_5.5B": "2x4096_512_2048cnn_2xhighway_5.5B",
}
"""The four models AllenNLP published, by short name."""


def convert_bilm_tf_to_hf(
    options_file: str | os.PathLike, weight_file: str | os.PathLike, out_dir: str | os.PathLike, **settings: Any
) -> Path:
    """Write a complete model folder for a bilm-tf options file and hdf5 weight file.

    Args:
        options_file: bilm-tf `options.json`.
        weight_file: The hdf5 weights (e.g. `..._weights.hdf5`).
        out_dir: The folder to write (created if needed, its files replaced).
        **settings: `ElmoConfig` settings, e.g. `num_output_representations=2`.

    Returns:
        `out_dir` as a Path.

    Raises:
        OptionsError: for an invalid options file.
        WeightFileError: for a missing or unreadable weight file, or a dataset whose shape
            does not match the options.
    """
    options = read_options(options_file)
    model = ElmoModel(ElmoConfig.from_options(options, **settings))
    load_bilm_tf(model.bilm, weight_file)  # fills model.bilm exactly, the mixes keep w = 0, gamma = 1
    out = Path(out_dir)
    model.save_pretrained(out)
    ElmoTokenizer.from_options(options).save_pretrained(out)
    logger.info("converted %s + %s to %s", options_file, weight_file, out)
    return out


def published_urls(name: str) -> tuple[str, str]:
    """The (options.json, weights.hdf5) URLs of a published model.

    Raises:
        ValueError: for an unknown name.
    """
    if name not in PUBLISHED_MODELS:
        raise ValueError(f"unknown published ELMo model {name!r}; choose one of {sorted(PUBLISHED_MODELS)}.")
    tag = PUBLISHED_MODELS[name]
    stem = f"{BASE_URL}/{tag}/elmo_{tag}"
    return f"{stem}_options.json", f"{stem}_weights.hdf5"


def _fetch(url: str, dest: Path) -> None:
    import urllib.request

    with atomic_path(dest) as tmp:
        try:
            with urllib.request.urlopen(url) as response, open(tmp, "wb") as out:  # noqa: S310 - fixed https URLs
                shutil.copyfileobj(response, out, length=1 << 20)
        except OSError as err:  # URLError, timeouts, refused connections: one line, and what to do
            full = disk_full_error(err, dest)
            if full is not None:
                raise full from err
            reason = getattr(err, "reason", None) or err
            raise ConnectionError(
                f"could not download {url} ({reason}). Check the network connection, or download the "
                "options and weights files yourself and run: elmo convert OPTIONS WEIGHTS OUT_DIR."
            ) from None


def download_published(
    name: str, out_dir: str | os.PathLike, *, keep_originals: str | os.PathLike | None = None, **settings: Any
) -> Path:
    """Download one of the four published models and convert it into a model folder.

    Args:
        name: "small", "medium", "original" or "original_5.5B".
        out_dir: The model folder to write.
        keep_originals: A folder to keep the downloaded files in, reused if they are there.
            Default: a temporary folder, deleted afterwards.
        **settings: `ElmoConfig` settings, as for `convert_bilm_tf_to_hf`.

    Raises:
        ValueError: for an unknown name.
        ConnectionError: if a download fails. Nothing is written under the final names.
    """
    urls = published_urls(name)
    with tempfile.TemporaryDirectory(prefix="elmo-download-") as tmp:
        folder = Path(keep_originals) if keep_originals is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for url in urls:
            path = folder / url.rsplit("/", 1)[1]
            if not path.is_file():
                logger.info("downloading %s", url)
                _fetch(url, path)
            paths.append(path)
        return convert_bilm_tf_to_hf(paths[0], paths[1], out_dir, **settings)
