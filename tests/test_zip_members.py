"""One check of zip members for every reader (cudnn_rnn.convert.readers._zip): archives written by NumPy,
Keras and torch, their bytes edited, are refused alike, each with a FileReadError naming the file.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn.convert.readers import FileReadError, read_file

GOLDEN = Path(__file__).parent / "golden" / "files"

#: a central directory entry: (offset, struct format) of the fields edited here
CENTRAL = {"flags": (8, "<H"), "method": (10, "<H"), "compressed": (20, "<I"), "declared": (24, "<I"),
           "offset": (42, "<I")}
#: the same fields in a member's local header
LOCAL = {"flags": (6, "<H"), "method": (8, "<H")}
#: a local header offset far past the end of any archive here
ARCHIVES_END = 0xFFFF_FF00


def numpy_archive(path: Path) -> Path:
    """An .npz as np.savez writes it: the tensors of a torch LSTM."""
    rng = np.random.default_rng(0)
    np.savez(path, weight_ih_l0=rng.standard_normal((8, 3), np.float32),
             weight_hh_l0=rng.standard_normal((8, 2), np.float32), bias_ih_l0=np.zeros(8, np.float32),
             bias_hh_l0=np.zeros(8, np.float32))
    return path


#: reader -> (a real archive, the member edited: one each reader reads itself)
ARCHIVES = {
    "npz": (None, "weight_ih_l0.npy"),
    "keras": (GOLDEN / "keras" / "keras3_functional.keras", "config.json"),
    "torch": (GOLDEN / "torch" / "gru_batch_first.pt", "gru_batch_first/data.pkl"),
}


def edited(tmp_path: Path, kind: str, **fields: int) -> tuple[Path, zipfile.ZipInfo, int]:
    """A copy of ``kind``'s archive with the member's directory entry (and local header) fields set;
    the member as it was, and the archive's size."""
    source, member = ARCHIVES[kind]
    data = bytearray((source or numpy_archive(tmp_path / "source.npz")).read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo(member)
    for name, value in fields.items():
        if name in LOCAL:
            struct.pack_into(LOCAL[name][1], data, info.header_offset + LOCAL[name][0], value)
    position = data.find(b"PK\x01\x02")
    while position >= 0:
        name_length = struct.unpack_from("<H", data, position + 28)[0]
        if data[position + 46:position + 46 + name_length].decode() == member:
            for name, value in fields.items():
                struct.pack_into(CENTRAL[name][1], data, position + CENTRAL[name][0], value)
        position = data.find(b"PK\x01\x02", position + 4)
    path = tmp_path / f"edited{(source or Path('x.npz')).suffix}"
    path.write_bytes(bytes(data))
    return path, info, len(data)


def refusal(path: Path) -> str:
    with pytest.raises(FileReadError) as caught:
        read_file(path)
    assert str(caught.value).startswith(f"cannot read {str(path)!r}: "), caught.value
    return caught.value.reason


@pytest.mark.parametrize("kind", ARCHIVES)
def test_the_archives_read_unedited(tmp_path: Path, kind: str) -> None:
    path, _, _ = edited(tmp_path, kind)
    assert read_file(path)


@pytest.mark.parametrize("kind", ARCHIVES)
def test_a_local_header_offset_past_the_end(tmp_path: Path, kind: str) -> None:
    path, info, size = edited(tmp_path, kind, offset=ARCHIVES_END)
    assert refusal(path) == (f"zip member {info.filename!r} claims {info.compress_size} bytes at offset "
                             f"{ARCHIVES_END}, past the end of the {size}-byte file: the file is truncated or corrupt")


@pytest.mark.parametrize("kind", ARCHIVES)
def test_a_local_header_offset_that_points_elsewhere(tmp_path: Path, kind: str) -> None:
    source, member = ARCHIVES[kind]
    _, info, _ = edited(tmp_path, kind)
    path, _, _ = edited(tmp_path, kind, offset=info.header_offset + 1)
    assert refusal(path) == (f"zip member {member!r} has no local header at offset {info.header_offset + 1}, where "
                             "the archive's directory says it is: the file is corrupt")


@pytest.mark.parametrize("kind", ARCHIVES)
@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA, 99])
def test_an_unsupported_compression_method(tmp_path: Path, kind: str, method: int) -> None:
    path, info, _ = edited(tmp_path, kind, method=method)
    assert refusal(path) == (f"zip member {info.filename!r} uses compression method {method}; only stored (0) and "
                             "deflated (8) members are read")


@pytest.mark.parametrize("kind", ARCHIVES)
def test_an_encrypted_member(tmp_path: Path, kind: str) -> None:
    _, info, _ = edited(tmp_path, kind)
    path, _, _ = edited(tmp_path, kind, flags=info.flag_bits | 0x1)
    assert refusal(path) == f"zip member {info.filename!r} is encrypted"


@pytest.mark.parametrize("kind", ARCHIVES)
def test_a_stored_member_declaring_more_than_it_stores(tmp_path: Path, kind: str) -> None:
    path, info, _ = edited(tmp_path, kind, declared=3_000_000_000)
    assert refusal(path) == (f"zip member {info.filename!r} declares 3000000000 bytes but stores "
                             f"{info.compress_size}: the file is corrupt")


@pytest.mark.parametrize("kind", ARCHIVES)
def test_a_member_twice(tmp_path: Path, kind: str) -> None:
    source, member = ARCHIVES[kind]
    source = source or numpy_archive(tmp_path / "source.npz")
    path = tmp_path / f"twice{source.suffix}"
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(path, "w") as out:
        for info in archive.infolist():
            out.writestr(info, archive.read(info))
        with pytest.warns(UserWarning, match="Duplicate name"):
            out.writestr(member, archive.read(member))
    assert refusal(path) == f"the zip archive holds member {member!r} twice: the file is corrupt"


@pytest.mark.parametrize("kind", ARCHIVES)
def test_a_member_whose_data_runs_past_the_end(tmp_path: Path, kind: str) -> None:
    """A compressed size that leaves room for the 30 bytes of a local header, but not for its name too."""
    _, info, size = edited(tmp_path, kind)
    compressed = size - info.header_offset - 30
    path, _, _ = edited(tmp_path, kind, compressed=compressed)
    assert refusal(path) == (f"zip member {info.filename!r} claims {compressed} bytes at offset {info.header_offset}, "
                             f"past the end of the {size}-byte file: the file is truncated or corrupt")
