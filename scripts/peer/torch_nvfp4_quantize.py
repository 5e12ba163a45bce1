#!/usr/bin/env python3
"""Peer benchmark: the same NVFP4 1x16 RNE quantizer (amax included) written in
PyTorch and compiled with torch.compile, timed on the GPU with the byte count that
`fp4drift bench quantize-cuda` uses (input read once, 2 B/elem for BF16 or 4 for float32,
+ codes 0.5 + scales 1/16). --dtype bf16 (default) is the
case fp4drift's GPU benchmarks measure.

It follows nvfp4-spec.md section 2 (TE 2.14 order) but makes no claim of bit-identity with
fp4drift (torch's float8 cast and op fusion decide its roundings); with --compare-fp4drift
it reports the fraction of codes and scales that agree with fp4drift's CPU quantizer.

Usage: python3 scripts/peer/torch_nvfp4_quantize.py [--rows 8192] [--cols 8192] [--repeat 20] [--dtype bf16|f32]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

FLT_MAX = torch.finfo(torch.float32).max


def nvfp4_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r, c = x.shape
    x = x.float()  # BF16 -> float32 is exact
    amax = x.abs().amax()
    s_enc = torch.clamp(torch.tensor(2688.0, device=x.device) / amax, max=FLT_MAX)
    s_enc = torch.where((amax == 0) | (s_enc == 0), torch.ones_like(s_enc), s_enc)
    s_dec = 1.0 / s_enc
    xb = x.view(r, c // 16, 16)
    a_b = xb.abs().amax(-1)
    factor = s_enc * (1.0 / 6.0)
    scale = torch.clamp(a_b * factor, max=448.0).to(torch.float8_e4m3fn)
    e_b = torch.clamp(1.0 / (scale.float() * s_dec), max=FLT_MAX)
    y = torch.clamp(xb * e_b.unsqueeze(-1), -6.0, 6.0)
    a = y.abs()
    code = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    code = code | (torch.signbit(y).to(torch.uint8) << 3)
    code = code.view(r, c // 2, 2)
    packed = code[..., 0] | (code[..., 1] << 4)
    return packed, scale.view(torch.uint8)


def compare(exe: str, xs: torch.Tensor) -> tuple[float, float]:
    import os
    import subprocess
    import tempfile

    import h5py
    import numpy as np

    codes, scales = nvfp4_quantize(xs)
    with tempfile.TemporaryDirectory() as d:
        with h5py.File(os.path.join(d, "x.h5"), "w") as f:
            f["x"] = xs.float().cpu().numpy()
        subprocess.run([exe, "quantize", "--input", os.path.join(d, "x.h5") + ":/x", "--recipe", "nvfp4",
                        "--out", os.path.join(d, "q.h5"), "--json"], check=True, capture_output=True)
        with h5py.File(os.path.join(d, "q.h5")) as f:
            ref_codes = f["recipes/nvfp4/codes"][()]
            ref_scales = f["recipes/nvfp4/scales"][()]
    c = codes.cpu().numpy()
    s = scales.cpu().numpy()
    return float(np.mean(c == ref_codes)), float(np.mean(s == ref_scales))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=8192)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16", help="input element type")
    p.add_argument("--compare-fp4drift", metavar="EXE", help="fp4drift binary: report the fraction of equal codes")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("torch peer: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(7)
    x = torch.randn(a.rows, a.cols, device=dev, generator=g, dtype=torch.float32)
    if a.dtype == "bf16":
        x = x.to(torch.bfloat16)
    elem = x.element_size()
    fn = torch.compile(nvfp4_quantize)
    for _ in range(3):  # compile + warm-up
        fn(x)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(a.repeat):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        fn(x)
        t1.record()
        torch.cuda.synchronize()
        best = min(best, t0.elapsed_time(t1) / 1e3)
    n = a.rows * a.cols
    nbytes = n * elem + n * 0.5 + n / 16
    # Same-run roofline: device-to-device copy of the input, read + write.
    y = torch.empty_like(x)
    copy = float("inf")
    for _ in range(a.repeat):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        y.copy_(x)
        t1.record()
        torch.cuda.synchronize()
        copy = min(copy, t0.elapsed_time(t1) / 1e3)
    copy_gbps = 2 * n * elem / copy / 1e9
    res = {"peer": "torch.compile", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "rows": a.rows, "cols": a.cols, "dtype": a.dtype, "seconds": best, "effective_gbps": nbytes / best / 1e9,
           "copy_gbps": copy_gbps, "fraction_of_copy": nbytes / best / 1e9 / copy_gbps}
    if a.compare_fp4drift:
        res["codes_equal_fraction"], res["scales_equal_fraction"] = compare(a.compare_fp4drift, x[:1024, :1024].contiguous())
    if a.json:
        print(json.dumps(res))
    else:
        print(f"torch.compile NVFP4 1x16 RNE, {a.rows} x {a.cols} {a.dtype} on {res['device']} (torch {torch.__version__}):"
              f" {best * 1e3:.3f} ms, {res['effective_gbps']:.1f} GB/s effective,"
              f" {100 * res['fraction_of_copy']:.1f}% of copy ({copy_gbps:.1f} GB/s)")
        if a.compare_fp4drift:
            print(f"  against fp4drift's CPU quantizer on a 1024 x 1024 slice: codes equal "
                  f"{100 * res['codes_equal_fraction']:.4f}%, scales equal {100 * res['scales_equal_fraction']:.4f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
