"""Converted weights into the user's own model file (cudnn_rnn.convert.write_into, convert --into).

Each case writes a copy of a real model file (torch.save, a safetensors state_dict, a Keras 3
.keras and .weights.h5), reads the copy back with the readers and checks: the RNN's tensors are
the converted ones, exactly; every other byte of the file is the model's own, but the replaced
tensors' bytes and (in a zip archive) their member's CRC-32 fields; the model is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn import GRU, LSTM, RNN, RNNConfig
from cudnn_rnn.files._safetensors import encode
from cudnn_rnn.cli.convert import main as convert_main
from cudnn_rnn.convert import (InexactConversionError, from_format, read_file, stack, to_format, write_file,
                               write_into)
from cudnn_rnn.convert.into import safetensors_places
from cudnn_rnn.convert.into._torch_zip import state_dicts
from cudnn_rnn.convert.readers import FileReadError
from cudnn_rnn.convert.readers._keras_file import WEIGHTS_MEMBER, locate
from cudnn_rnn.files import write_bytes

torch = pytest.importorskip("torch")


# ---- model files -------------------------------------------------------------------------------------------
class Tagger(torch.nn.Module):
    """Embedding -> encoder.rnn (an nn.LSTM or nn.GRU) -> head, as users' models are."""

    def __init__(self, rnn: torch.nn.Module) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 4)
        self.encoder = torch.nn.Module()
        self.encoder.rnn = rnn
        self.head = torch.nn.Linear(rnn.hidden_size * (2 if rnn.bidirectional else 1), 3)


def tagger(rnn: torch.nn.Module | None = None, seed: int = 0) -> Tagger:
    torch.manual_seed(seed)
    return Tagger(rnn or torch.nn.LSTM(4, 8, num_layers=2, bidirectional=True))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def crc_fields(path: Path, members: list[str]) -> set[int]:
    """The byte positions of the CRC-32 fields of ``members``: local headers and central directory entries."""
    data, positions = path.read_bytes(), set()
    with zipfile.ZipFile(path) as archive:
        where = archive.start_dir
        for info in archive.infolist():
            name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, where + 28)
            if info.filename in members:
                positions.update(range(where + 16, where + 20))
                positions.update(range(info.header_offset + 14, info.header_offset + 18))
                if info.flag_bits & 0x8:  # a data descriptor after the data: [signature] CRC-32, sizes
                    local_name, local_extra = struct.unpack_from("<HH", data, info.header_offset + 26)
                    after = info.header_offset + 30 + local_name + local_extra + info.compress_size
                    at = after + 4 if data[after:after + 4] == b"PK\x07\x08" else after
                    positions.update(range(at, at + 4))
            where += 46 + name_length + extra_length + comment_length
    return positions


def changed_bytes(before: Path, after: Path) -> np.ndarray:
    a, b = np.frombuffer(before.read_bytes(), np.uint8), np.frombuffer(after.read_bytes(), np.uint8)
    assert a.size == b.size
    return np.flatnonzero(a != b)


def assert_only(changed: np.ndarray, spans: list[tuple[int, int]], extra: set[int] = frozenset()) -> None:
    """Every changed byte lies in one of ``spans`` or at one of ``extra``."""
    allowed = np.zeros(int(changed.max(initial=0)) + 1, bool)
    for low, high in spans:
        allowed[low:high] = True
    allowed[[position for position in extra if position < allowed.size]] = True
    outside = [int(position) for position in changed if not allowed[position]]
    assert not outside, f"bytes changed outside the replaced tensors: {outside[:10]}"


# ---- torch.save ------------------------------------------------------------------------------------------------
def test_a_parent_modules_state_dict_gets_the_rnn_and_nothing_else(tmp_path: Path) -> None:
    model = tmp_path / "model.pt"
    torch.save(tagger().state_dict(), model)
    before = sha(model)
    layer = LSTM(4, 8, num_layers=2, bidirectional=True, seed=7)
    written = write_into(model, tmp_path / "tuned.pt", layer)  # the prefix is inferred: the only RNN
    assert written.fmt == "torch" and "16 tensor(s) of the RNN under 'encoder.rnn.'" in written.what
    assert sha(model) == before
    [found] = read_file(tmp_path / "tuned.pt")
    assert found.name == "encoder.rnn"
    assert np.array_equal(found.to_params().value, layer.params)
    old, new = torch.load(model), torch.load(tmp_path / "tuned.pt")
    assert list(old) == list(new)
    for key in old:
        if not key.startswith("encoder.rnn."):
            assert torch.equal(old[key], new[key]), key
    spans = [place.span() for key, place in state_dicts(str(model))[0].tensors.items()
             if key.startswith("encoder.rnn.")]
    members = sorted({place.member for place in state_dicts(str(model))[0].tensors.values()
                      if place.member and place.member.split("/data/")[0]})
    assert_only(changed_bytes(model, tmp_path / "tuned.pt"), spans, crc_fields(model, members))
    with zipfile.ZipFile(tmp_path / "tuned.pt") as archive:
        assert archive.testzip() is None


def test_a_checkpoint_dict_and_an_explicit_prefix(tmp_path: Path) -> None:
    net = tagger(torch.nn.GRU(4, 6), seed=1)
    model = tmp_path / "checkpoint.pt"
    torch.save({"model": net.state_dict(), "epoch": 7, "lr": 0.5}, model)
    layer = GRU(4, 6, seed=2)
    for prefix in ("encoder.rnn", "encoder.rnn."):
        write_into(model, tmp_path / "out.pt", layer, prefix=prefix, key="model")
        saved = torch.load(tmp_path / "out.pt")
        assert saved["epoch"] == 7 and saved["lr"] == 0.5
        tensors = to_format("torch", layer.params, layer.config).value
        for name, value in tensors.items():
            assert np.array_equal(saved["model"][f"encoder.rnn.{name}"].numpy(), value), name


def test_several_rnns_are_told_apart_by_their_shapes_or_by_prefix(tmp_path: Path) -> None:
    torch.manual_seed(0)
    parent = torch.nn.ModuleDict({"a": torch.nn.LSTM(4, 8), "b": torch.nn.LSTM(4, 5)})
    model = tmp_path / "two.pt"
    torch.save(parent.state_dict(), model)
    write_into(model, tmp_path / "out.pt", LSTM(4, 5, seed=3))  # only b has these shapes
    assert np.array_equal(read_file(tmp_path / "out.pt", prefix="b")[0].to_params().value, LSTM(4, 5, seed=3).params)
    torch.save(torch.nn.ModuleDict({"a": torch.nn.LSTM(4, 8), "b": torch.nn.LSTM(4, 8)}).state_dict(), model)
    with pytest.raises(ValueError, match=r"holds 2 RNNs \(a \(PyTorch nn.LSTM state_dict\); b .*\) and 2 have the "
                                         r"converted RNN's shapes: pick one with prefix="):
        write_into(model, tmp_path / "out.pt", LSTM(4, 8, seed=3))
    write_into(model, tmp_path / "out.pt", LSTM(4, 8, seed=3), prefix="a")
    saved = torch.load(tmp_path / "out.pt")
    assert np.array_equal(saved["a.weight_hh_l0"].numpy(), to_format("torch", LSTM(4, 8, seed=3).params,
                                                                     LSTM(4, 8, seed=3).config).value["weight_hh_l0"])
    assert torch.equal(saved["b.weight_hh_l0"], torch.load(model)["b.weight_hh_l0"])


@pytest.mark.parametrize("layer, match", [
    (LSTM(4, 8, num_layers=2, seed=0), r"the model's tensor 'encoder.rnn.weight_ih_l0_reverse' has no counterpart"),
    (LSTM(5, 8, num_layers=2, bidirectional=True, seed=0),
     r"tensor 'encoder.rnn.weight_ih_l0' has shape \(32, 4\) in the model; the converted RNN's is \(32, 5\)"),
    (GRU(4, 8, num_layers=2, bidirectional=True, seed=0),
     r"tensor 'encoder.rnn.weight_ih_l0' has shape \(32, 4\) in the model; the converted RNN's is \(24, 4\)"),
    (LSTM(4, 8, num_layers=3, bidirectional=True, seed=0), r"the converted RNN has tensor 'weight_ih_l2'"),
])
def test_a_mismatch_names_the_first_tensor_that_differs(tmp_path: Path, layer, match: str) -> None:
    model = tmp_path / "model.pt"
    torch.save(tagger().state_dict(), model)
    with pytest.raises(ValueError, match=match):
        write_into(model, tmp_path / "out.pt", layer, prefix="encoder.rnn")
    assert not (tmp_path / "out.pt").exists() and not list(tmp_path.glob(".out.pt*"))


def test_model_dtype_is_kept_exactly_or_rounded_when_allowed(tmp_path: Path) -> None:
    model = tmp_path / "half.pt"
    torch.save(torch.nn.GRU(3, 4).half().state_dict(), model)
    layer = GRU(3, 4, seed=5)  # float32 values that float16 cannot hold
    with pytest.raises(InexactConversionError, match=r"tensor 'weight_ih_l0' is float16 in the model; the "
                                                     r"converted float32 values do not all fit it exactly"):
        write_into(model, tmp_path / "out.pt", layer)
    written = write_into(model, tmp_path / "out.pt", layer, allow_approximation=True)
    assert any("rounded" in note for note in written.approximations)
    saved = torch.load(tmp_path / "out.pt")
    assert saved["weight_ih_l0"].dtype == torch.float16
    expected = to_format("torch", layer.params, layer.config).value["weight_ih_l0"].astype(np.float16)
    assert np.array_equal(saved["weight_ih_l0"].numpy(), expected)
    model64 = tmp_path / "double.pt"
    torch.save(torch.nn.GRU(3, 4).double().state_dict(), model64)
    assert write_into(model64, tmp_path / "out64.pt", layer).approximations == ()  # float32 -> float64: exact


def test_a_model_without_biases_takes_zero_biases_only(tmp_path: Path) -> None:
    model = tmp_path / "nobias.pt"
    torch.save(torch.nn.RNN(3, 4, bias=False).state_dict(), model)
    config = RNNConfig(rnn_mode="rnn_tanh", num_layers=1, num_units=4, input_size=3)
    tensors = {"weight_ih_l0": np.full((4, 3), 0.25, np.float32), "weight_hh_l0": np.full((4, 4), 0.5, np.float32),
               "bias_ih_l0": np.zeros(4, np.float32), "bias_hh_l0": np.zeros(4, np.float32)}
    params = from_format("torch", tensors, config).value
    write_into(model, tmp_path / "out.pt", (params, config))
    assert np.array_equal(torch.load(tmp_path / "out.pt")["weight_hh_l0"].numpy(), tensors["weight_hh_l0"])
    with pytest.raises(ValueError, match=r"the model stores no 'bias_hh_l0' \(a layer without biases\); the "
                                         "converted values are not all zero"):
        biased = {**tensors, "bias_hh_l0": np.full(4, 0.1, np.float32)}
        write_into(model, tmp_path / "out.pt", (from_format("torch", biased, config).value, config))


def test_what_cannot_be_written_into_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model.pt"
    torch.save(tagger().state_dict(), model)
    layer = LSTM(4, 8, num_layers=2, bidirectional=True, seed=7)
    with pytest.raises(ValueError, match=r"must end in '.pt' as well; got '.safetensors'"):
        write_into(model, tmp_path / "out.safetensors", layer)
    with pytest.raises(ValueError, match="is model itself; model is never modified"):
        write_into(model, model, layer)
    with pytest.raises(ValueError, match="name= picks a Keras layer"):
        write_into(model, tmp_path / "out.pt", layer, name="lstm")
    legacy = tmp_path / "legacy.pt"
    torch.save(tagger().state_dict(), legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(FileReadError, match="a legacy \\(non-zip\\) torch.save file"):
        write_into(legacy, tmp_path / "out2.pt", layer)
    onnx_like = tmp_path / "params.npz"
    write_file(onnx_like, layer)
    with pytest.raises(ValueError, match="weights can be written into PyTorch"):
        write_into(onnx_like, tmp_path / "x.npz", layer)
    with pytest.raises(TypeError, match="rnn must be a FoundRNN"):
        write_into(model, tmp_path / "out.pt", "lstm")


# ---- storage shared with the RNN's tensors ----------------------------------------------------------------------
class TiedTagger(torch.nn.Module):
    """encoder.rnn (an nn.LSTM(4, 4)) and a decoder whose weight is the LSTM's weight_hh_l0: tied weights."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Module()
        self.encoder.rnn = torch.nn.LSTM(4, 4)
        self.decoder = torch.nn.Linear(4, 16, bias=False)  # weight (16, 4), weight_hh_l0's shape
        self.decoder.weight = self.encoder.rnn.weight_hh_l0


def new_torch_tensors(layer: LSTM) -> dict[str, np.ndarray]:
    return to_format("torch", layer.params, layer.config).value


def test_tied_weights_are_refused_unless_change_shared(tmp_path: Path) -> None:
    torch.manual_seed(0)
    tied = TiedTagger()
    model, out = tmp_path / "tied.pt", tmp_path / "out.pt"
    torch.save(tied.state_dict(), model)
    before = sha(model)
    layer = LSTM(4, 4, seed=3)
    with pytest.raises(ValueError, match=r"^tensor 'encoder.rnn.weight_hh_l0' of model '.*tied.pt' shares its storage "
                                         r"with tensor 'decoder.weight' \(tied weights, or a view\), which would "
                                         r"change with the RNN: pass change_shared=True to let"):
        write_into(model, out, layer)
    assert not out.exists() and not list(tmp_path.glob(".out.pt*")) and sha(model) == before
    write_into(model, out, layer, change_shared=True)
    new = new_torch_tensors(layer)
    loaded = TiedTagger()
    loaded.load_state_dict(torch.load(out))
    assert np.array_equal(loaded.decoder.weight.detach().numpy(), new["weight_hh_l0"])  # it changed with the RNN
    saved = torch.load(out)
    assert saved["decoder.weight"].untyped_storage().data_ptr() == saved["encoder.rnn.weight_hh_l0"].untyped_storage(
        ).data_ptr()  # and is still tied
    untied = {key: value.clone() for key, value in tied.state_dict().items()}  # no sharing: written as before
    torch.save(untied, model)
    write_into(model, out, layer)
    saved = torch.load(out)
    assert torch.equal(saved["decoder.weight"], untied["decoder.weight"])
    assert np.array_equal(saved["encoder.rnn.weight_hh_l0"].numpy(), new["weight_hh_l0"])


def test_a_dict_of_parameters_is_written_into_like_a_state_dict(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, out = tmp_path / "parameters.pt", tmp_path / "out.pt"
    torch.save(dict(torch.nn.LSTM(3, 4).named_parameters()), model)
    layer = LSTM(3, 4, seed=5)
    write_into(model, out, layer)
    saved = torch.load(out)
    for name, value in new_torch_tensors(layer).items():
        assert np.array_equal(saved[name].detach().numpy(), value), name


def test_a_saved_view_of_an_rnn_weight_is_refused_unless_change_shared(tmp_path: Path) -> None:
    torch.manual_seed(1)
    state = torch.nn.LSTM(4, 4).state_dict()
    state["probe"] = state["weight_ih_l0"][4:8]  # a view: rows 4 to 8 of the same storage
    model, out = tmp_path / "view.pt", tmp_path / "out.pt"
    torch.save(state, model)
    layer = LSTM(4, 4, seed=4)
    with pytest.raises(ValueError, match=r"tensor 'weight_ih_l0' of model .* shares its storage with tensor 'probe' "
                                         r"\(tied weights, or a view\).*pass change_shared=True"):
        write_into(model, out, layer)
    write_into(model, out, layer, change_shared=True)
    saved = torch.load(out)
    assert np.array_equal(saved["probe"].numpy(), new_torch_tensors(layer)["weight_ih_l0"][4:8])


def test_sharing_is_found_anywhere_in_a_checkpoint_and_only_where_elements_meet(tmp_path: Path) -> None:
    torch.manual_seed(2)
    state = torch.nn.LSTM(4, 4).state_dict()
    model, out = tmp_path / "checkpoint.pt", tmp_path / "out.pt"
    layer = LSTM(4, 4, seed=5)
    refused = {  # checkpoint -> the other tensor named
        "optimizer/state/0/exp_avg": {"model": state, "optimizer": {"state": {0: {"exp_avg": state["bias_hh_l0"]}}}},
        "ema/x/1": {"model": state, "ema": {"x": [torch.zeros(2), state["bias_ih_l0"][3:]]}},
        "ema/weight_ih_l0": {"model": state, "ema": state},  # the same mapping twice: the same tensors
    }
    for other, checkpoint in refused.items():
        torch.save(checkpoint, model)
        with pytest.raises(ValueError, match=f"shares its storage with tensor '{other}'"):
            write_into(model, out, layer, key="model")
        write_into(model, out, layer, key="model", change_shared=True)
    # the RNN's tensors as views of one flat storage (as cuDNN keeps them), a tensor interleaved with one of them
    # (every other column), another tensor in that storage past them: no element shared, so written as before
    flat = torch.arange(200, dtype=torch.float32)
    interleaved = torch.zeros(16, 8)
    flattened, start = {}, 0
    for key, value in state.items():
        flattened[key] = flat[start:start + value.numel()].view(value.shape)
        start += value.numel()
    flattened["weight_ih_l0"] = interleaved[:, ::2]
    flattened["odd_columns"], flattened["tail"] = interleaved[:, 1::2], flat[start:]
    torch.save(flattened, model)
    write_into(model, out, layer)
    saved, new = torch.load(out), new_torch_tensors(layer)
    assert torch.equal(saved["odd_columns"], torch.zeros(16, 4)) and torch.equal(saved["tail"], flat[start:])
    for key, value in new.items():
        assert np.array_equal(saved[key].numpy(), value), key
    flattened["column_2"] = interleaved[:, 2]  # a column of weight_ih_l0: shared
    torch.save(flattened, model)
    with pytest.raises(ValueError, match="tensor 'weight_ih_l0' of model .* shares its storage with tensor 'column_2'"):
        write_into(model, out, layer)


def test_two_tied_rnn_tensors_take_new_values_only_where_they_agree(tmp_path: Path) -> None:
    torch.manual_seed(3)
    rnn = torch.nn.RNN(4, 4)
    rnn.weight_hh_l0 = rnn.weight_ih_l0  # (4, 4) both: tied inside the RNN
    model, out = tmp_path / "self_tied.pt", tmp_path / "out.pt"
    torch.save(rnn.state_dict(), model)
    layer = RNN(4, 4, seed=6)
    for change_shared in (False, True):  # no file can hold both: refused either way
        with pytest.raises(ValueError, match=r"tensors 'weight_ih_l0' and 'weight_hh_l0' share storage in the model "
                                             r"\(tied\) and their new values differ there"):
            write_into(model, out, layer, change_shared=change_shared)
        assert not out.exists() and not list(tmp_path.glob(".out.pt*"))
    tensors = new_torch_tensors(layer)
    tensors["weight_hh_l0"] = tensors["weight_ih_l0"].copy()
    write_into(model, out, (from_format("torch", tensors, layer.config).value, layer.config))
    saved = torch.load(out)
    assert np.array_equal(saved["weight_hh_l0"].numpy(), tensors["weight_ih_l0"])
    assert saved["weight_hh_l0"].untyped_storage().data_ptr() == saved["weight_ih_l0"].untyped_storage().data_ptr()


def test_a_safetensors_file_whose_tensors_overlap_is_refused(tmp_path: Path) -> None:
    tensors = new_torch_tensors(LSTM(4, 4, seed=1))
    header, data = {}, b""
    for key, value in tensors.items():
        header[key] = {"dtype": "F32", "shape": list(value.shape),
                       "data_offsets": [len(data), len(data) + value.nbytes]}
        data += value.astype("<f4").tobytes()
    header["decoder.weight"] = dict(header["weight_hh_l0"])  # the same bytes: tied, by hand
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    model, out = tmp_path / "overlap.safetensors", tmp_path / "out.safetensors"
    write_bytes(model, struct.pack("<Q", len(text)) + text + data)
    for change_shared in (False, True):  # the safetensors package refuses such a file: nothing can load it
        with pytest.raises(FileReadError, match="a damaged safetensors file: invalid offset for tensor"):
            write_into(model, out, LSTM(4, 4, seed=2), change_shared=change_shared)
    assert not out.exists()


# ---- safetensors ----------------------------------------------------------------------------------------------
def test_a_safetensors_state_dict_changes_only_in_the_rnns_bytes(tmp_path: Path) -> None:
    state = {key: value.numpy() for key, value in tagger(torch.nn.GRU(4, 6, bidirectional=True)).state_dict().items()}
    state["positions"] = np.arange(7, dtype=np.int64)  # tensors of other dtypes stay as they are
    state["scale"] = np.ones(3, np.uint8)
    model = tmp_path / "model.safetensors"
    write_bytes(model, encode(state))
    layer = GRU(4, 6, bidirectional=True, seed=9)
    write_into(model, tmp_path / "out.safetensors", layer)
    [found] = read_file(tmp_path / "out.safetensors")
    assert np.array_equal(found.to_params().value, layer.params)
    spans = [place.span() for key, place in safetensors_places(str(model)).items() if key.startswith("encoder.rnn.")]
    assert_only(changed_bytes(model, tmp_path / "out.safetensors"), spans)


# ---- Keras ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_a_two_layer_network_fills_two_keras_layers(tmp_path: Path, suffix: str) -> None:
    pytest.importorskip("h5py")
    config = RNNConfig(rnn_mode="gru", num_layers=2, num_units=5, input_size=3, direction="bidirectional")
    model = tmp_path / f"model{suffix}"
    write_file(model, GRU(3, 5, num_layers=2, bidirectional=True, seed=1))
    layer = GRU(3, 5, num_layers=2, bidirectional=True, seed=2)
    written = write_into(model, tmp_path / f"out{suffix}", layer)  # the model's two layers, in order
    assert written.fmt == "keras"
    assert np.array_equal(stack(read_file(tmp_path / f"out{suffix}")).to_params().value, layer.params)
    names = [item.name for item in read_file(model)]
    write_into(model, tmp_path / f"named{suffix}", layer, name=names)
    assert (tmp_path / f"named{suffix}").read_bytes() == (tmp_path / f"out{suffix}").read_bytes()
    start = 0
    if suffix == ".keras":
        with zipfile.ZipFile(model) as archive:
            info = archive.getinfo(WEIGHTS_MEMBER)
            name_length, extra_length = struct.unpack_from("<HH", model.read_bytes(), info.header_offset + 26)
            start = info.header_offset + 30 + name_length + extra_length
    spans = [(start + place.offset, start + place.offset + int(np.prod(place.shape)) * 4)
             for layer_places in locate(str(model), "keras" if suffix == ".keras" else "hdf5")
             for place in layer_places.places.values()]
    extra = crc_fields(model, [WEIGHTS_MEMBER]) if suffix == ".keras" else set()
    assert_only(changed_bytes(model, tmp_path / f"out{suffix}"), spans, extra)
    assert config.num_layers == 2


def test_keras_layers_are_picked_by_name_and_checked(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    model = tmp_path / "model.keras"
    write_file(model, LSTM(3, 4, num_layers=2, seed=1))
    names = [item.name for item in read_file(model)]
    one = LSTM(4, 4, seed=3)  # fits the second layer only
    write_into(model, tmp_path / "out.keras", one)
    found = read_file(tmp_path / "out.keras")
    assert np.array_equal(found[1].to_params().value, from_keras(one))
    with pytest.raises(ValueError, match=f"no RNN named 'nope' in model '.*'; it holds: {names[0]}"):
        write_into(model, tmp_path / "out.keras", one, name="nope")
    with pytest.raises(ValueError, match=r"tensor '.*: forward kernel \(.*\)' has shape \(3, 16\) in the model; the "
                                         r"converted RNN's is \(4, 16\)"):
        write_into(model, tmp_path / "out.keras", one, name=names[0])
    with pytest.raises(ValueError, match="prefix= and key= pick a PyTorch RNN"):
        write_into(model, tmp_path / "out.keras", one, prefix="rnn")
    with pytest.raises(ValueError, match=r"the converted network has 2 layer\(s\); name= names 1"):
        write_into(model, tmp_path / "out.keras", LSTM(3, 4, num_layers=2, seed=4), name=names[0])


def from_keras(layer: LSTM) -> np.ndarray:
    """The params that the keras format gives back for ``layer`` (LSTM biases are summed into one)."""
    return from_format("keras", to_format("keras", layer.params, layer.config).value, layer.config).value


# ---- the command line -------------------------------------------------------------------------------------------
def test_the_command_line_writes_into_a_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = tmp_path / "model.pt"
    torch.save(tagger().state_dict(), model)
    layer = LSTM(4, 8, num_layers=2, bidirectional=True, seed=7)
    layer.save(tmp_path / "params.npz")
    argv = [str(tmp_path / "params.npz"), str(tmp_path / "tuned.pt"), "--into", str(model), "--prefix", "encoder.rnn"]
    assert convert_main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("converted params.npz (cudnn_rnn params file, format params) -> torch "
                             "(rnn_mode='lstm', num_layers=2")
    assert out[1] == (f"read 1 tensor(s) from {tmp_path / 'params.npz'}; wrote a copy of {model} with the 16 "
                      f"tensor(s) of the RNN under 'encoder.rnn.' replaced to {tmp_path / 'tuned.pt'}")
    assert np.array_equal(read_file(tmp_path / "tuned.pt")[0].to_params().value, layer.params)
    assert convert_main(argv) == 2 and "already exists; pass --force" in capsys.readouterr().err
    assert convert_main([*argv, "--to", "torch", "--force"]) == 2
    assert "--to does not apply with --into" in capsys.readouterr().err


def test_the_command_line_refuses_shared_storage_unless_change_shared(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    torch.manual_seed(0)
    model, out = tmp_path / "tied.pt", tmp_path / "out.pt"
    torch.save(TiedTagger().state_dict(), model)
    layer = LSTM(4, 4, seed=3)
    layer.save(tmp_path / "params.npz")
    argv = [str(tmp_path / "params.npz"), str(out), "--into", str(model)]
    assert convert_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: tensor 'encoder.rnn.weight_hh_l0' of model" in err
    assert "shares its storage with tensor 'decoder.weight'" in err and "pass --change-shared to let" in err
    assert not out.exists()
    assert convert_main([*argv, "--change-shared"]) == 0
    capsys.readouterr()
    assert np.array_equal(torch.load(out)["decoder.weight"].numpy(), new_torch_tensors(layer)["weight_hh_l0"])
    assert convert_main([str(tmp_path / "params.npz"), str(tmp_path / "x.pt"), "--change-shared"]) == 2
    assert "--change-shared applies with --into MODEL only" in capsys.readouterr().err


def test_with_into_in_must_hold_one_rnn(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = tmp_path / "model.pt"
    torch.save(tagger().state_dict(), model)
    two = tmp_path / "two.pt"
    torch.save(torch.nn.ModuleDict({"a": torch.nn.LSTM(4, 8), "b": torch.nn.LSTM(4, 8)}).state_dict(), two)
    assert convert_main([str(two), str(tmp_path / "o.pt"), "--into", str(model)]) == 2
    assert "IN holds 2 RNNs (a (PyTorch nn.LSTM state_dict); b (PyTorch nn.LSTM state_dict)); with --into, " \
           "--name and --prefix choose in MODEL" in capsys.readouterr().err


def test_a_bfloat16_keras_model_takes_bfloat16_weights(tmp_path: Path) -> None:
    pytest.importorskip("ml_dtypes")
    write_file(tmp_path / "model.keras", GRU(3, 4, bidirectional=True, dtype="bfloat16", seed=1))
    new = GRU(3, 4, bidirectional=True, dtype="bfloat16", seed=2)
    write_into(tmp_path / "model.keras", tmp_path / "out.keras", new)
    [found] = read_file(tmp_path / "out.keras")
    assert np.array_equal(found.to_params().value, new.params.astype(np.float32))
    with pytest.raises(InexactConversionError, match="is bfloat16 in the model; the converted float32 values do not "
                                                     "all fit it exactly"):
        write_into(tmp_path / "model.keras", tmp_path / "out32.keras", GRU(3, 4, bidirectional=True, seed=2))


@pytest.mark.parametrize("call, error, match", [
    (lambda: write_file(5, LSTM(2, 3)), TypeError, "path must be a str or os.PathLike; got int"),
    (lambda: write_file("a.npz", LSTM(2, 3), allow_approximation="yes"), TypeError,
     "allow_approximation must be a bool; got str 'yes'"),
    (lambda: write_file("a.onnx", LSTM(2, 3), opset=17.0), TypeError, "opset must be an int; got float 17.0"),
    (lambda: write_file("a.txt", LSTM(2, 3)), ValueError, r"path 'a.txt' must end in one of \('.npz', '.pt'"),
    (lambda: write_file("a.npz", LSTM(2, 3), fmt="bogus"), ValueError, "fmt must be None or one of"),
    (lambda: write_into(None, "b.pt", LSTM(2, 3)), TypeError, "model must be a str or os.PathLike; got NoneType"),
    (lambda: write_into("a.pt", "b.pt", LSTM(2, 3), prefix=3), TypeError, "prefix must be a str or None; got int 3"),
    (lambda: write_into("a.pt", "b.pt", LSTM(2, 3), name=[]), TypeError,
     "name must be a layer name, a non-empty list of them, or None"),
    (lambda: write_into("a.pt", "b.pt", LSTM(2, 3), change_shared="yes"), TypeError,
     "change_shared must be a bool; got str 'yes'"),
])
def test_bad_arguments_are_named(call, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()
