"""The recurrent product of the compiled cells: a register-tiled GEMM on pre-packed panels (numba).

    panels = pack(b)              # b [K, N] -> panels [ceil(N / NR), K, NR], zero past N
    product(a, panels, out)       # out [M, N] <- a [M, K] @ b  (compiled; callable from compiled code)
    add_product(a, b, out)        # out [M, N] += a @ b by BLAS (beta = 1): backprop's weight gradients

Per step the cells multiply a few rows (the batch) by the same matrix: R^T forward, R in backprop. A BLAS
packs its operand on every call and is tuned for large M; at M = 4-64 it reaches 25-80 GFLOP/s on one
core of a 130 GFLOP/s machine. Here the matrix is packed once per call of the op (``pack``: NR columns
at a time, each k's NR values contiguous), and each tile of MR rows x NR columns is one compiled loop
over k (``_tile``): its MR x NV accumulators stay in vector registers, and each k loads NV vectors of the
panel and broadcasts MR values of ``a``: out[m, j] = sum_k a[m, k] * b[k, j], one fused multiply-add
per term, k in order. The vectors are LLVM's (``llvm.fma``, a masked store for the last panel's
columns): as wide as the host's registers, narrower ones where it has no AVX-512 (``VECTOR_BITS``).

``add_product`` is for the large products of backprop, each chunk's share of a weight gradient: BLAS's own
GEMM, called from compiled code with beta = 1, adds into the gradient in place, where ``target += a @ b``
would make a temporary of the gradient's size.
"""

from __future__ import annotations

import importlib
from typing import Any

import llvmlite.binding
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .._arrays import Array

__all__ = ["TILE", "columns_per_panel", "pack", "product", "add_product"]

#: the width of the host's vector registers the tiles use
VECTOR_BITS = 512 if llvmlite.binding.get_host_cpu_features().get("avx512f", False) else 256
#: (MR rows, NV vectors of columns) of a tile: MR * NV accumulators + NV panel vectors + 1 broadcast fit in
#: the registers (32 with AVX-512, 16 without)
TILE = {512: (8, 2), 256: (4, 2)}[VECTOR_BITS]


#: declares an LLVM function (here the intrinsics) in the module being compiled, once
_declare: Any = cgutils.get_or_insert_function


def _lanes(itemsize: int) -> int:
    return VECTOR_BITS // (8 * itemsize)


def columns_per_panel(dtype: Any) -> int:
    """NR: the columns of one panel, NV vectors of ``dtype``."""
    return TILE[1] * _lanes(np.dtype(dtype).itemsize)


def pack(b: Array) -> Array:
    """b [K, N] (any strides) as panels [ceil(N / NR), K, NR]: panels[j, k, l] = b[k, j*NR + l], 0 past N."""
    k, n = b.shape
    nr = columns_per_panel(b.dtype)
    panels = np.empty((-(-n // nr), k, nr), dtype=b.dtype)
    _pack_into(b, panels)
    return panels


@njit(cache=True, nogil=True)
def _pack_into(b: Any, panels: Any) -> None:
    """panels[j, k, l] <- b[k, j*NR + l] (0 past N), reading b along its smaller stride (R^T: R's rows)."""
    depth, n = b.shape
    nr = panels.shape[2]
    by_rows = b.strides[0] < b.strides[1]
    for panel in range(panels.shape[0]):
        first = panel * nr
        width = min(nr, n - first)
        if by_rows:
            for lane in range(width):
                for k in range(depth):
                    panels[panel, k, lane] = b[k, first + lane]
        else:
            for k in range(depth):
                for lane in range(width):
                    panels[panel, k, lane] = b[k, first + lane]
        for k in range(depth):
            for lane in range(width, nr):
                panels[panel, k, lane] = 0


def _tile(rows: int) -> Any:
    """The compiled tile of ``rows`` rows: tile(a, panels, out, row, panel, width) sets out[row:row+rows,
    panel*NR : panel*NR + width] <- a[row:row+rows] @ the panel (rows of ``a`` and ``out`` contiguous)."""

    @intrinsic
    def tile(typingctx: Any, a: Any, panels: Any, out: Any, row: Any, panel: Any, width: Any) -> Any:
        signature = types.void(a, panels, out, types.intp, types.intp, types.intp)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            a_value, panels_value, out_value, row, panel, width = args
            element = context.get_value_type(sig.args[0].dtype)
            size = context.get_abi_sizeof(element)  # bytes of one element: also the loads' and stores' alignment
            lanes = _lanes(size)
            vector, nv = ir.VectorType(element, lanes), TILE[1]
            suffix = f"v{lanes}{'f32' if isinstance(element, ir.FloatType) else 'f64'}"
            intp = context.get_value_type(types.intp)

            def const(value: int) -> Any:
                return ir.Constant(intp, value)

            def splat(value: Any, kind: Any) -> Any:
                first = builder.insert_element(ir.Constant(kind, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
                return builder.shuffle_vector(first, ir.Constant(kind, ir.Undefined),
                                              ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))

            A = context.make_array(sig.args[0])(context, builder, a_value)
            P = context.make_array(sig.args[1])(context, builder, panels_value)
            C = context.make_array(sig.args[2])(context, builder, out_value)
            itemsize = const(size)
            depth = builder.extract_value(A.shape, 1)
            lda = builder.sdiv(builder.extract_value(A.strides, 0), itemsize)
            ldc = builder.sdiv(builder.extract_value(C.strides, 0), itemsize)
            nr = nv * lanes
            fma = _declare(builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.{suffix}")
            a_rows = builder.gep(A.data, [builder.mul(row, lda)])
            panel_start = builder.gep(P.data, [builder.mul(builder.mul(panel, depth), const(nr))])
            zero = ir.Constant(vector, [0.0] * lanes)
            entry = builder.block
            loop, done = builder.append_basic_block("tile_k"), builder.append_basic_block("tile_store")
            builder.cbranch(builder.icmp_signed(">", depth, const(0)), loop, done)

            builder.position_at_end(loop)
            k = builder.phi(intp)
            accumulators = [[builder.phi(vector) for _ in range(nv)] for _ in range(rows)]
            k.add_incoming(const(0), entry)
            for line in accumulators:
                for phi in line:
                    phi.add_incoming(zero, entry)
            at_k = builder.gep(panel_start, [builder.mul(k, const(nr))])
            columns = [builder.load(builder.bitcast(builder.gep(at_k, [const(v * lanes)]), vector.as_pointer()),
                                    align=size)
                       for v in range(nv)]
            updated = []
            for m in range(rows):
                value = builder.load(builder.gep(a_rows, [builder.add(builder.mul(const(m), lda), k)]))
                broadcast = splat(value, vector)
                updated.append([builder.call(fma, [broadcast, columns[v], accumulators[m][v]]) for v in range(nv)])
            k_next = builder.add(k, const(1))
            k.add_incoming(k_next, builder.block)
            for m in range(rows):
                for v in range(nv):
                    accumulators[m][v].add_incoming(updated[m][v], builder.block)
            builder.cbranch(builder.icmp_signed("<", k_next, depth), loop, done)

            builder.position_at_end(done)
            results = []
            for m in range(rows):
                line = []
                for v in range(nv):
                    phi = builder.phi(vector)
                    phi.add_incoming(zero, entry)
                    phi.add_incoming(updated[m][v], loop)
                    line.append(phi)
                results.append(line)
            mask_type = ir.VectorType(ir.IntType(1), lanes)
            store = _declare(builder.module, ir.FunctionType(ir.VoidType(), [vector, vector.as_pointer(),
                                                                              ir.IntType(32), mask_type]),
                             f"llvm.masked.store.{suffix}.p0{suffix}")
            lane_index = ir.Constant(ir.VectorType(intp, lanes), list(range(lanes)))
            out_start = builder.gep(C.data, [builder.add(builder.mul(row, ldc), builder.mul(panel, const(nr)))])
            for v in range(nv):  # lanes at or past ``width`` (the padding of the last panel) are not written
                mask = builder.icmp_signed("<", lane_index, splat(builder.sub(width, const(v * lanes)),
                                                                   ir.VectorType(intp, lanes)))
                for m in range(rows):
                    target = builder.gep(out_start, [builder.add(builder.mul(const(m), ldc), const(v * lanes))])
                    builder.call(store, [results[m][v], builder.bitcast(target, vector.as_pointer()),
                                         ir.Constant(ir.IntType(32), size), mask])
            return context.get_dummy_value()

        return signature, codegen

    return tile


_ROWS = TILE[0]
_tile_full, _tile_half, _tile_quarter, _tile_one = (_tile(max(1, _ROWS // f)) for f in (1, 2, 4, 8))
_HALF, _QUARTER = max(1, _ROWS // 2), max(1, _ROWS // 4)


@njit(cache=True, nogil=True, error_model="numpy")
def product(a: Any, panels: Any, out: Any) -> None:
    """out [M, N] <- a [M, K] @ the matrix ``panels`` packs (``pack``, which makes them contiguous; N as the
    matrix's, or up to the last panel's padding, which gives 0); the rows of ``a`` and ``out`` contiguous."""
    rows, n = a.shape[0], out.shape[1]
    nr = panels.shape[2]
    if a.shape[1] != panels.shape[1] or out.shape[0] != rows or -(-n // nr) != panels.shape[0]:
        raise ValueError("product: the shapes of a, panels and out do not agree")
    if rows == 0 or n == 0:
        return
    if (a.shape[1] > 1 and a.strides[1] != a.itemsize) or (n > 1 and out.strides[1] != out.itemsize):
        raise ValueError("product: the rows of a and out must be contiguous")
    for panel in range(panels.shape[0]):
        width = min(nr, n - panel * nr)
        row = 0
        while row + _ROWS <= rows:
            _tile_full(a, panels, out, row, panel, width)
            row += _ROWS
        if rows - row >= _HALF:
            _tile_half(a, panels, out, row, panel, width)
            row += _HALF
        if rows - row >= _QUARTER:
            _tile_quarter(a, panels, out, row, panel, width)
            row += _QUARTER
        while row < rows:
            _tile_one(a, panels, out, row, panel, width)
            row += 1


# ---- out += a @ b by BLAS, from compiled code -----------------------------------------------
def _typed_blas_add_product(typingctx: Any, a: Any, b: Any, out: Any) -> Any:
    """out [M, N] += a [M, K] @ b [K, N] by the BLAS numba's ``np.dot`` calls (SciPy's, through numba's
    ``numba_xxgemm``) with beta = 1: no temporary, and the GIL stays released. Each array C- or F-contiguous,
    one dtype (float32 or float64); the shapes checked by the caller."""
    linalg: Any = importlib.import_module("numba.np.linalg")  # numba's BLAS glue (untyped)
    arrays = (a, b, out)
    if not all(isinstance(t, types.Array) and t.ndim == 2 and t.layout in "CF" for t in arrays):
        return None
    if len({t.dtype for t in arrays}) != 1 or a.dtype not in (types.float32, types.float64):
        return None
    linalg.ensure_blas()
    signature = types.none(a, b, out)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        char, pointer, count = ir.IntType(8), ir.IntType(8).as_pointer(), cgutils.intp_t
        gemm = _declare(builder.module, ir.FunctionType(ir.IntType(32), [
            char, char, char, count, count, count, pointer, pointer, count, pointer, count, pointer, pointer, count]),
            "numba_xxgemm")
        views = [context.make_array(t)(context, builder, value) for t, value in zip(sig.args, args)]
        shapes = [_unpack(builder, view.shape, 2) for view in views]

        def operand(index: int) -> tuple[Any, Any, Any]:
            """(transposed or not, leading dimension, data) of a or b as BLAS sees it, in out's storage order."""
            layout = sig.args[index].layout
            flag = ir.Constant(char, ord("n" if layout == out.layout else "t"))
            lead = shapes[index][1] if layout == "C" else shapes[index][0]
            return flag, lead, builder.bitcast(views[index].data, pointer)

        def scalar(value: float) -> Any:
            return builder.bitcast(linalg.make_constant_slot(context, builder, a.dtype, value), pointer)

        (m, k), (_, n) = shapes[0], shapes[1]
        out_lead = shapes[2][1] if out.layout == "C" else shapes[2][0]
        kind = ir.Constant(char, ord(linalg.get_blas_kind(a.dtype)))
        c_data = builder.bitcast(views[2].data, pointer)
        if out.layout == "C":  # row-major out: BLAS computes out^T (column-major) += b^T a^T
            (flag_1, lead_1, data_1), (flag_2, lead_2, data_2) = operand(1), operand(0)
            sizes = (n, m, k)
        else:
            (flag_1, lead_1, data_1), (flag_2, lead_2, data_2) = operand(0), operand(1)
            sizes = (m, n, k)
        status = builder.call(gemm, (kind, flag_1, flag_2, *sizes, scalar(1.0), data_1, lead_1, data_2, lead_2,
                                     scalar(1.0), c_data, out_lead))
        linalg.check_blas_return(context, builder, status)
        return context.get_dummy_value()

    return signature, codegen


_blas_add_product: Any = intrinsic(_typed_blas_add_product)
_unpack: Any = cgutils.unpack_tuple


@njit(cache=True, nogil=True)
def add_product(a: Any, b: Any, out: Any) -> None:
    """out [M, N] += a [M, K] @ b [K, N] (each C- or F-contiguous, one dtype): BLAS with beta = 1, in place."""
    if a.shape[1] != b.shape[0] or out.shape[0] != a.shape[0] or out.shape[1] != b.shape[1]:
        raise ValueError("add_product: the shapes of a, b and out do not agree")
    if a.shape[0] == 0 or b.shape[1] == 0 or a.shape[1] == 0:
        return
    _blas_add_product(a, b, out)
