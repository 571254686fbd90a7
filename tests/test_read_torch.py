"""Reading PyTorch files (cudnn_rnn.convert.readers._torch_file) against torch's own runs.

The golden files in tests/golden/files/torch/ were written by torch.save (scripts/make_torch_files.py)
together with torch's outputs on a ragged batch; each is read with ``read_file``, converted, run
through ``cudnn_rnn_v3`` and compared. Every refusal and hostile file (truncated, random bytes,
pickles that would run code, decompression bombs, absurd storage sizes, overlapping views, memo
bombs) is made here from real torch.save output and its message asserted.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn.convert.readers import read_file
from rnn_testing import DTYPE_TOLERANCE, load_script, read_refusal, relative_error

GOLDEN = Path(__file__).resolve().parent / "golden" / "files" / "torch"
CASES = sorted(path.name[:-len(".expected.npz")] for path in GOLDEN.glob("*.expected.npz"))


make_torch_files = load_script("make_torch_files")


def expected(case: str) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """The case's meta and, per RNN, its inputs and torch's outputs."""
    with np.load(GOLDEN / f"{case}.expected.npz") as archive:
        meta = json.loads(str(archive["meta"]))
        records = [{key.split("/", 1)[1]: archive[key] for key in archive.files if key.startswith(f"rnn{index}/")}
                   for index in range(len(meta["rnns"]))]
    return meta, records


# ---- every golden file against torch -----------------------------------------------------------------
def test_every_case_has_a_file() -> None:
    assert set(CASES) == set(make_torch_files.cases()), "regenerate with python scripts/make_torch_files.py"
    assert {path.stem for path in GOLDEN.glob("*.pt")} == set(CASES)
    assert sum(path.stat().st_size for path in GOLDEN.iterdir()) < 300_000


@pytest.mark.parametrize("case", CASES)
def test_golden_file_runs_as_torch_ran_it(case: str) -> None:
    meta, records = expected(case)
    found = read_file(GOLDEN / f"{case}.pt", **meta["read"])
    assert [item.name for item in found] == [rnn["name"] for rnn in meta["rnns"]]
    for item, rnn, record in zip(found, meta["rnns"], records):
        item = item.with_hints(**rnn["hints"])
        assert item.fmt == "torch" and item.conversion() == "exact", item.conversion()
        assert item.config.rnn_mode == rnn["rnn_mode"] and item.config.dtype == rnn["dtype"]
        ours = make_torch_files.our_run(item, record, rnn["time_major"])
        assert set(ours) == {key for key in record if key.startswith("output")}
        for key, value in ours.items():
            assert value.dtype == np.dtype(rnn["dtype"])
            error = relative_error(value, record[key])
            assert error <= DTYPE_TOLERANCE[rnn["dtype"]], f"{case} {rnn['name']} {key}: {error:.3g}"


def describe(path: Path, **options) -> list[tuple[str, str, str, str]]:
    return [(item.name, item.source, item.describe(), item.conversion()) for item in read_file(path, **options)]


def test_what_is_found_in_each_kind_of_file() -> None:
    lstm = "rnn_mode=lstm, num_layers=2, num_units=4, input_size=3, direction=bidirectional, num_proj=2, " \
           "input_mode=linear_input, dtype=float32"
    assert describe(GOLDEN / "lstm_L2_bi_proj.pt") == [
        ("lstm_L2_bi_proj.pt", "PyTorch nn.LSTM state_dict", lstm, "exact")]
    two = describe(GOLDEN / "parent_two_rnns.pt")
    assert [(name, source) for name, source, *_ in two] == [
        ("encoder.rnn", "PyTorch nn.GRU state_dict"), ("decoder", "PyTorch nn.LSTM state_dict")]
    assert two[1][2].startswith("rnn_mode=lstm, num_layers=1, num_units=3, input_size=8,")
    assert describe(GOLDEN / "checkpoint.pt")[0][:2] == ("rnn", "PyTorch nn.GRU state_dict in checkpoint entry 'model'")
    assert describe(GOLDEN / "gru_legacy.pt")[0][1] == "PyTorch nn.GRU state_dict"


def test_an_nn_rnn_state_dict_asks_for_its_nonlinearity() -> None:
    (item,) = read_file(GOLDEN / "rnn_relu_L2.pt")
    assert item.describe().startswith("rnn_mode=?, num_layers=2, num_units=4")
    assert item.questions["rnn_mode"].choices == ("rnn_tanh", "rnn_relu")
    assert item.conversion() == ("needs: an nn.RNN state_dict does not say its nonlinearity: pass rnn_mode='rnn_tanh' "
                                 "or rnn_mode='rnn_relu'")
    with pytest.raises(ValueError, match="pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'"):
        item.to_params()
    with pytest.raises(ValueError, match="not possible"):
        item.with_hints(rnn_mode="lstm")


def test_a_pickled_module_tells_what_its_state_dict_cannot() -> None:
    (item,) = read_file(GOLDEN / "whole_sequential.pt", trust_pickle=True)
    assert item.source == "PyTorch nn.RNN module inside a pickled nn.Sequential"
    assert item.fields["rnn_mode"] == "rnn_relu" and not item.questions
    assert "batch_first=True: the module takes batch-major input (time_major=False)" in item.notes
    (whole,) = read_file(GOLDEN / "whole_lstm.pt", trust_pickle=True)
    assert whole.source == "PyTorch nn.LSTM module (pickled)"
    assert "dropout=0.25 between layers while training (not part of the weights)" in whole.notes


def test_notes_for_missing_biases_and_bfloat16() -> None:
    (item,) = read_file(GOLDEN / "lstm_no_bias_bi.pt")
    assert item.notes == ("the state_dict has no biases (bias=False): zero biases are used, the same function",)
    assert not any(item.tensors[f"bias_hh_l0{suffix}"].any() for suffix in ("", "_reverse"))
    (item,) = read_file(GOLDEN / "lstm_bfloat16.pt")
    assert item.fields["dtype"] == "float32" and item.notes == ("the tensors are bfloat16: read as float32, exactly",)
    state = torch.load(GOLDEN / "lstm_bfloat16.pt", weights_only=True)
    for name, tensor in state.items():
        np.testing.assert_array_equal(item.tensors[name], tensor.float().numpy())


def test_views_into_a_shared_storage_come_out_as_exact_copies() -> None:
    state = torch.load(GOLDEN / "lstm_shared_storage.pt", weights_only=True)
    storage = state["weight_ih_l0"].untyped_storage()
    assert all(tensor.untyped_storage().data_ptr() == storage.data_ptr() for tensor in state.values())
    assert not state["weight_ih_l0"].is_contiguous()
    assert storage.nbytes() > 4 * sum(tensor.numel() for tensor in state.values())
    (item,) = read_file(GOLDEN / "lstm_shared_storage.pt")
    for name, tensor in state.items():
        array = item.tensors[name]
        assert array.flags["C_CONTIGUOUS"] and array.flags["OWNDATA"] and array.shape == tuple(tensor.shape)
        np.testing.assert_array_equal(array, tensor.numpy())


def test_other_tensors_of_a_parent_module_are_ignored() -> None:
    state = torch.load(GOLDEN / "parent_rnn.pt", weights_only=True)
    assert state["norm.num_batches_tracked"].dtype == torch.int64
    (item,) = read_file(GOLDEN / "parent_rnn.pt")
    assert item.name == "rnn" and set(item.tensors) == {key[4:] for key in state if key.startswith("rnn.")}


# ---- choosing: prefix and key ------------------------------------------------------------------------------
def test_prefix_picks_one_rnn() -> None:
    path = GOLDEN / "parent_two_rnns.pt"
    for prefix in ("decoder", "decoder."):
        assert [item.name for item in read_file(path, prefix=prefix)] == ["decoder"]
    assert [item.name for item in read_file(path, prefix="encoder.rnn")] == ["encoder.rnn"]
    assert "no RNN under prefix 'encoder' (no key 'encoder.weight_ih_l0'); RNNs are under 'encoder.rnn.', " \
           "'decoder.'" in read_refusal(path, prefix="encoder")


def test_key_picks_the_checkpoint_entry() -> None:
    path = GOLDEN / "checkpoint.pt"
    assert [item.name for item in read_file(path, key="model")] == ["rnn"]
    assert ("checkpoint entry 'optimizer' is a dict of 2 entries, not a state_dict"
            in read_refusal(path, key="optimizer"))
    assert ("the checkpoint has no entry 'weights'; it holds 'model' (state_dict of 17 tensors), 'epoch' (int), "
            "'optimizer' (dict of 2 entries)") in read_refusal(path, key="weights")
    assert "key='model' picks a checkpoint entry, but the file holds a state_dict of" in read_refusal(
        GOLDEN / "gru_batch_first.pt", key="model")


def test_a_checkpoint_with_several_rnn_state_dicts_lists_them(tmp_path: Path) -> None:
    gru, lstm = torch.nn.GRU(2, 3), torch.nn.LSTM(2, 3)
    torch.save({"ema": {"model": gru.state_dict()}, "model": lstm.state_dict(), "step": 10}, tmp_path / "two.pt")
    assert "the checkpoint holds 2 state_dicts with RNN weights ('ema/model', 'model'): pick one with key=KEY" \
           in read_refusal(tmp_path / "two.pt")
    (item,) = read_file(tmp_path / "two.pt", key="ema/model")
    assert item.source == "PyTorch nn.GRU state_dict in checkpoint entry 'ema/model'"


def test_npz_of_prefixed_torch_names_is_read_the_same_way(tmp_path: Path) -> None:
    state = torch.load(GOLDEN / "parent_two_rnns.pt", weights_only=True)
    np.savez(tmp_path / "seq2seq.npz", **{key: value.numpy() for key, value in state.items()})
    found = read_file(tmp_path / "seq2seq.npz")
    assert [(item.name, item.source) for item in found] == [
        ("encoder.rnn", "PyTorch nn.GRU state_dict in an .npz archive"),
        ("decoder", "PyTorch nn.LSTM state_dict in an .npz archive")]
    assert all(item.conversion() == "exact" for item in found)


# ---- what the file holds is not an RNN ----------------------------------------------------------------------
def test_a_dict_that_is_not_a_state_dict_says_what_it_holds(tmp_path: Path) -> None:
    torch.save({"epoch": 3, "lr": 0.1, "name": "run-7", "history": [1.0, 0.5]}, tmp_path / "meta.pt")
    assert "the file holds a dict that is not a state_dict and holds none: 'epoch' (int), 'lr' (float), " \
           "'name' (str), 'history' (list of 2); save the weights with torch.save(model.state_dict(), path)" \
           in read_refusal(tmp_path / "meta.pt")
    torch.save(torch.ones(2, 3), tmp_path / "tensor.pt")
    assert "the file holds a tensor float32 [2, 3], not a state_dict or a checkpoint dict" in read_refusal(
        tmp_path / "tensor.pt")


def test_a_state_dict_without_an_rnn(tmp_path: Path) -> None:
    torch.save(torch.nn.Linear(2, 3).state_dict(), tmp_path / "linear.pt")
    assert "a state_dict of 2 tensors ('weight', 'bias') with no LSTM, GRU or RNN weights (no key ends in " \
           "'weight_ih_l0')" in read_refusal(tmp_path / "linear.pt")
    cell = torch.nn.Sequential(OrderedDict(cell=torch.nn.LSTMCell(2, 3)))
    torch.save(cell.state_dict(), tmp_path / "cell.pt")
    assert "'cell.weight_ih' belongs to an nn.LSTMCell/GRUCell/RNNCell, which is not read" in read_refusal(
        tmp_path / "cell.pt")
    torch.save({"model": torch.nn.Linear(2, 3).state_dict(), "epoch": 1}, tmp_path / "ckpt.pt")
    assert "a checkpoint dict whose state_dicts hold no LSTM, GRU or RNN weights" in read_refusal(tmp_path / "ckpt.pt")


def test_tensors_that_do_not_form_an_rnn_name_the_tensor(tmp_path: Path) -> None:
    state = torch.nn.GRU(2, 3, num_layers=2).state_dict()
    del state["weight_hh_l1"]
    torch.save({f"rnn.{key}": value for key, value in state.items()}, tmp_path / "broken.pt")
    message = read_refusal(tmp_path / "broken.pt")
    assert "the RNN under 'rnn.': format 'torch' tensors do not match the configuration (rnn_mode='gru', " \
           "num_layers=2, num_units=3, input_size=2, direction='unidirectional'): missing ['weight_hh_l1']" in message


def test_dtypes_mixed_or_unreadable_name_the_tensor(tmp_path: Path) -> None:
    state = torch.nn.LSTM(2, 3).state_dict()
    state["bias_hh_l0"] = state["bias_hh_l0"].double()
    torch.save({f"enc.{key}": value for key, value in state.items()}, tmp_path / "mixed.pt")
    message = read_refusal(tmp_path / "mixed.pt", TypeError)
    assert "tensor 'enc.bias_hh_l0' is float64 while the others are float32" in message
    ints = {key: (value * 100).to(torch.int32) for key, value in torch.nn.GRU(2, 3).state_dict().items()}
    torch.save(ints, tmp_path / "ints.pt")
    assert ("tensor 'weight_ih_l0' is int32; an RNN's weights must be float16, float32, float64, bfloat16"
            in read_refusal(tmp_path / "ints.pt", TypeError))


# ---- pickles that would run code ------------------------------------------------------------------------------
class MakesMarker:
    """Unpickling this runs os.mkdir(marker): the proof that code from a file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.mark.parametrize("layout", ["zip", "legacy", "plain pickle"])
def test_a_pickle_that_would_run_code_is_not_run(tmp_path: Path, layout: str) -> None:
    marker, path = tmp_path / "marker", tmp_path / "evil.pt"
    payload = {"weight_ih_l0": torch.ones(4, 2), "hook": MakesMarker(marker)}
    if layout == "plain pickle":
        path.write_bytes(pickle.dumps(payload, protocol=2))
    else:
        torch.save(payload, path, _use_new_zipfile_serialization=layout == "zip")
    message = read_refusal(path)
    assert not marker.exists()
    if layout == "plain pickle":
        assert "a Python pickle naming torch.storage._load_from_bytes, posix.mkdir that torch.save did not write " \
               "(torch.save files start with its magic number): save tensors with torch.save(model.state_dict(), " \
               "path)" in message
        assert "that torch.save did not write" in read_refusal(path, trust_pickle=True)   # never worth running
        assert not marker.exists()
    else:
        assert message.endswith("the file holds pickled Python objects (posix.mkdir) that would run code to load, so "
                                "they are not loaded: save the weights with torch.save(model.state_dict(), path) "
                                "instead, or pass trust_pickle=True if you trust this file")
        # the test would see code run: with trust_pickle it does, and the dict it built is then described
        assert "'hook' (NoneType)" in read_refusal(path, trust_pickle=True)
        assert marker.is_dir()


def test_a_whole_module_needs_trust_pickle() -> None:
    message = read_refusal(GOLDEN / "whole_sequential.pt")
    assert "the file holds pickled Python objects (torch.nn.modules.container.Sequential, " \
           "torch.nn.modules.rnn.RNN, torch.nn.modules.linear.Linear) that would run code to load" in message
    assert "torch.save(model.state_dict(), path)" in message and "trust_pickle=True" in message


def test_a_pickled_class_that_cannot_be_imported(tmp_path: Path) -> None:
    module = types.ModuleType("vanishing_models")
    exec("import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
         "        self.rnn = torch.nn.GRU(2, 3)\n", module.__dict__)
    sys.modules["vanishing_models"] = module
    try:
        torch.save(module.Net(), tmp_path / "net.pt")
    finally:
        del sys.modules["vanishing_models"]
    assert "(vanishing_models.Net, torch.nn.modules.rnn.GRU) that would run code" in read_refusal(tmp_path / "net.pt")
    assert "the pickled objects need code that cannot be found here (ModuleNotFoundError: No module named " \
           "'vanishing_models'): import the module that defines them first" in read_refusal(tmp_path / "net.pt",
                                                                                          trust_pickle=True)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_a_torchscript_archive(tmp_path: Path) -> None:
    torch.jit.script(torch.nn.LSTM(2, 3)).save(str(tmp_path / "scripted.pt"))
    assert "a TorchScript archive (torch.jit.save) runs its code when loaded" in read_refusal(tmp_path / "scripted.pt")
    (item,) = read_file(tmp_path / "scripted.pt", trust_pickle=True)
    assert item.source == "PyTorch LSTM module (TorchScript)" and item.conversion() == "exact"


# ---- damaged and hostile files --------------------------------------------------------------------------------
def test_truncated_files(tmp_path: Path) -> None:
    data = (GOLDEN / "lstm_L2_bi_proj.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[:len(data) // 2])
    assert "a zip archive without its central directory" in read_refusal(tmp_path / "cut.pt")
    legacy = (GOLDEN / "gru_legacy.pt").read_bytes()
    for cut, expected_message in ((len(legacy) - 10, "the storages declare 928 bytes but the file holds 918 after its "
                                                     "pickles: the file is truncated or corrupt"),
                                  (200, "the object pickle is not a readable pickle"),
                                  (30, "the system-information pickle is not a readable pickle")):
        (tmp_path / "cut_legacy.pt").write_bytes(legacy[:cut])
        assert expected_message in read_refusal(tmp_path / "cut_legacy.pt")


def test_random_bytes_named_pt(tmp_path: Path) -> None:
    noise = np.random.default_rng(5).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    (tmp_path / "noise.pt").write_bytes(b"\x13" + noise)
    assert "not a model file of a known kind" in read_refusal(tmp_path / "noise.pt")
    (tmp_path / "noise2.pt").write_bytes(b"\x80\x02" + noise)
    assert "the pickle is not a readable pickle" in read_refusal(tmp_path / "noise2.pt")


def test_a_damaged_member(tmp_path: Path) -> None:
    data = bytearray((GOLDEN / "gru_batch_first.pt").read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("gru_batch_first/data.pkl")
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + 20] ^= 0xFF   # a byte of data.pkl
    (tmp_path / "flipped.pt").write_bytes(bytes(data))
    assert ("a damaged zip archive (Bad CRC-32 for file 'gru_batch_first/data.pkl')"
            in read_refusal(tmp_path / "flipped.pt"))


def _set_declared_size(data: bytes, member: str, size: int) -> bytes:
    """``data`` (a zip) with ``member``'s uncompressed size changed in its local and central headers."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(member)
    struct.pack_into("<I", out, info.header_offset + 22, size)
    position = out.find(b"PK\x01\x02")
    while position >= 0:
        name_length = struct.unpack_from("<H", out, position + 28)[0]
        if out[position + 46:position + 46 + name_length].decode() == member:
            struct.pack_into("<I", out, position + 24, size)
        position = out.find(b"PK\x01\x02", position + 4)
    return bytes(out)


def _torch_zip(path: Path, pickled: bytes, storages: dict[str, bytes], compress: bool = False) -> None:
    """A zip laid out as torch.save lays it out, with the given data.pkl and storage records."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/byteorder", b"little")
        for key, data in storages.items():
            archive.writestr(f"archive/data/{key}", data)
        archive.writestr("archive/version", b"3\n")


class _Tensor:
    """Pickles as torch's _rebuild_tensor_v2 over a storage record with any declared numel."""

    def __init__(self, numel: int, size: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.numel, self.size, self.stride = numel, size, stride

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, (_Storage(self.numel), 0, self.size, self.stride, False,
                                                  OrderedDict()))


class _Storage:
    def __init__(self, numel: int) -> None:
        self.numel = numel


class _StoragePickler(pickle.Pickler):
    def __init__(self, file, legacy: bool = False) -> None:
        super().__init__(file, protocol=2)
        self.legacy = legacy

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            record = ("storage", torch.FloatStorage, "0", "cpu", obj.numel)
            return record + (None,) if self.legacy else record
        return None


def _pickled(obj, legacy: bool = False) -> bytes:
    buffer = io.BytesIO()
    _StoragePickler(buffer, legacy).dump(obj)
    return buffer.getvalue()


def test_a_decompression_bomb_member(tmp_path: Path) -> None:
    torch.save(torch.nn.GRU(2, 3).state_dict(), tmp_path / "gru.pt")
    with zipfile.ZipFile(tmp_path / "gru.pt") as archive:
        members = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    with zipfile.ZipFile(tmp_path / "deflated.pt", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert len(read_file(tmp_path / "deflated.pt")) == 1   # deflated members are read (torch itself stores them)
    bomb = _set_declared_size((tmp_path / "deflated.pt").read_bytes(), "gru/data/0", 4_000_000_000)
    (tmp_path / "bomb.pt").write_bytes(bomb)
    assert "zip member 'gru/data/0' declares 4000000000 bytes from" in read_refusal(tmp_path / "bomb.pt")
    assert "compressed bytes, more than deflate can expand (a decompression bomb)" in read_refusal(tmp_path / "bomb.pt")
    stored = _set_declared_size((tmp_path / "gru.pt").read_bytes(), "gru/data.pkl", 3_000_000_000)
    (tmp_path / "liar.pt").write_bytes(stored)
    assert "zip member 'gru/data.pkl' declares 3000000000 bytes but stores" in read_refusal(tmp_path / "liar.pt")


def test_an_absurd_storage_size_is_refused_before_allocation(tmp_path: Path) -> None:
    huge = 1 << 40
    weights = {"weight_ih_l0": _Tensor(huge, (4, 3), (3, 1))}
    _torch_zip(tmp_path / "absurd.pt", _pickled(weights), {"0": bytes(48)})
    assert "tensor 'data/0' declares shape (1099511627776,) (4398046511104 bytes) but the file stores only 48 bytes " \
           "for it: the file is truncated or corrupt" in read_refusal(tmp_path / "absurd.pt")
    header = (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True})   # magic number, protocol, system information
    legacy = b"".join(pickle.dumps(part, protocol=2) for part in header)
    legacy += _pickled(weights, legacy=True) + pickle.dumps(["0"], protocol=2) + struct.pack("<q", 12) + bytes(48)
    (tmp_path / "absurd_legacy.pt").write_bytes(legacy)
    assert "tensor 'storage 0' declares shape (1099511627776,) (4398046511104 bytes) but the file stores only 56 " \
           "bytes" in read_refusal(tmp_path / "absurd_legacy.pt")
    _torch_zip(tmp_path / "missing.pt", _pickled(weights), {})
    assert "storage record 'data/0' is missing from the archive" in read_refusal(tmp_path / "missing.pt")


def test_an_overlapping_view_is_not_expanded(tmp_path: Path) -> None:
    weights = {"weight_ih_l0": _Tensor(12, (10_000_000, 12), (0, 1))}
    _torch_zip(tmp_path / "broadcast.pt", _pickled(weights), {"0": np.ones(12, np.float32).tobytes()})
    assert "tensor 'weight_ih_l0' declares shape [10000000, 12] (120000000 elements) over a storage of 12 elements: " \
           "the file is corrupt" in read_refusal(tmp_path / "broadcast.pt")


@pytest.mark.parametrize("trust_pickle", [False, True])
def test_pickles_declaring_absurd_sizes_are_refused_before_unpickling(tmp_path: Path, trust_pickle: bool) -> None:
    """A C unpickler allocates what memo indices, frames and counted lengths declare: each is
    checked against the file first, whether or not the pickle is trusted."""
    path = tmp_path / "bomb.pt"
    path.write_bytes(b"\x80\x02}r\xf0\xff\xff\x7f.")   # EMPTY_DICT, LONG_BINPUT 2**31 - 16, STOP
    assert "the pickle: memo index 2147483632 at byte 3 is out of all proportion: the file is corrupt" in read_refusal(
        path, trust_pickle=trust_pickle)
    path.write_bytes(b"\x80\x04\x95" + struct.pack("<Q", 1 << 40) + b"}.")   # FRAME of 2**40 bytes
    assert "the pickle: a frame of 1099511627776 bytes at byte 2 runs past the end of the file" in read_refusal(
        path, trust_pickle=trust_pickle)
    path.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b".")   # BINBYTES8 of 2**40 bytes
    assert "the pickle is not a readable pickle (ValueError: expected 1099511627776 bytes in a bytes8, but only 1 " \
           "remain): the file is truncated or corrupt" in read_refusal(path, trust_pickle=trust_pickle)


def test_a_zip_holding_a_member_twice(tmp_path: Path) -> None:
    torch.save(torch.nn.GRU(2, 3).state_dict(), tmp_path / "gru.pt")
    with zipfile.ZipFile(tmp_path / "gru.pt") as archive:
        members = [(info.filename, archive.read(info.filename)) for info in archive.infolist()]
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(tmp_path / "twice.pt", "w") as archive:
        for name, data in members + [("gru/data.pkl", b"\x80\x02}.")]:
            archive.writestr(name, data)
    assert ("the zip archive holds member 'gru/data.pkl' twice: the file is corrupt"
            in read_refusal(tmp_path / "twice.pt"))


def test_tensors_shared_many_times_are_not_all_copied(tmp_path: Path) -> None:
    shared = torch.nn.LSTM(48, 48).state_dict()
    tied = {f"rnn{index}.{key}": value for index in range(6) for key, value in shared.items()}
    torch.save(tied, tmp_path / "tied.pt")   # one storage per tensor, six RNNs reading each
    message = read_refusal(tmp_path / "tied.pt")
    assert "more than 4 times the" in message and "(they share storage): read one RNN at a time with " \
           "prefix=PREFIX" in message
    assert [item.name for item in read_file(tmp_path / "tied.pt", prefix="rnn3")] == ["rnn3"]
