"""Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11; Random123) in numpy.

Independent re-implementation for the Python oracle, vectorised over many counters.
32x32 -> 64-bit products are done in uint64 (exact: (2^32-1)^2 < 2^64).

One round, counter (c0, c1, c2, c3), key (k0, k1):
    p0 = M0 * c0 = (hi0, lo0),  p1 = M1 * c2 = (hi1, lo1)
    (c0, c1, c2, c3) <- (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
and the key is bumped after each round: k0 += W0, k1 += W1 (mod 2^32).
"""

from __future__ import annotations

import numpy as np

M0 = np.uint64(0xD2511F53)
M1 = np.uint64(0xCD9E8D57)
W0 = 0x9E3779B9
W1 = 0xBB67AE85
ROUNDS = 10
_MASK32 = np.uint64(0xFFFFFFFF)
_SH32 = np.uint64(32)


def _u32_as_u64(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind == "O":
        a = a.astype(np.uint64)
    if a.dtype.kind not in "ui":
        raise TypeError(f"philox: integer words expected, got {a.dtype}")
    if a.dtype.kind == "i" and np.any(a < 0):
        raise ValueError("philox: negative word")
    a = a.astype(np.uint64)
    if np.any(a > _MASK32):
        raise ValueError("philox: word does not fit in 32 bits")
    return a


def philox4x32(c0, c1, c2, c3, k0, k1, rounds: int = ROUNDS):
    """Philox4x32-R of the (broadcast) counters and keys -> tuple of 4 uint32 arrays."""
    c = np.broadcast_arrays(*(_u32_as_u64(v) for v in (c0, c1, c2, c3, k0, k1)))
    c0, c1, c2, c3, k0, k1 = (np.array(v, dtype=np.uint64) for v in c)
    for r in range(rounds):
        p0 = M0 * c0
        p1 = M1 * c2
        hi0, lo0 = p0 >> _SH32, p0 & _MASK32
        hi1, lo1 = p1 >> _SH32, p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        if r != rounds - 1:
            k0 = (k0 + np.uint64(W0)) & _MASK32
            k1 = (k1 + np.uint64(W1)) & _MASK32
    return tuple(v.astype(np.uint32) for v in (c0, c1, c2, c3))


def split64(v):
    """64-bit unsigned integer(s) -> (low 32 bits, high 32 bits) as uint64 arrays."""
    v = np.asarray(v, dtype=np.uint64) if not isinstance(v, int) else np.uint64(v)
    return v & _MASK32, v >> _SH32


def _u64(v) -> np.ndarray:
    if isinstance(v, (int, np.integer)):
        if not 0 <= int(v) < 2**64:
            raise ValueError("philox: 64-bit unsigned value expected")
        return np.uint64(int(v))
    return np.asarray(v, dtype=np.uint64)


def sr_primary_words(index, seed: int, stream: int) -> np.ndarray:
    """The primary 32-bit random word of element(s) `index` (docs/numerics.md, section 2):
    word (i % 4) of philox(counter=(j lo, j hi, stream lo, stream hi), key=(seed lo, seed hi)),
    j = i // 4."""
    i = _u64(index)
    j = i >> np.uint64(2)
    jl, jh = split64(j)
    sl, sh = split64(_u64(stream))
    kl, kh = split64(_u64(seed))
    w = np.stack(philox4x32(jl, jh, sl, sh, kl, kh), axis=0)  # [4, ...]
    sel = (i & np.uint64(3)).astype(np.intp)
    return np.take_along_axis(w, np.asarray(sel)[None, ...], axis=0)[0]


def sr_extension_words(index, seed: int, stream: int) -> np.ndarray:
    """Exact SR's 4 extension words of element(s) `index`: philox(counter=(i lo,
    i hi | 2^31, stream lo, stream hi), key=(seed lo, seed hi)), in order -> [..., 4]."""
    i = _u64(index)
    if np.any(i >= np.uint64(2**62)):
        raise ValueError("element index must be < 2^62")
    il, ih = split64(i)
    sl, sh = split64(_u64(stream))
    kl, kh = split64(_u64(seed))
    return np.stack(philox4x32(il, ih | np.uint64(0x80000000), sl, sh, kl, kh), axis=-1)


# hw SR's byte of element i within its word (docs/numerics.md "Random bits"): x0 <- [7:0],
# x1 <- [23:16], x2 <- [15:8], x3 <- [31:24] for the elements 4q .. 4q + 3 of a word.
HW_BYTE_SHIFT = (0, 16, 8, 24)


def sr_hw_bytes(index, seed: int, stream: int) -> np.ndarray:
    """hw SR's random byte of element(s) `index` (docs/numerics.md, "Random bits"): byte
    HW_BYTE_SHIFT[i % 4] of word ((i // 4) % 4) of philox(counter=(g lo, g hi | 2^30, stream lo,
    stream hi), key=(seed lo, seed hi)), g = i // 16."""
    i = _u64(index)
    if np.any(i >= np.uint64(2**62)):
        raise ValueError("element index must be < 2^62")
    gl, gh = split64(i >> np.uint64(4))
    sl, sh = split64(_u64(stream))
    kl, kh = split64(_u64(seed))
    w = np.stack(philox4x32(gl, gh | np.uint64(0x40000000), sl, sh, kl, kh), axis=0)  # [4, ...]
    sel = ((i >> np.uint64(2)) & np.uint64(3)).astype(np.intp)
    word = np.take_along_axis(w, np.asarray(sel)[None, ...], axis=0)[0].astype(np.uint64)
    shift = np.array(HW_BYTE_SHIFT, dtype=np.uint64)[(i & np.uint64(3)).astype(np.intp)]
    return (word >> shift) & np.uint64(0xFF)
