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

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402


def nvfp4_quantize(torch, x):
    FLT_MAX = torch.finfo(torch.float32).max
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


def main() -> int:
    a = peer_common.parser(__doc__).parse_args()
    import torch

    if not torch.cuda.is_available():
        print("torch peer: no CUDA device", file=sys.stderr)
        return 2
    x = peer_common.seeded_input(torch, a.rows, a.cols, a.dtype)
    fn = torch.compile(lambda t: nvfp4_quantize(torch, t))
    seconds = peer_common.best_seconds(torch, lambda: fn(x), a.repeat)
    res = peer_common.result(torch, a, x, seconds, "torch.compile")
    if a.compare_fp4drift:
        xs = x[:1024, :1024].contiguous()
        codes, scales = nvfp4_quantize(torch, xs)
        res["codes_equal_fraction"], res["scales_equal_fraction"] = peer_common.compare_with_fp4drift(
            a.compare_fp4drift, xs.float().cpu().numpy(), codes.cpu().numpy(), scales.cpu().numpy())
    peer_common.report(res, "torch.compile NVFP4 1x16 RNE", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
