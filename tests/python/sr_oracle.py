"""Stochastic-rounding and cast oracles, extending tests/python/oracle.py.

Written from docs/numerics.md (section 2: rounding modes, Philox counter layout) and
shared/docs/nvfp4-spec.md only; not from the C++ sources.

Stochastic rounding of y (float32, already clamped to [-6, 6]) to E2M1
--------------------------------------------------------------------
* lo <= |y| < hi are neighbouring E2M1 magnitudes, f = (|y| - lo) / (hi - lo)
  (computed here exactly with Fractions from the float32 value); |y| >= 6 -> 6 (code 7).
* w = primary word of the element (philox.sr_primary_words), element index =
  row * padded_cols + col in the *stored* (blocked, padded) layout.
* k-bit SR: up iff (w >> (32 - k)) < floor(f * 2^k).
* exact SR: up iff w < floor(f * 2^32); if w == floor(f * 2^32) and the remainder
  rho = f * 2^32 - floor(f * 2^32) is non-zero, compare the extension words e_1..e_4
  (philox.sr_extension_words) with the next base-2^32 digits d_1..d_4 of rho in order;
  the first difference decides (e_n < d_n -> up, e_n > d_n -> down); all equal -> down.
  (rho == 0 -> down.)  This is "up iff U < f" with U = 0.w e_1 e_2 e_3 e_4 in base 2^32.
* hw SR (bits = HW, the CLI's --sr-bits hw, sr_bits = -8 in the trace): r = the element's random
  byte (philox.sr_hw_bytes); up iff r + floor(f * 2^8) >= 2^8 (the carry form).
* The sign of y is kept (negative values rounding to 0 give code 8).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Optional

import ml_dtypes
import numpy as np

import oracle as o
import philox

F32 = np.float32
TWO32 = 1 << 32
_GRID = [Fraction(float(v)) for v in o.E2M1_MAGNITUDES]  # 0, 1/2, ..., 6


# ---------------------------------------------------------------------------
# exact fraction arithmetic on the float32 magnitude
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SRFraction:
    """Exact data of one magnitude |y| (float32) for SR."""

    lo_code: int  # E2M1 code (0..7) of lo
    hi_code: int  # E2M1 code of hi (== lo_code when |y| is on the grid or saturates)
    f: Fraction  # (|y| - lo) / (hi - lo) in [0, 1)
    floor32: int  # floor(f * 2^32)
    digits: tuple  # d_1..d_4: base-2^32 digits of f*2^32 - floor32 (exactly f, as f*2^160 is an integer)

    def floor_k(self, k: int) -> int:
        return (self.f.numerator << k) // self.f.denominator


def sr_fraction(mag) -> SRFraction:
    """Exact SR data of one non-negative float32 magnitude."""
    v = np.float32(mag)
    if not np.isfinite(v) or v < 0 or np.signbit(v):
        raise ValueError("sr_fraction: finite non-negative magnitude expected")
    q = Fraction(float(v))  # float32 -> float64 -> Fraction: exact
    if q >= 6:
        return SRFraction(7, 7, Fraction(0), 0, (0, 0, 0, 0))
    lo_code = max(c for c in range(8) if _GRID[c] <= q)
    lo, hi = _GRID[lo_code], _GRID[lo_code + 1]
    f = (q - lo) / (hi - lo)
    assert 0 <= f < 1
    t = f * TWO32
    floor32 = t.numerator // t.denominator
    rho = t - floor32
    digits = []
    for _ in range(4):
        rho *= TWO32
        d = rho.numerator // rho.denominator
        digits.append(int(d))
        rho -= d
    # a float32 f is a multiple of 2^-149 (2^-148 after the division by 1/2), so 160 bits
    # after the point always hold all of it (docs/numerics.md section 2)
    assert rho == 0, "f has bits below 2^-160?"
    hi_code = lo_code + 1 if f != 0 else lo_code
    return SRFraction(lo_code, hi_code, f, int(floor32), tuple(digits))


def exact_sr_up(fr: SRFraction, w: int, ext) -> bool:
    """Exact SR decision from the primary word w and the 4 extension words."""
    if w < fr.floor32:
        return True
    if w > fr.floor32:
        return False
    for e, d in zip((int(v) for v in ext), fr.digits):
        if e != d:
            return e < d
    return False  # U >= f (all digits equal: rho == 0 or U's digits equal f's)


def kbit_sr_up(fr: SRFraction, w: int, k: int) -> bool:
    if not 1 <= k <= 32:
        raise ValueError("k must be in 1..32")
    return (int(w) >> (32 - k)) < fr.floor_k(k)


HW = -8  # hw SR, as traces record it


def e2m1_sr_codes(y, index, seed: int, stream: int, bits: int) -> np.ndarray:
    """E2M1 stochastic rounding of float32 y (clamped to [-6, 6]) -> codes (uint8).

    `index`: element indices (same shape as y) in the stored layout.  bits = 0: exact SR,
    1..32: k-bit SR, HW: hw SR.  Finite inputs only.
    """
    y = o._as_f32_array(y)
    if not np.all(np.isfinite(y)):
        raise ValueError("e2m1_sr_codes: finite inputs only")
    if np.any(np.abs(y) > o.E2M1_MAX):
        raise ValueError("e2m1_sr_codes: clamp y to [-6, 6] first")
    index = np.asarray(index, dtype=np.uint64)
    if index.shape != y.shape:
        raise ValueError("index must have the shape of y")
    mag = np.abs(y)
    uniq, inv = np.unique(mag, return_inverse=True)
    inv = inv.reshape(mag.shape)
    fr = [sr_fraction(v) for v in uniq]
    lo = np.array([r.lo_code for r in fr], dtype=np.uint8)[inv]
    hi = np.array([r.hi_code for r in fr], dtype=np.uint8)[inv]
    if bits == HW:
        r = philox.sr_hw_bytes(index, seed, stream)
        f8 = np.array([r_.floor_k(8) for r_ in fr], dtype=np.uint64)[inv]
        up = (r + f8) >= np.uint64(256)
        up &= hi != lo
        code = np.where(up, hi, lo).astype(np.uint8)
        return code | (np.signbit(y).astype(np.uint8) << np.uint8(3))
    w = philox.sr_primary_words(index, seed, stream).astype(np.uint64)
    if bits == 0:
        fl = np.array([r.floor32 for r in fr], dtype=np.uint64)[inv]
        up = w < fl
        tie = (w == fl) & (hi != lo)
        if tie.any():
            ext = philox.sr_extension_words(index[tie], seed, stream)
            idx = inv[tie]
            up[tie] = [exact_sr_up(fr[i], int(wv), e) for i, wv, e in zip(idx, w[tie], ext)]
    else:
        fk = np.array([r.floor_k(bits) for r in fr], dtype=np.uint64)[inv]
        up = (w >> np.uint64(32 - bits)) < fk
    up &= hi != lo
    code = np.where(up, hi, lo).astype(np.uint8)
    return code | (np.signbit(y).astype(np.uint8) << np.uint8(3))


def sr_tie_elements(y, index, seed: int, stream: int) -> np.ndarray:
    """Mask of the elements on exact SR's tie path (w == floor(f 2^32), f has bits below 2^-32)."""
    mag = np.abs(o._as_f32_array(y))
    w = philox.sr_primary_words(np.asarray(index, dtype=np.uint64), seed, stream)
    out = np.zeros(mag.shape, dtype=bool)
    for pos in np.ndindex(mag.shape):
        fr = sr_fraction(mag[pos])
        out[pos] = fr.hi_code != fr.lo_code and int(w[pos]) == fr.floor32 and any(fr.digits)
    return out


# ---------------------------------------------------------------------------
# NVFP4 / MXFP4 with SR
# ---------------------------------------------------------------------------

def stored_index(shape_padded, rows: Optional[int] = None) -> np.ndarray:
    """row * padded_cols + col for a [rows, padded_cols] stored array (uint64)."""
    rp, cp = shape_padded
    rows = rp if rows is None else rows
    r = np.arange(rows, dtype=np.uint64)[:, None]
    c = np.arange(cp, dtype=np.uint64)[None, :]
    return r * np.uint64(cp) + c


def _with_sr(ref: o.QuantResult, scale_full: np.ndarray, s_dec, seed, stream, bits):
    idx = stored_index(ref.codes.shape)
    codes = e2m1_sr_codes(ref.scaled, idx, seed, stream, bits)
    with np.errstate(under="ignore"):
        deq = o._f32(o._f32(o.e2m1_value(codes) * scale_full) * s_dec)
    rs, cs = ref.stored_shape
    deq = deq[:, :cs]
    return dataclasses.replace(ref, codes=codes,
                               dequantized=np.ascontiguousarray(deq.T) if ref.transposed else deq)


def quantize_nvfp4_sr(x, layout="1x16", axis=1, scale_rule="te", bits=0, seed=0, stream=0):
    """NVFP4 (oracle.quantize_nvfp4 for the scales) with stochastic element rounding."""
    ref = o.quantize_nvfp4(x, layout=layout, axis=axis, scale_rule=scale_rule)
    br, bc = ref.block
    S_full = o._expand(ref.scale_values, br, bc)[: ref.codes.shape[0]]
    return _with_sr(ref, S_full, ref.s_dec, seed, stream, bits)


def quantize_mxfp4_sr(x, layout="1x32", axis=1, scale_rule="floor", bits=0, seed=0, stream=0):
    ref = o.quantize_mxfp4(x, layout=layout, axis=axis, scale_rule=scale_rule)
    br, bc = ref.block
    X_full = o._expand(ref.scale_values, br, bc)[: ref.codes.shape[0]]
    return _with_sr(ref, X_full, o.ONE, seed, stream, bits)


# ---------------------------------------------------------------------------
# casts and FP8 E5M2 per tensor
# ---------------------------------------------------------------------------

E5M2_MAX = F32(57344)


def cast_bf16(x):
    """float32 -> BF16 (RNE, overflow to Inf): (uint16 codes, float32 values)."""
    x = o._check_input(x)
    b = x.astype(ml_dtypes.bfloat16)
    return b.view(np.uint16).copy(), b.astype(np.float32)


def cast_fp16(x):
    """float32 -> FP16 (RNE, overflow to Inf): (uint16 codes, float32 values)."""
    x = o._check_input(x)
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    return h.view(np.uint16).copy(), h.astype(np.float32)


def e5m2_satfinite(v) -> np.ndarray:
    """float32 -> E5M2 codes, RNE, saturating to +-57344 (finite inputs)."""
    v = o._as_f32_array(v)
    if not np.all(np.isfinite(v)):
        raise ValueError("e5m2_satfinite: finite inputs only")
    vc = o._f32(np.clip(v, -E5M2_MAX, E5M2_MAX))
    return np.asarray(vc.astype(ml_dtypes.float8_e5m2)).view(np.uint8).copy()


def e5m2_value(codes) -> np.ndarray:
    return np.asarray(codes, dtype=np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float32)


def quantize_fp8_e5m2_tensor(x):
    """Per-tensor current scaling (numerics.md section 5): enc = min(57344/amax, FLT_MAX)
    (1 if amax == 0), dec = 1/enc, code = E5M2_satfinite(x*enc), x_hat = value*dec.
    -> (codes uint8 [R, C], dec float32, enc float32, dequantized float32)."""
    x = o._check_input(x)
    amax = o._f32(np.max(np.abs(x))) if x.size else o.ZERO
    if amax > 0:
        with np.errstate(over="ignore"):
            enc = o._f32(np.minimum(E5M2_MAX / amax, o.FLT_MAX))
    else:
        enc = o.ONE
    dec = o._f32(o.ONE / enc)
    with np.errstate(over="ignore"):
        codes = e5m2_satfinite(o._f32(x * enc))
    with np.errstate(under="ignore"):
        deq = o._f32(e5m2_value(codes) * dec)
    return codes, dec, enc, deq
