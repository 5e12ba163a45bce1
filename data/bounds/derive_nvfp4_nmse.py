"""Theory value of the NVFP4 (1x16, RNE, TE scale rule) NMSE on N(0,1) data, for the band of
the bound `nvfp4-rne-nmse-normal` in quantize.toml.

Model: the spec's quantizer (tests/python/oracle.py, written from the spec alone, not from the
C++) applied to i.i.d. N(0,1) samples from numpy's generator - a different random stream from
fp4drift's Philox normals, so the two estimates differ only by sampling noise. NMSE =
sum e^2 / sum x^2 over N = R x C elements; its standard error is estimated by the delta method
from the per-row sums (rows are independent): var(A/B) ~ (var(a) - 2 r cov(a, b) + r^2 var(b))
/ (R mean(b)^2) with a, b the row sums of e^2 and x^2 and r = A/B.

The tensor shape matters slightly (the global scale follows the tensor's amax, which moves the
E4M3 rounding of the block scales), so the model uses the experiment's shape, 1024 x 1024,
over TENSORS independent tensors, and reports their mean NMSE with its standard error.

  .venv/bin/python data/bounds/derive_nvfp4_nmse.py [ROWS] [COLS] [TENSORS]
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))
import oracle  # noqa: E402


def nmse_and_se(x: np.ndarray) -> tuple[float, float]:
    q = oracle.quantize_nvfp4(x, layout="1x16", axis=1)
    e2 = ((q.dequantized.astype(np.float64) - x) ** 2).sum(axis=1)
    x2 = (x.astype(np.float64) ** 2).sum(axis=1)
    r = e2.sum() / x2.sum()
    R = len(e2)
    var = (np.var(e2, ddof=1) - 2 * r * np.cov(e2, x2)[0, 1] + r * r * np.var(x2, ddof=1)) / (R * x2.mean() ** 2)
    return float(r), float(np.sqrt(var))


if __name__ == "__main__":
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    cols = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    tensors = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    rng = np.random.default_rng(20261203)
    est = [nmse_and_se(rng.standard_normal((rows, cols)).astype(np.float32)) for _ in range(tensors)]
    r = float(np.mean([e[0] for e in est]))
    se = float(np.sqrt(sum(e[1] ** 2 for e in est))) / tensors
    one = float(np.sqrt(np.mean([e[1] ** 2 for e in est])))
    print(f"NVFP4 1x16 RNE NMSE on N(0,1), {tensors} tensors of {rows}x{cols}: {r:.6f} +- {se:.6f} (s.e. of the mean); "
          f"one tensor's s.e. {one:.6f}; per tensor: " + " ".join(f"{e[0]:.6f}" for e in est))
