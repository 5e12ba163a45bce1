#!/usr/bin/env python3
"""Peer benchmark: torchao's NVFP4 quantizer (torchao.prototype.mx_formats.nvfp4_tensor:
nvfp4_quantize with a per-tensor scale from the tensor's amax, the two-level NVFP4 scaling of
its NVFP4Tensor.to_nvfp4), amax included, eager and under torch.compile, timed on the GPU with
the byte count that `fp4drift bench quantize-cuda` uses (input read once, 2 B/elem for BF16 or
4 for float32, + codes 0.5 + scales 1/16).

torchao's Triton kernel needs the separate MSLK package and swizzled scales, so the PyTorch
path is the one measured. Its roundings differ from the spec's TE order (the block scale is
amax_b / 6 divided by amax / 2688, elements are multiplied by (1 / s) / scale), so it is not
bit-identical to fp4drift; with --compare-fp4drift it reports the fraction of codes and scales
that agree with fp4drift's CPU quantizer.

The GPU image has no package registry: scripts/vendor-peers downloads the wheel into
third_party/wheels (carried with the tree), and scripts/gpu-check unpacks it onto PYTHONPATH.

Usage: python3 scripts/peer/torchao_nvfp4_quantize.py [--rows 8192] [--cols 8192] [--repeat 20] [--dtype bf16|f32]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402


def main() -> int:
    a = peer_common.parser(__doc__).parse_args()
    import torch

    if not torch.cuda.is_available():
        print("torchao peer: no CUDA device", file=sys.stderr)
        return 2
    try:
        import torchao
        from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    except ImportError as e:
        print(f"torchao peer: torchao's NVFP4 quantizer does not import ({e})", file=sys.stderr)
        return 2

    def quantize(x):
        scales, codes = nvfp4_quantize(x, 16, per_tensor_amax_to_scale(torch.amax(torch.abs(x))))
        return codes, scales.view(torch.uint8)

    x = peer_common.seeded_input(torch, a.rows, a.cols, a.dtype)
    lines = []
    for label, fn in (("eager", quantize), ("torch.compile", torch.compile(quantize))):
        seconds = peer_common.best_seconds(torch, lambda: fn(x), a.repeat)
        res = peer_common.result(torch, a, x, seconds, f"torchao {label}")
        res["torchao"] = torchao.__version__
        lines.append((label, res))
    if a.compare_fp4drift:
        xs = x[:1024, :1024].contiguous()
        codes, scales = quantize(xs)
        eq = peer_common.compare_with_fp4drift(a.compare_fp4drift, xs.float().cpu().numpy(), codes.cpu().numpy(),
                                               scales.cpu().numpy())
        for _, res in lines:
            res["codes_equal_fraction"], res["scales_equal_fraction"] = eq
    for label, res in lines:
        peer_common.report(res, f"torchao {torchao.__version__} NVFP4 1x16 ({label})", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
