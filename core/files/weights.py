"""Import and export of the original bilm-tf / AllenNLP hdf5 weight files.

One table (`_bilm_tf_table`, docs/bilm_tf.md §9) maps each dataset to the parameter slices
it fills: `copy` as is, `linear` transposed (TF `[in, out]` -> torch `[out, in]`), `conv`
from TF `[1, width, in, out]` to torch `[out, in, width]`. The LSTM gate order `i, j, f, o`
is kept, and TF's +1 forget bias is added at run time, so an export is bit-exact.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from torch import nn

from ..model.bilm import BiLM
from ..model.errors import WeightFileError
from .atomic_files import atomic_path, check_free_space
from .hdf5_files import HDF5_FILE_BYTES, HDF5_OBJECT_BYTES, import_h5py, open_hdf5

if TYPE_CHECKING:
    from ..model.elmo import Elmo
    from ..model.options import BiLMOptions

__all__ = ["load_bilm_tf", "save_bilm_tf"]


class _Target(NamedTuple):
    parameter: str  # name inside the BiLM module
    kind: str  # "copy", "linear" or "conv"
    file_rows: slice | None = None  # rows of the file array
    param_rows: slice | None = None  # rows of the torch parameter


class _Dataset(NamedTuple):
    name: str
    shape: tuple[int, ...]
    targets: tuple[_Target, ...]


def _bilm_tf_table(bilm: BiLM) -> list[_Dataset]:
    options = bilm.options
    cc, lstm = options.char_cnn, options.lstm
    E, F, P, D = cc.embedding_dim, cc.n_filters, lstm.projection_dim, lstm.dim
    table = [_Dataset("char_embed", (cc.n_characters - 1, E), (_Target("char_cnn.char_embedding", "copy"),))]
    for i, (width, count) in enumerate(cc.filters):
        conv = f"char_cnn.convolutions.{i}"
        table.append(_Dataset(f"CNN/W_cnn_{i}", (1, width, E, count), (_Target(f"{conv}.weight", "conv"),)))
        table.append(_Dataset(f"CNN/b_cnn_{i}", (count,), (_Target(f"{conv}.bias", "copy"),)))
    candidate, gate = slice(0, F), slice(F, 2 * F)
    for k in range(cc.n_highway):
        layer = f"char_cnn.highway.layers.{k}"
        table += [
            _Dataset(f"CNN_high_{k}/W_transform", (F, F), (_Target(f"{layer}.weight", "linear", None, candidate),)),
            _Dataset(f"CNN_high_{k}/b_transform", (F,), (_Target(f"{layer}.bias", "copy", None, candidate),)),
            _Dataset(f"CNN_high_{k}/W_carry", (F, F), (_Target(f"{layer}.weight", "linear", None, gate),)),
            _Dataset(f"CNN_high_{k}/b_carry", (F,), (_Target(f"{layer}.bias", "copy", None, gate),)),
        ]
    if isinstance(bilm.char_cnn.projection, nn.Linear):
        table += [
            _Dataset("CNN_proj/W_proj", (F, P), (_Target("char_cnn.projection.weight", "linear"),)),
            _Dataset("CNN_proj/b_proj", (P,), (_Target("char_cnn.projection.bias", "copy"),)),
        ]
    for d, stack in enumerate(("forward_layers", "backward_layers")):
        for k in range(lstm.n_layers):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell"
            cell = f"{stack}.layers.{k}"
            input_size = P  # layer 0 reads the token vector, a higher layer the layer below
            table += [
                _Dataset(
                    f"{prefix}/W_0",
                    (input_size + P, 4 * D),
                    (
                        _Target(f"{cell}.input_linear.weight", "linear", slice(0, input_size)),
                        _Target(f"{cell}.state_linear.weight", "linear", slice(input_size, None)),
                    ),
                ),
                _Dataset(f"{prefix}/B", (4 * D,), (_Target(f"{cell}.input_linear.bias", "copy"),)),
                _Dataset(f"{prefix}/W_P_0", (D, P), (_Target(f"{cell}.state_projection.weight", "linear"),)),
            ]
    return table


def bilm_tf_dataset_shapes(bilm: BiLM | Elmo) -> dict[str, tuple[int, ...]]:
    """Every dataset an hdf5 weight file for this model holds, with its shape."""
    return {ds.name: ds.shape for ds in _bilm_tf_table(_as_bilm(bilm))}


def _to_torch(array: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "linear":
        return array.t()  # TF [in, out] -> torch Linear [out, in]
    if kind == "conv":
        return array[0].permute(2, 1, 0)  # TF [1, width, in, out] -> torch Conv1d [out, in, width]
    return array


def _from_torch(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "linear":
        return tensor.t()  # torch [out, in] -> TF [in, out]
    if kind == "conv":
        return tensor.permute(2, 1, 0)[None]  # torch [out, in, width] -> TF [1, width, in, out]
    return tensor


def load_bilm_tf(model: BiLM | Elmo, weight_file: str | os.PathLike[str]) -> None:
    """Fill a model's biLM with the weights of a bilm-tf/AllenNLP hdf5 file, in place.

    Args:
        model: A `BiLM`, or an `Elmo` (its scalar mixes keep their values), built from
            the file's `options.json`.
        weight_file: The hdf5 file (`..._weights.hdf5`).

    Raises:
        WeightFileError: if the file is missing, not hdf5 or locked, or a dataset is
            missing or has another shape than the options imply.
        ImportError: if h5py is not installed (`pip install 'elmo-bilm[hdf5]'`).
    """
    bilm = _as_bilm(model)
    path = Path(weight_file)
    params = dict(bilm.named_parameters())
    with _open_weight_file(path) as handle, torch.no_grad():
        for ds in _bilm_tf_table(bilm):
            _load_dataset(handle, ds, params, path)


def _open_weight_file(path: Path) -> Any:
    import_h5py("reading bilm-tf hdf5 weights")  # a missing extra first, before any check of the file
    if not path.exists():
        raise WeightFileError(f"weight file {path} does not exist. Check the path (and its working directory).")
    if path.is_dir():
        raise WeightFileError(
            f"{path} is a folder, not an hdf5 weight file. For a model folder use load_model_folder "
            "(or --model DIR); for bilm-tf files pass the ..._weights.hdf5 file itself."
        )
    try:
        return open_hdf5(path, "r", error=WeightFileError)  # a locked file: its own WeightFileError
    except WeightFileError:
        raise
    except Exception as err:  # OSError for a bad signature or a truncated file
        raise WeightFileError(
            f"{path} is not a readable hdf5 file ({err}). It may be truncated (an interrupted "
            "download) or another format; download or convert it again."
        ) from err


def check_bilm_tf_file(options: BiLMOptions, weight_file: str | os.PathLike[str], options_name: str) -> None:
    """Raise unless an hdf5 file holds every dataset `options` imply, allocating nothing.

    Args:
        options: The biLM options.
        weight_file: The hdf5 weights.
        options_name: How errors name the options (the options.json path).

    Raises:
        WeightFileError: for a missing or mis-shaped dataset, or a missing or unreadable file.
    """
    path = Path(weight_file)
    cc, lstm = options.char_cnn, options.lstm
    with _open_weight_file(path) as handle:
        counts = [
            ("lstm.n_layers", lstm.n_layers, "RNN_0/RNN/MultiRNNCell/Cell{}"),
            ("char_cnn.n_highway", cc.n_highway, "CNN_high_{}"),
            ("char_cnn.filters", len(cc.filters), "CNN/W_cnn_{}"),
        ]
        for key, declared, pattern in counts:
            held = next(k for k in range(declared + 1) if k == declared or pattern.format(k) not in handle)
            if held < declared:
                raise WeightFileError(
                    f"{options_name} declares {key} = {declared}, but {path} holds {held} "
                    f"(datasets '{pattern.format('*')}'). Check that the options belong to this weight file."
                )
        with torch.device("meta"):
            bilm = BiLM(options)
        for ds in _bilm_tf_table(bilm):
            _dataset_shape(handle, ds, path, options_name)


def _dataset_shape(handle: Any, ds: _Dataset, path: Path, options_name: str | None = None) -> Any:
    try:
        dataset = handle[ds.name] if ds.name in handle else None
        shape = tuple(dataset.shape) if dataset is not None else None
    except Exception as err:  # h5py raises OSError, KeyError or RuntimeError on damaged files
        raise _damaged(path, ds.name, err) from err
    if dataset is None:
        raise WeightFileError(
            f"{path} has no dataset '{ds.name}' (expected shape {ds.shape}). Is this a "
            "bilm-tf/AllenNLP ELMo weight file, and do the options match it?"
        )
    if shape != ds.shape:
        options = f"the options ({options_name})" if options_name else "the options"
        raise WeightFileError(
            f"{path}: dataset '{ds.name}' has shape {shape}, but {options} "
            f"imply {ds.shape}. Check that options.json belongs to this weight file."
        )
    return dataset


def _load_dataset(handle: Any, ds: _Dataset, params: dict[str, torch.nn.Parameter], path: Path) -> None:
    dataset = _dataset_shape(handle, ds, path)
    shape = ds.shape
    bad = 0
    for target in ds.targets:
        param = params[target.parameter]
        dest = param if target.param_rows is None else param[target.param_rows]
        rows = target.file_rows or slice(None)
        first, stop, _ = rows.indices(shape[0])
        for start, end in _row_blocks(shape, first, stop):
            try:
                block = np.asarray(dataset[start:end], dtype=np.float32)
            except Exception as err:
                raise _damaged(path, ds.name, err) from err
            bad += count_non_finite(block)
            _copy_rows(dest, torch.from_numpy(block), target.kind, start - first, end - first)
    if bad:
        raise non_finite_error(path, f"dataset '{ds.name}'", bad, "The file is damaged; download or convert it again.")


# Read in blocks of rows copied straight into the parameter: a weight is held once, plus one block.
_READ_BLOCK_BYTES = 4 * 2**20


def count_non_finite(values: torch.Tensor | np.ndarray, rows_per_block: int | None = None) -> int:
    """How many values are NaN or infinite (0 for integer values).

    Args:
        values: A tensor, or a numpy block of a file being read (counted with numpy, which
            keeps the peak memory of a read low).
        rows_per_block: Count a tensor this many rows at a time. None counts it at once.
    """
    if isinstance(values, np.ndarray):
        return int(values.size - np.count_nonzero(np.isfinite(values))) if values.dtype.kind == "f" else 0
    if not values.is_floating_point():
        return 0
    if values.dim() == 0:
        return int(not bool(torch.isfinite(values)))
    step = rows_per_block or max(values.shape[0], 1)
    return sum(
        int(torch.isfinite(values[start : start + step]).logical_not_().sum())
        for start in range(0, values.shape[0], step)
    )


def non_finite_error(source: object, what: str, count: int, fix: str) -> WeightFileError:
    """The error for weights holding NaN or infinite values.

    Args:
        source: The file or folder the weights came from.
        what: The tensor or dataset, e.g. "tensor 'bilm.char_cnn.projection.bias'".
        count: How many values are not finite.
        fix: The advice that ends the message.
    """
    return WeightFileError(
        f"{source}: {what} holds {count} NaN or infinite values, so every vector would be NaN. {fix}"
    )


def _row_blocks(shape: tuple[int, ...], first: int, stop: int) -> list[tuple[int, int]]:
    if len(shape) == 4:  # conv kernels [1, width, in, out] (at most 0.5 MB): whole
        return [(first, stop)]
    row_bytes = 4 * int(np.prod(shape[1:], dtype=np.int64))
    step = max(1, _READ_BLOCK_BYTES // max(row_bytes, 1))
    return [(a, min(a + step, stop)) for a in range(first, stop, step)]


def _copy_rows(dest: torch.Tensor, block: torch.Tensor, kind: str, start: int, end: int) -> None:
    if kind == "linear":  # file rows are torch columns (TF [in, out] -> torch [out, in])
        dest[:, start:end].copy_(_to_torch(block, kind))
    elif kind == "conv":
        dest.copy_(_to_torch(block, kind))
    else:
        dest[start:end].copy_(block)


def _damaged(path: Path, name: str, err: Exception) -> WeightFileError:
    return WeightFileError(
        f"{path}: dataset '{name}' cannot be read ({type(err).__name__}: {err}). The file "
        "is damaged (truncated or corrupted); download or convert it again."
    )


def save_bilm_tf(model: BiLM | Elmo, weight_file: str | Path) -> None:
    """Write a model's biLM weights in the bilm-tf/AllenNLP hdf5 layout (float32), atomically.

    The inverse of `load_bilm_tf`, bit for bit.

    Raises:
        ElmoError: if the file system has no room (also an `OSError` with errno ENOSPC).
        WeightFileError: if another process holds the temporary file locked.
        ImportError: if h5py is not installed.
    """
    bilm = _as_bilm(model)
    path = Path(weight_file)
    params = dict(bilm.named_parameters())
    table = _bilm_tf_table(bilm)
    needed = sum(4 * math.prod(ds.shape) + HDF5_OBJECT_BYTES for ds in table) + HDF5_FILE_BYTES
    with atomic_path(path) as tmp:
        check_free_space(tmp, needed, f"weight file {path}")  # HDF5 must never meet a full disk (it crashes)
        with open_hdf5(tmp, "w", error=WeightFileError) as handle, torch.no_grad():
            for ds in table:
                array = torch.zeros(ds.shape, dtype=torch.float32)
                for target in ds.targets:
                    param = params[target.parameter]
                    piece = param if target.param_rows is None else param[target.param_rows]
                    value = _from_torch(piece.detach().float().cpu(), target.kind)
                    if target.file_rows is None:
                        array.copy_(value)
                    else:
                        array[target.file_rows] = value
                handle.create_dataset(ds.name, data=array.numpy())


def _as_bilm(model: BiLM | Elmo) -> BiLM:
    bilm = getattr(model, "bilm", model)
    if not isinstance(bilm, BiLM):
        raise TypeError(f"expected a BiLM or an Elmo; got {type(model).__name__}.")
    return bilm
