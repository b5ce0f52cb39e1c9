"""The hdf5 importer, tested on the conventions with a hand-built file of known values."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from elmo_core import BiLM, BiLMOptions, WeightFileError, load_bilm_tf, save_bilm_tf
from elmo_core.files.weights import bilm_tf_dataset_shapes, count_non_finite, non_finite_error
from elmo_core.model.options import CharCNNOptions, LSTMOptions
from tests.conftest import make_tiny_elmo

# E=2 char embedding, banks of width 1 (2 filters) and 2 (3 filters) -> F=5, P=3, D=4, 1 layer.
OPTIONS = BiLMOptions(
    char_cnn=CharCNNOptions(embedding_dim=2, filters=((1, 2), (2, 3)), n_highway=1),
    lstm=LSTMOptions(dim=4, projection_dim=3, n_layers=1),
)


def counting(shape: tuple[int, ...], start: float) -> np.ndarray:
    """Distinct known values: start, start + 1, ... laid out in C order."""
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


@pytest.fixture
def hand_built(tmp_path):
    path = tmp_path / "hand.hdf5"
    shapes = bilm_tf_dataset_shapes(BiLM(OPTIONS))
    values = {name: counting(shape, 1000.0 * k) for k, (name, shape) in enumerate(sorted(shapes.items()))}
    with h5py.File(path, "w") as f:
        for name, array in values.items():
            f.create_dataset(name, data=array)
    bilm = BiLM(OPTIONS)
    load_bilm_tf(bilm, path)
    return bilm, values, path


def test_file_layout_has_the_published_names_and_shapes():
    shapes = bilm_tf_dataset_shapes(BiLM(OPTIONS))
    assert shapes["char_embed"] == (261, 2)
    assert shapes["CNN/W_cnn_1"] == (1, 2, 2, 3)
    assert shapes["CNN_high_0/W_carry"] == (5, 5)
    assert shapes["CNN_proj/W_proj"] == (5, 3)
    assert shapes["RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"] == (6, 16)
    assert shapes["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"] == (4, 3)
    assert len(shapes) == 1 + 4 + 4 + 2 + 2 * 3


def test_char_embedding_gets_a_zero_row_for_id_zero(hand_built):
    bilm, values, _ = hand_built
    table = bilm.char_cnn.embedding_table().detach().numpy()
    assert table.shape == (262, 2)
    assert (table[0] == 0).all()
    np.testing.assert_array_equal(table[1:], values["char_embed"])  # file row r = char id r + 1


def test_conv_kernel_drops_height_and_reverses_axes(hand_built):
    bilm, values, _ = hand_built
    tf = values["CNN/W_cnn_1"]  # [1, width=2, in=2, out=3]
    torch_w = bilm.char_cnn.convolutions[1].weight.detach().numpy()  # [out, in, width]
    for out in range(3):
        for inp in range(2):
            for w in range(2):
                assert torch_w[out, inp, w] == tf[0, w, inp, out]


def test_highway_transform_is_the_candidate_and_carry_the_gate(hand_built):
    bilm, values, _ = hand_built
    layer = bilm.char_cnn.highway.layers[0]
    np.testing.assert_array_equal(layer.weight.detach().numpy()[:5], values["CNN_high_0/W_transform"].T)
    np.testing.assert_array_equal(layer.weight.detach().numpy()[5:], values["CNN_high_0/W_carry"].T)
    np.testing.assert_array_equal(layer.bias.detach().numpy()[:5], values["CNN_high_0/b_transform"])
    np.testing.assert_array_equal(layer.bias.detach().numpy()[5:], values["CNN_high_0/b_carry"])


def test_lstm_kernel_split_transposed_and_gate_order_kept(hand_built):
    bilm, values, _ = hand_built
    cell = bilm.backward_layers.layers[0]
    w0 = values["RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"]  # [P_in + P, 4D], columns i, j, f, o
    np.testing.assert_array_equal(cell.input_linear.weight.detach().numpy(), w0[:3].T)
    np.testing.assert_array_equal(cell.state_linear.weight.detach().numpy(), w0[3:].T)
    # B unchanged: the +1 forget bias is added at run time, not folded in.
    np.testing.assert_array_equal(
        cell.input_linear.bias.detach().numpy(), values["RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/B"]
    )
    np.testing.assert_array_equal(
        cell.state_projection.weight.detach().numpy(), values["RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"].T
    )


def test_lstm_step_matches_the_tensorflow_formula():
    """One step of a cell with known weights, against docs/bilm_tf.md §4 written in numpy."""
    torch.manual_seed(0)
    bilm = BiLM(OPTIONS)
    cell = bilm.forward_layers.layers[0]
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0, 2.0)  # large, so that both clips bite
    x = np.random.default_rng(0).normal(size=(1, 3)).astype(np.float32)
    W0 = np.concatenate([cell.input_linear.weight.detach().numpy().T, cell.state_linear.weight.detach().numpy().T])
    B = cell.input_linear.bias.detach().numpy()
    WP = cell.state_projection.weight.detach().numpy().T
    z = np.concatenate([x, np.zeros((1, 3), np.float32)], 1) @ W0 + B
    i, j, f, o = np.split(z, 4, axis=1)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c = np.clip(sig(f + 1.0) * 0 + sig(i) * np.tanh(j), -3, 3)
    h = np.clip((sig(o) * np.tanh(c)) @ WP, -3, 3)
    out, (h_t, c_t) = cell(torch.from_numpy(x)[None], [1])
    np.testing.assert_allclose(out[0].detach().numpy(), h, atol=1e-5)
    np.testing.assert_allclose(c_t.detach().numpy(), c, atol=1e-5)


def test_save_then_load_is_bit_exact(tmp_path):
    elmo = make_tiny_elmo()
    path = tmp_path / "w.hdf5"
    save_bilm_tf(elmo, path)
    other = make_tiny_elmo(seed=1)
    load_bilm_tf(other, path)
    for (name, a), (_, b) in zip(elmo.bilm.state_dict().items(), other.bilm.state_dict().items()):
        assert torch.equal(a, b), name
    save_bilm_tf(other, tmp_path / "again.hdf5")
    with h5py.File(path, "r") as f, h5py.File(tmp_path / "again.hdf5", "r") as g:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            np.testing.assert_array_equal(f[name][()], g[name][()])


def test_missing_dataset_is_named(tmp_path, tiny_bilm_hdf5):
    _, weights = tiny_bilm_hdf5
    with h5py.File(weights, "a") as f:
        del f["CNN_high_0/W_carry"]
    with pytest.raises(WeightFileError, match=r"no dataset 'CNN_high_0/W_carry' \(expected shape \(12, 12\)\)"):
        load_bilm_tf(make_tiny_elmo(), weights)


def test_misshaped_dataset_names_both_shapes(tiny_bilm_hdf5):
    _, weights = tiny_bilm_hdf5
    with h5py.File(weights, "a") as f:
        del f["CNN_proj/W_proj"]
        f.create_dataset("CNN_proj/W_proj", data=np.zeros((12, 9), np.float32))
    with pytest.raises(
        WeightFileError, match=r"'CNN_proj/W_proj' has shape \(12, 9\), but the options imply \(12, 8\)"
    ):
        load_bilm_tf(make_tiny_elmo(), weights)


def test_not_an_hdf5_file(tmp_path):
    path = tmp_path / "weights.hdf5"
    path.write_bytes(b"this is not hdf5")
    with pytest.raises(WeightFileError, match="weights.hdf5 is not a readable hdf5 file"):
        load_bilm_tf(make_tiny_elmo(), path)
    with pytest.raises(WeightFileError, match="does not exist"):
        load_bilm_tf(make_tiny_elmo(), tmp_path / "missing.hdf5")


@pytest.mark.parametrize("rows_per_block", [None, 1, 3, 100])
def test_count_non_finite_counts_nan_and_inf_in_any_block_size(rows_per_block):
    tensor = torch.zeros(7, 4)
    tensor[0, 0], tensor[3, 2], tensor[6, 3] = float("nan"), float("inf"), -float("inf")
    assert count_non_finite(tensor, rows_per_block) == 3
    assert count_non_finite(torch.tensor(float("nan"))) == 1 and count_non_finite(torch.tensor(1.0)) == 0
    assert count_non_finite(torch.zeros(3, dtype=torch.long)) == 0
    assert count_non_finite(tensor.numpy()) == 3  # a numpy block, as load_bilm_tf reads them
    assert count_non_finite(np.zeros(3, dtype=np.int64)) == 0


def test_non_finite_error_names_the_place_the_count_and_the_fix():
    err = non_finite_error("model.safetensors", "tensor 'gamma'", 2, "Save it again.")
    assert isinstance(err, WeightFileError)
    assert str(err) == (
        "model.safetensors: tensor 'gamma' holds 2 NaN or infinite values, so every vector would be NaN. Save it again."
    )
