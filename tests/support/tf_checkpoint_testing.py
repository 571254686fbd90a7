"""Shared code of the TensorFlow checkpoint reader tests (golden and live).

Imported by name (``from tf_checkpoint_testing import ...``).

* :func:`run_ours` / :func:`compare`: a found RNN through ``cudnn_rnn_v3`` on a recorded ragged
  batch, against the framework's outputs; :func:`step_reset_before` steps TF's GRUBlockCell
  kernel (``cudnn_rnn.gru_block_cell``) for a reset-before GRU instead.
* :func:`rewrite_index`: rewrite entries of a checkpoint index to make hostile checkpoints. The
  index ``PREFIX.index`` is a LevelDB-style table, key -> ``BundleEntryProto`` (the key ``""``
  holding the ``BundleHeaderProto``)::

      .index   [data block]... [meta-index block] [index block] [footer: 2 block handles, magic]
      block    entries (varint shared, varint unshared, varint value length, key tail, value)...
               restart offsets (uint32)..., restart count (uint32); then 1 type byte, 4 CRC bytes

  This writes one with valid block checksums, so TensorFlow's reader accepts the table and meets
  the altered entry itself::

    rewrite_index(prefix, {key: lambda entry: entry.shape.dim[0].__setattr__("size", -5)})
"""

from __future__ import annotations

import struct
from typing import Any, Callable

import numpy as np

import cudnn_rnn
from rnn_testing import assert_close

TOLERANCE = 1e-5


def run_ours(found: Any, record: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``found`` converted and run by ``cudnn_rnn_v3`` on the record's batch (batch-major; states [K, B, N])."""
    if "rnn_mode" in record:
        found = found.with_hints(rnn_mode=str(record["rnn_mode"]))
    config = found.config
    params = found.to_params().value
    c0 = record.get("c0")
    result = cudnn_rnn.cudnn_rnn_v3(record["x"], np.swapaxes(record["h0"], 0, 1),
                                    None if c0 is None else np.swapaxes(c0, 0, 1), params, record["lengths"],
                                    rnn_mode=config.rnn_mode, direction=config.direction, is_training=False,
                                    time_major=False)
    ours = {"output": result.output, "output_h": np.swapaxes(result.output_h, 0, 1)}
    if config.rnn_mode == "lstm":
        ours["output_c"] = np.swapaxes(result.output_c, 0, 1)
    return ours


def step_reset_before(tensors: dict[str, np.ndarray], record: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """TF's GRUBlockCell kernel stepped over the record's ragged batch with gru_block_cell tensors."""
    x, lengths, h = record["x"], record["lengths"], record["h0"][0]
    outputs = np.zeros(x.shape[:2] + h.shape[1:], x.dtype)
    for t in range(x.shape[1]):
        *_, new_h = cudnn_rnn.gru_block_cell(x[:, t], h, tensors["w_ru"], tensors["w_c"], tensors["b_ru"],
                                             tensors["b_c"])
        valid = (t < lengths)[:, None]
        h = np.where(valid, new_h, h)
        outputs[:, t] = np.where(valid, new_h, 0)
    return {"output": outputs, "output_h": h[None]}


def compare(ours: dict[str, np.ndarray], record: dict[str, np.ndarray], what: str) -> None:
    """Outputs at valid steps and final states within :data:`TOLERANCE`; padded steps exactly zero."""
    valid = np.arange(record["x"].shape[1])[None, :] < record["lengths"][:, None]
    assert_close(ours["output"][valid], record["output"][valid], TOLERANCE, f"{what} output")
    assert not np.any(ours["output"][~valid]), f"{what}: output at padded steps"
    for name in ("output_h", "output_c"):
        if name in record:
            assert_close(ours[name], record[name], TOLERANCE, f"{what} {name}")

TABLE_MAGIC = 0xDB4775248B80FB57
CRC_MASK_DELTA = 0xA282EAD8
_POLYNOMIAL = 0x82F63B78  # CRC-32C (Castagnoli), reversed


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + CRC_MASK_DELTA) & 0xFFFFFFFF


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, position


def _block_entries(data: bytes, offset: int, size: int) -> list[tuple[bytes, bytes]]:
    block = data[offset:offset + size]
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end, position, key, entries = len(block) - 4 - 4 * restarts, 0, b"", []
    while position < end:
        shared, position = _read_varint(block, position)
        unshared, position = _read_varint(block, position)
        length, position = _read_varint(block, position)
        key = key[:shared] + block[position:position + unshared]
        position += unshared
        entries.append((key, block[position:position + length]))
        position += length
    return entries


def read_table(data: bytes) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a table written by TensorFlow (uncompressed blocks)."""
    position = len(data) - 48
    for _ in range(2):  # skip the meta-index handle
        _, position = _read_varint(data, position)
    index_offset, position = _read_varint(data, position)
    index_size, _ = _read_varint(data, position)
    entries = []
    for _, handle in _block_entries(data, index_offset, index_size):
        offset, position = _read_varint(handle, 0)
        size, _ = _read_varint(handle, position)
        entries += _block_entries(data, offset, size)
    return entries


def _write_block(out: bytearray, entries: list[tuple[bytes, bytes]], block_type: int = 0) -> bytes:
    body = bytearray()
    restarts = []
    for key, value in entries:
        restarts.append(len(body))
        body += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    for restart in restarts or [0]:
        body += struct.pack("<I", restart)
    body += struct.pack("<I", len(restarts or [0]))
    offset = len(out)
    out += body + bytes([block_type]) + struct.pack("<I", masked_crc(bytes(body) + bytes([block_type])))
    return varint(offset) + varint(len(body))


def write_table(entries: list[tuple[bytes, bytes]], block_type: int = 0) -> bytes:
    """A table holding ``entries`` (sorted keys) in one data block, with valid checksums."""
    out = bytearray()
    data_handle = _write_block(out, entries, block_type)
    meta_handle = _write_block(out, [])
    index_handle = _write_block(out, [(entries[-1][0] + b"\xff", data_handle)])
    footer = meta_handle + index_handle
    return bytes(out + footer + b"\x00" * (40 - len(footer)) + struct.pack("<Q", TABLE_MAGIC))


def rewrite_index(prefix: str, changes: dict[str, Callable[[object], None]], block_type: int = 0) -> None:
    """Apply ``changes[key](entry)`` to the BundleEntryProto of each named variable (key "" is the
    BundleHeaderProto) and write ``prefix.index`` back."""
    from tensorflow.core.protobuf import tensor_bundle_pb2

    with open(prefix + ".index", "rb") as handle:
        entries = read_table(handle.read())
    rewritten = []
    for key, value in entries:
        name = key.decode("utf-8", errors="backslashreplace")
        if name in changes:
            proto = (tensor_bundle_pb2.BundleHeaderProto if name == "" else tensor_bundle_pb2.BundleEntryProto)()
            proto.ParseFromString(value)
            changes[name](proto)
            value = proto.SerializeToString()
        rewritten.append((key, value))
    with open(prefix + ".index", "wb") as handle:
        handle.write(write_table(rewritten, block_type))
