"""The peer benchmarks (scripts/peer) run only on the GPU machine, where a mistake costs device
time; what can be checked without a GPU is checked here: every script parses its options
before it imports torch (--help works on a machine without torch), and the comparison with
fp4drift's quantizer reads fp4drift's trace in the layout the peers produce (codes packed
two per byte, element 2k in the low nibble; E4M3 scale bytes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PEER = ROOT / "scripts" / "peer"
EXE = os.environ.get("FP4DRIFT_EXE", "")
sys.path.insert(0, str(PEER))
import peer_common  # noqa: E402

SCRIPTS = sorted(PEER.glob("*_quantize.py"))


def test_there_are_peers():
    assert {p.name for p in SCRIPTS} >= {"torch_nvfp4_quantize.py", "torchao_nvfp4_quantize.py"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_needs_no_torch(script):
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr
    assert "--compare-fp4drift" in r.stdout and "--dtype" in r.stdout


def reference_e2m1_codes(y: np.ndarray) -> np.ndarray:
    """E2M1 RNE codes of values already scaled into [-6, 6] (the grid 0, 0.5, 1, 1.5, 2, 3, 4, 6)."""
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    mag = np.abs(y)
    idx = np.argmin(np.abs(mag[..., None] - grid), axis=-1)
    return (idx | (np.signbit(y) << 3)).astype(np.uint8)


@pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary")
def test_compare_with_fp4drift_reads_its_layout():
    # Values that are exactly E2M1 grid points times a power of two with block amax 6 * 2^k:
    # every block scale is exact, so the codes are the grid indices, packed as the peers pack.
    rng = np.random.default_rng(3)
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
    rows, cols = 32, 64
    vals = grid[rng.integers(0, 8, size=(rows, cols))] * np.where(rng.random((rows, cols)) < 0.5, -1, 1)
    vals[:, ::16] = 6.0  # every block's amax is 6
    x = vals.astype(np.float32)
    codes = reference_e2m1_codes(x)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    # The block scale then encodes 6 * s_enc / 6 = s_enc = 2688 / 6 = 448: E4M3 0x7e.
    scales = np.full((rows, cols // 16), 0x7E, dtype=np.uint8)
    assert peer_common.compare_with_fp4drift(EXE, x, packed, scales) == (1.0, 1.0)
    swapped = (codes[:, 1::2] | (codes[:, 0::2] << 4)).astype(np.uint8)  # the other nibble order
    codes_eq, scales_eq = peer_common.compare_with_fp4drift(EXE, x, swapped, scales ^ 1)
    assert codes_eq < 0.9 and scales_eq == 0.0
