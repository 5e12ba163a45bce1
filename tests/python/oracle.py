"""Independent Python reference ("oracle") for the fp4drift quantizers.

Written from docs/nvfp4-spec.md (shared/docs) only, on top of numpy and ml_dtypes.
It is deliberately simple and slow; its job is to be obviously right, so that the
C++/CUDA implementation can be compared against it code for code.

Arithmetic rules
----------------
* Every step the spec describes as "float32" is done on np.float32 scalars/arrays.
  No Python float ever enters such an expression (under numpy 1.x value-based casting,
  ``np.float32(a) * 0.5`` could silently become float64).  ``_f32`` asserts the dtype
  of every intermediate.
* Constants are built in float32 exactly as C++ would spell them:
  ``1/6`` is ``np.float32(1) / np.float32(6)`` (== C++ ``1.0f / 6.0f``).
* Only the exact, integer-valued parts (exponents of MX scales) use float64/int, and
  only where that arithmetic is exact.

Element conversions
-------------------
* E2M1: RNE through ``ml_dtypes.float4_e2m1fn`` after clamping to [-6, 6]
  (ml_dtypes NaN -> code 0x8 differs from CUDA's 0x7: finite inputs only here).
  4-bit codes are derived from the decoded value and its sign bit (lookup), and
  ``e2m1_codes_via_view`` gives the raw-bit route so the self-test can check both agree.
* E4M3 (fn): clamp to [-448, 448] first (CUDA __NV_SATFINITE; ml_dtypes does not
  saturate), then ``ml_dtypes.float8_e4m3fn``; codes via ``.view(np.uint8)``.

Orientation
-----------
``quantize_*`` take a 2-D float32 ``x`` (rows x cols).  Blocks of length L run along
``axis``: axis 1 = along each row (contiguous, last dim); axis 0 = along columns, which
is quantizing ``x.T`` row-wise.  Codes and scales are returned in the *stored*
orientation (``x.T`` for axis 0 with 1xL blocks); ``dequantized`` is returned in the
original orientation.  The stored column count is padded with zeros to a multiple of
the block length; for 2-D tiles (16x16, 128x128) the rows of the scale grid are
ceil(R / tile) and the codes keep exactly R rows.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import ml_dtypes
import numpy as np

F32 = np.float32
FLT_MAX = np.finfo(np.float32).max  # np.float32
E2M1_MAX = F32(6)
E4M3_MAX = F32(448)
ONE = F32(1)
ZERO = F32(0)
INV6 = F32(1) / F32(6)  # C++: 1.0f / 6.0f
NVFP4_NUM = F32(6) * F32(448)  # 2688, exact

# magnitude of E2M1 codes 0..7
E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
# value of all 16 codes (8 = -0.0)
E2M1_VALUES = np.concatenate([E2M1_MAGNITUDES, -E2M1_MAGNITUDES]).astype(np.float32)

E4M3_MIN_NORMAL = F32(2.0**-6)


def _f32(a):
    """Assert that ``a`` is float32 (scalar or array) and return it."""
    dt = getattr(a, "dtype", None)
    if dt != np.float32:
        raise AssertionError(f"oracle: intermediate is {type(a).__name__}/{dt}, expected float32")
    return a


def _as_f32_array(x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.float32:
        raise TypeError(f"oracle expects float32 input, got {arr.dtype}")
    return arr


# ---------------------------------------------------------------------------
# E2M1
# ---------------------------------------------------------------------------

def _e2m1_magnitude_index(mag: np.ndarray) -> np.ndarray:
    """Map exact E2M1 magnitudes (float32) to codes 0..7."""
    idx = np.searchsorted(E2M1_MAGNITUDES, mag)
    idx = np.clip(idx, 0, 7)
    if not np.array_equal(E2M1_MAGNITUDES[idx], mag):
        raise AssertionError("oracle: value is not on the E2M1 grid")
    return idx.astype(np.uint8)


def e2m1_rne_codes(y) -> np.ndarray:
    """E2M1 round-to-nearest-even with saturation to +-6 -> 4-bit codes (uint8 0..15).

    Finite inputs only.  The sign of zero is kept (-0.0 and tiny negatives -> 0x8).
    """
    y = _as_f32_array(y)
    if not np.all(np.isfinite(y)):
        raise ValueError("oracle.e2m1_rne_codes: finite inputs only")
    yc = _f32(np.clip(y, -E2M1_MAX, E2M1_MAX))  # saturate explicitly (ml_dtypes does too)
    dec = yc.astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
    mag = np.abs(dec)
    codes = _e2m1_magnitude_index(mag) | (np.signbit(dec).astype(np.uint8) << np.uint8(3))
    return codes.astype(np.uint8)


def e2m1_codes_via_view(y) -> np.ndarray:
    """Same conversion, codes read from ml_dtypes' raw storage (low nibble of one byte)."""
    y = _as_f32_array(y)
    yc = np.clip(y, -E2M1_MAX, E2M1_MAX)
    raw = yc.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    return (raw & np.uint8(0x0F)).astype(np.uint8)


def e2m1_value(codes) -> np.ndarray:
    """Decode 4-bit E2M1 codes to float32 (code 8 -> -0.0)."""
    c = np.asarray(codes).astype(np.intp)
    if np.any((c < 0) | (c > 15)):
        raise ValueError("E2M1 code out of range")
    return E2M1_VALUES[c]


def pack_fp4(codes: np.ndarray) -> np.ndarray:
    """Pack 4-bit codes along the last axis: element 2i -> low nibble, 2i+1 -> high nibble."""
    codes = np.asarray(codes, dtype=np.uint8)
    if codes.shape[-1] % 2:
        raise ValueError("pack_fp4 needs an even number of columns")
    lo = codes[..., 0::2] & 0x0F
    hi = codes[..., 1::2] & 0x0F
    return (lo | (hi << 4)).astype(np.uint8)


def unpack_fp4(packed: np.ndarray) -> np.ndarray:
    """Inverse of pack_fp4: [..., n] bytes -> [..., 2n] codes."""
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    return out


# ---------------------------------------------------------------------------
# E4M3
# ---------------------------------------------------------------------------

def e4m3_satfinite(v) -> np.ndarray:
    """float32 -> E4M3 codes (uint8), RNE, saturating to +-448 (CUDA __NV_SATFINITE)."""
    v = _as_f32_array(v)
    if np.any(np.isnan(v)):
        raise ValueError("oracle.e4m3_satfinite: NaN input")
    vc = _f32(np.clip(v, -E4M3_MAX, E4M3_MAX))  # also maps +-Inf to +-448
    return np.asarray(vc.astype(ml_dtypes.float8_e4m3fn)).view(np.uint8).copy()


def e4m3_value(codes) -> np.ndarray:
    c = np.asarray(codes, dtype=np.uint8)
    return c.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


# ---------------------------------------------------------------------------
# block helpers
# ---------------------------------------------------------------------------

def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _stored(x: np.ndarray, transposed: bool) -> np.ndarray:
    return np.ascontiguousarray(x.T) if transposed else x


def _pad2d(m: np.ndarray, rpad: int, cpad: int) -> np.ndarray:
    r, c = m.shape
    out = np.zeros((rpad, cpad), dtype=np.float32)
    out[:r, :c] = m
    return out


def _block_amax(mp: np.ndarray, br: int, bc: int) -> np.ndarray:
    rp, cp = mp.shape
    t = np.abs(mp).reshape(rp // br, br, cp // bc, bc)
    return _f32(t.max(axis=(1, 3)))


def _expand(s: np.ndarray, br: int, bc: int) -> np.ndarray:
    return np.repeat(np.repeat(s, br, axis=0), bc, axis=1)


def _check_input(x) -> np.ndarray:
    x = _as_f32_array(x)
    if x.ndim != 2:
        raise ValueError("oracle quantizers take a 2-D array")
    if not np.all(np.isfinite(x)):
        raise ValueError("oracle quantizers: finite inputs only")
    return x


def _layout(layout: str, axis: int, block: int):
    """-> (transposed, br, bc) for '1xL' or 'LxL' layouts."""
    if axis not in (0, 1):
        raise ValueError("axis must be 0 or 1")
    if layout == f"1x{block}":
        return axis == 0, 1, block
    if layout == f"{block}x{block}":
        return False, block, block
    raise ValueError(f"unsupported layout {layout!r} for block {block}")


@dataclasses.dataclass
class QuantResult:
    """Oracle output.  Arrays in the stored orientation unless stated."""

    codes: np.ndarray  # uint8 element codes, unpacked, shape [R_s, Cpad] (stored orientation)
    scales: np.ndarray  # uint8 scale codes (E4M3 / UE8M0) or float32 decode scales (FP8)
    scale_values: np.ndarray  # float32 decode value of each block scale, same shape as scales
    s_enc: np.float32  # global encode scale (1 where the format has none)
    s_dec: np.float32  # global decode scale (1 where the format has none)
    dequantized: np.ndarray  # float32, original orientation, shape of the input
    transposed: bool
    block: tuple  # (br, bc) in the stored orientation
    element_scale_nonzero: np.ndarray  # bool [R_s, Cpad]: the element's block scale is != 0
    stored_shape: tuple  # (R_s, C_s) before padding
    scaled: Optional[np.ndarray] = None  # float32 [R_s, Cpad]: value fed to the element rounding

    @property
    def packed_codes(self) -> np.ndarray:
        return pack_fp4(self.codes)

    @property
    def blocks(self) -> int:
        return int(self.scales.size)

    @property
    def zero_scale_blocks(self) -> int:
        return int(np.count_nonzero(self.scale_values == 0))

    @property
    def subnormal_scale_blocks(self) -> int:
        """Blocks whose (E4M3) scale is subnormal: 0 < S < 2^-6.  Zero is not counted."""
        sv = self.scale_values
        return int(np.count_nonzero((sv > 0) & (sv < E4M3_MIN_NORMAL)))


# ---------------------------------------------------------------------------
# NVFP4
# ---------------------------------------------------------------------------

def nvfp4_global_scales(amax: np.float32):
    """Spec section 2 steps 1-2: (s_enc, s_dec) from the global amax (float32)."""
    amax = _f32(F32(amax))
    if amax == 0:
        s_enc = ONE
    else:
        with np.errstate(divide="ignore", over="ignore"):
            s_enc = _f32(np.minimum(NVFP4_NUM / amax, FLT_MAX))
        if s_enc == 0 or np.isnan(s_enc):
            s_enc = ONE
    s_dec = _f32(ONE / s_enc)
    return s_enc, s_dec


def nvfp4_block_scale(a_b, s_enc, rule: str = "te") -> np.ndarray:
    """Spec section 2 step 3: E4M3 code of the block decode scale."""
    a_b = _as_f32_array(a_b)
    s_enc = _f32(s_enc)
    with np.errstate(over="ignore"):
        if rule == "te":
            v = a_b * _f32(s_enc * INV6)  # one float32 product, then one rounding to E4M3
        elif rule == "te-legacy":
            v = _f32(a_b / F32(6)) * s_enc  # TE <= 2.13: two float32 roundings
        else:
            raise ValueError(f"unknown NVFP4 scale rule {rule!r}")
    return e4m3_satfinite(_f32(np.asarray(v, dtype=np.float32)))


def quantize_nvfp4(x, layout: str = "1x16", axis: int = 1, scale_rule: str = "te",
                   amax: Optional[np.float32] = None) -> QuantResult:
    """NVFP4 with RNE elements (spec section 2).

    ``amax`` overrides the global amax (for hand-worked examples); by default it is
    max|x| over the tensor.
    """
    x = _check_input(x)
    transposed, br, bc = _layout(layout, axis, 16)
    m = _stored(x, transposed)
    rs, cs = m.shape
    rpad = _ceil_div(rs, br) * br
    cpad = _ceil_div(cs, bc) * bc
    mp = _pad2d(m, rpad, cpad)

    A = _f32(np.max(np.abs(x))) if x.size else ZERO
    if amax is not None:
        A = _f32(F32(amax))
    s_enc, s_dec = nvfp4_global_scales(A)

    a_b = _block_amax(mp, br, bc)
    scale_codes = nvfp4_block_scale(a_b, s_enc, scale_rule)
    S = e4m3_value(scale_codes)
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        e_b = _f32(np.minimum(ONE / _f32(S * s_dec), FLT_MAX))
        e_full = _expand(e_b, br, bc)
        scaled = _f32(np.clip(_f32(mp * e_full), -E2M1_MAX, E2M1_MAX))
    codes = e2m1_rne_codes(scaled)
    S_full = _expand(S, br, bc)
    with np.errstate(under="ignore"):
        deq = _f32(_f32(e2m1_value(codes) * S_full) * s_dec)

    codes = codes[:rs]
    scaled = scaled[:rs]
    deq = deq[:rs, :cs]
    nz = (S_full != 0)[:rs]
    return QuantResult(
        codes=codes, scales=scale_codes, scale_values=S, s_enc=s_enc, s_dec=s_dec,
        dequantized=_stored(deq, transposed), transposed=transposed, block=(br, bc),
        element_scale_nonzero=nz, stored_shape=(rs, cs), scaled=scaled,
    )


def e2m1_neighbours(y) -> tuple:
    """(lower, upper) E2M1 codes around float32 y (clamped to [-6, 6]) in magnitude.

    Used to check stochastic rounding: an SR result must be one of the two, and equal to
    both when |y| is on the grid.  Finite input only.
    """
    y = _f32(np.clip(_as_f32_array(y), -E2M1_MAX, E2M1_MAX))
    mag = np.abs(y)
    hi_idx = np.searchsorted(E2M1_MAGNITUDES, mag, side="left")  # first grid point >= mag
    hi_idx = np.clip(hi_idx, 0, 7)
    lo_idx = np.where(E2M1_MAGNITUDES[hi_idx] == mag, hi_idx, hi_idx - 1)
    sign = (np.signbit(y).astype(np.uint8) << np.uint8(3))
    return (lo_idx.astype(np.uint8) | sign), (hi_idx.astype(np.uint8) | sign)


# ---------------------------------------------------------------------------
# MXFP4
# ---------------------------------------------------------------------------

UE8M0_MIN_EXP = -127
UE8M0_MAX_EXP = 127


def _floor_log2_exact(a: np.ndarray) -> np.ndarray:
    """floor(log2 a) for positive finite float32 a (subnormals included), exact."""
    mant, e = np.frexp(a.astype(np.float64))  # a = mant * 2^e, mant in [0.5, 1)
    return (e - 1).astype(np.int64)


def mxfp4_scale_exponent(a_b, rule: str = "floor") -> np.ndarray:
    """UE8M0 exponent (int64, clamped to [-127, 127]) of each block; a_b == 0 -> -127."""
    a_b = _as_f32_array(a_b)
    pos = a_b > 0
    safe = np.where(pos, a_b, ONE).astype(np.float32)
    if rule == "floor":
        # OCP MX v1.0: X = 2^(floor(log2 a_b) - emax_elem), emax_elem = 2 for E2M1
        e = _floor_log2_exact(safe) - 2
    elif rule == "ceil":
        # smallest power of two X with 6*X >= a_b, decided exactly in float64
        # (6 * 2^e and a float32 a_b are both exact in float64).
        a64 = safe.astype(np.float64)
        e = _floor_log2_exact(safe) - 2  # 6*2^e <= a_b*... start low, move up
        e = e - 1
        for _ in range(4):
            need = 6.0 * np.ldexp(1.0, e) < a64
            e = np.where(need, e + 1, e)
        assert np.all(6.0 * np.ldexp(1.0, e) >= a64)
        assert np.all(6.0 * np.ldexp(1.0, e - 1) < a64)
    elif rule == "rceil":
        # X = smallest power of two >= t, t = float32(a_b * float32(1/6))
        with np.errstate(under="ignore"):
            t = _f32(safe * INV6)
        tpos = t > 0
        tsafe = np.where(tpos, t, ONE).astype(np.float32)
        fl = _floor_log2_exact(tsafe)
        is_pow2 = np.ldexp(1.0, fl) == tsafe.astype(np.float64)
        e = np.where(is_pow2, fl, fl + 1)
        e = np.where(tpos, e, UE8M0_MIN_EXP)  # t underflowed to 0: smallest X
    else:
        raise ValueError(f"unknown MXFP4 scale rule {rule!r}")
    e = np.where(pos, e, UE8M0_MIN_EXP)
    return np.clip(e, UE8M0_MIN_EXP, UE8M0_MAX_EXP).astype(np.int64)


def _pow2_f32(e: np.ndarray) -> np.ndarray:
    return np.ldexp(np.ones(e.shape, dtype=np.float32), e.astype(np.int32)).astype(np.float32)


def quantize_mxfp4(x, layout: str = "1x32", axis: int = 1, scale_rule: str = "floor") -> QuantResult:
    """MXFP4: blocks of 32 along ``axis``, UE8M0 scales, E2M1 RNE saturating elements."""
    x = _check_input(x)
    transposed, br, bc = _layout(layout, axis, 32)
    m = _stored(x, transposed)
    rs, cs = m.shape
    rpad = _ceil_div(rs, br) * br
    cpad = _ceil_div(cs, bc) * bc
    mp = _pad2d(m, rpad, cpad)

    a_b = _block_amax(mp, br, bc)
    e = mxfp4_scale_exponent(a_b, scale_rule)
    X = _pow2_f32(e)  # 2^-127 is a float32 subnormal, exact
    scale_codes = (e + 127).astype(np.uint8)
    X_full = _expand(X, br, bc)
    with np.errstate(over="ignore", under="ignore"):
        y = _f32(mp / X_full)  # exact division by a power of two (up to float32 rounding)
        scaled = _f32(np.clip(y, -E2M1_MAX, E2M1_MAX))
    codes = e2m1_rne_codes(scaled)
    with np.errstate(under="ignore"):
        deq = _f32(e2m1_value(codes) * X_full)

    codes = codes[:rs]
    scaled = scaled[:rs]
    deq = deq[:rs, :cs]
    return QuantResult(
        codes=codes, scales=scale_codes, scale_values=X, s_enc=ONE, s_dec=ONE,
        dequantized=_stored(deq, transposed), transposed=transposed, block=(br, bc),
        element_scale_nonzero=np.ones_like(codes, dtype=bool), stored_shape=(rs, cs),
        scaled=scaled,
    )


def ue8m0_value(codes) -> np.ndarray:
    c = np.asarray(codes).astype(np.int64)
    if np.any(c == 255):
        raise ValueError("UE8M0 0xFF is NaN")
    return _pow2_f32(c - 127)


# ---------------------------------------------------------------------------
# FP8 E4M3 (per-tensor, 1x128, 128x128)
# ---------------------------------------------------------------------------

def fp8_scales(amax) -> tuple:
    """(enc, dec) float32: enc = min(448 / amax, FLT_MAX), 1 when amax == 0; dec = 1/enc."""
    amax = _as_f32_array(amax)
    with np.errstate(divide="ignore", over="ignore"):
        enc = _f32(np.minimum(E4M3_MAX / np.where(amax > 0, amax, ONE).astype(np.float32), FLT_MAX))
    enc = np.where(amax > 0, enc, ONE).astype(np.float32)
    dec = _f32(ONE / enc)
    return enc, dec


def quantize_fp8_e4m3(x, layout: str = "tensor", axis: int = 1) -> QuantResult:
    """FP8 E4M3 with current scaling, per tensor or per 1x128 / 128x128 block.

    ``scales`` holds float32 decode scales (1/enc).  Codes are uint8, one per element,
    shape [R_s, Cpad] (Cpad = C for 'tensor').
    """
    x = _check_input(x)
    if layout == "tensor":
        transposed = False
        m = x
        rs, cs = m.shape
        br, bc = max(rs, 1), max(cs, 1)
        rpad, cpad = rs, cs
    else:
        transposed, br, bc = _layout(layout, axis, 128)
        m = _stored(x, transposed)
        rs, cs = m.shape
        rpad = _ceil_div(rs, br) * br
        cpad = _ceil_div(cs, bc) * bc
    mp = _pad2d(m, rpad, cpad)
    if layout == "tensor":
        amax = np.full((1, 1), np.max(np.abs(x)) if x.size else ZERO, dtype=np.float32)
    else:
        amax = _block_amax(mp, br, bc)
    enc, dec = fp8_scales(amax)
    enc_full = _expand(enc, br, bc)[:rpad, :cpad]
    dec_full = _expand(dec, br, bc)[:rpad, :cpad]
    with np.errstate(over="ignore", under="ignore"):
        scaled = _f32(mp * enc_full)
    codes = e4m3_satfinite(scaled)
    with np.errstate(under="ignore"):
        deq = _f32(e4m3_value(codes) * dec_full)
    codes = codes[:rs]
    deq = deq[:rs, :cs]
    if layout == "tensor":
        s_enc, s_dec = enc[0, 0], dec[0, 0]
    else:
        s_enc, s_dec = ONE, ONE
    return QuantResult(
        codes=codes, scales=dec, scale_values=dec, s_enc=s_enc, s_dec=s_dec,
        dequantized=_stored(deq, transposed), transposed=transposed, block=(br, bc),
        element_scale_nonzero=np.ones_like(codes, dtype=bool), stored_shape=(rs, cs),
        scaled=_f32(np.clip(scaled, -E4M3_MAX, E4M3_MAX))[:rs],
    )


# ---------------------------------------------------------------------------
# Random Hadamard transform (float64 reference, for tolerance checks)
# ---------------------------------------------------------------------------

TE_RHT_SIGNS16 = np.array([+1, +1, +1, -1, +1, -1, -1, -1, -1, -1, -1, +1, -1, +1, -1, -1],
                          dtype=np.float64)


def te_sign_mask(signs=TE_RHT_SIGNS16) -> int:
    """Bitmask with bit i set where s_i = -1 (spec: TE default 0xD7E8)."""
    return int(sum(1 << i for i, s in enumerate(signs) if s < 0))


def sylvester(d: int) -> np.ndarray:
    if d < 1 or d & (d - 1):
        raise ValueError("d must be a power of two")
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def rht_matrix(d: int = 16, signs=TE_RHT_SIGNS16) -> np.ndarray:
    """H = diag(s) * H_d / sqrt(d) (float64)."""
    s = np.asarray(signs, dtype=np.float64)
    return np.diag(s) @ sylvester(d) / np.sqrt(d)


def rht_reference_axis0(x, d: int = 16, signs=TE_RHT_SIGNS16) -> np.ndarray:
    """Blockwise RHT along axis 0 in float64: each column, split into blocks of d rows,
    is a row vector v^T multiplied on the right by H (i.e. y = H^T v: signs first, then
    the Hadamard).  Requires rows % d == 0."""
    x = np.asarray(x, dtype=np.float64)
    r, c = x.shape
    if r % d:
        raise ValueError("rows must be a multiple of the RHT size")
    H = rht_matrix(d, signs)
    xb = x.reshape(r // d, d, c)
    yb = np.einsum("bkc,kj->bjc", xb, H)
    return yb.reshape(r, c)


def rht_butterfly_error_bound_axis0(x, d: int = 16) -> np.ndarray:
    """Per-output bound on |float32 butterfly RHT - exact RHT| along axis 0.

    Each output of a log2(d)-stage butterfly is a signed sum of the d inputs (after the
    exact sign flips), every term passing through exactly k = log2(d) float32 additions.
    The standard bound for a sum evaluated as a tree of depth k gives
    |err| <= gamma_k * sum_i |x_i|, gamma_k = k*u / (1 - k*u), u = 2^-24.
    Scaling by 1/sqrt(d) = 1/4 is exact (barring underflow), so the error is divided by 4
    too: |err| <= gamma_4 * sum_i |x_i| / 4  (~ 4 * 2^-24 * sum|x_i| / 4).
    A tiny absolute term covers subnormal underflow in the final scaling.
    """
    x = np.abs(np.asarray(x, dtype=np.float64))
    r, c = x.shape
    k = int(np.log2(d))
    u = 2.0**-24
    gamma = k * u / (1 - k * u)
    s = x.reshape(r // d, d, c).sum(axis=1, keepdims=True)
    bound = gamma * s / np.sqrt(d) + (k + 1) * 2.0**-149
    return np.broadcast_to(bound, (r // d, d, c)).reshape(r, c)


# ---------------------------------------------------------------------------
# convenience: recipe presets understood by the cross-check
# ---------------------------------------------------------------------------

def quantize_recipe(x, fmt: str, layout: str, axis: int, scale_rule: str = "") -> QuantResult:
    if fmt == "nvfp4":
        return quantize_nvfp4(x, layout=layout, axis=axis, scale_rule=scale_rule or "te")
    if fmt == "mxfp4":
        return quantize_mxfp4(x, layout=layout, axis=axis, scale_rule=scale_rule or "floor")
    if fmt == "fp8-e4m3":
        return quantize_fp8_e4m3(x, layout=layout, axis=axis)
    raise ValueError(f"oracle has no quantizer for format {fmt!r}")


def h5_attr(v):
    """An HDF5 attribute as h5py returns it, as a plain Python value (str, int, float, bool)."""
    if isinstance(v, np.ndarray) and v.shape in ((), (1,)):
        v = v.reshape(()).item()
    if isinstance(v, np.generic):
        v = v.item()
    return v.decode() if isinstance(v, bytes) else v
