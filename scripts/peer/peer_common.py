"""What the peer quantizer benchmarks share: a seeded input on the GPU, best-of-N timing by CUDA
events, the same run's device-to-device copy as the roofline, the byte count of
`fp4drift bench quantize-cuda` (input read once, codes 0.5 B and scales 1/16 B per element),
and the fraction of codes and scales equal to fp4drift's CPU quantizer on a slice.

torch is imported by the callers (after argument parsing, so that --help works anywhere) and
passed in.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=8192)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16", help="input element type")
    p.add_argument("--compare-fp4drift", metavar="EXE", help="fp4drift binary: report the fraction of equal codes")
    return p


def seeded_input(torch, rows: int, cols: int, dtype: str):
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(7)
    x = torch.randn(rows, cols, device=dev, generator=g, dtype=torch.float32)
    return x.to(torch.bfloat16) if dtype == "bf16" else x


def best_seconds(torch, fn, repeat: int, warmup: int = 3) -> float:
    """The fastest of `repeat` timed calls after `warmup` untimed ones (compilation included)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        fn()
        t1.record()
        torch.cuda.synchronize()
        best = min(best, t0.elapsed_time(t1) / 1e3)
    return best


def copy_gbps(torch, x, repeat: int) -> float:
    """The same run's device-to-device copy of x, read + write, GB/s."""
    y = torch.empty_like(x)
    seconds = best_seconds(torch, lambda: y.copy_(x), repeat, warmup=1)
    return 2 * x.numel() * x.element_size() / seconds / 1e9


def counted_bytes(x) -> float:
    n = x.numel()
    return n * x.element_size() + n * 0.5 + n / 16


def compare_with_fp4drift(exe: str, x_np, codes_np, scales_np) -> tuple[float, float]:
    """Fractions of packed code bytes and E4M3 scale bytes equal to `fp4drift quantize --recipe
    nvfp4` of the same float32 values (x_np), in fp4drift's layout (element 2k in the low nibble)."""
    import h5py
    import numpy as np

    with tempfile.TemporaryDirectory() as d:
        with h5py.File(os.path.join(d, "x.h5"), "w") as f:
            f["x"] = x_np
        subprocess.run([exe, "quantize", "--input", os.path.join(d, "x.h5") + ":/x", "--recipe", "nvfp4",
                        "--out", os.path.join(d, "q.h5"), "--json"], check=True, capture_output=True)
        with h5py.File(os.path.join(d, "q.h5")) as f:
            ref_codes = f["recipes/nvfp4/codes"][()]
            ref_scales = f["recipes/nvfp4/scales"][()]
    return float(np.mean(codes_np == ref_codes)), float(np.mean(scales_np == ref_scales))


def report(res: dict, label: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps(res))
        return
    print(f"{label}, {res['rows']} x {res['cols']} {res['dtype']} on {res['device']} (torch {res['torch']}):"
          f" {res['seconds'] * 1e3:.3f} ms, {res['effective_gbps']:.1f} GB/s effective,"
          f" {100 * res['fraction_of_copy']:.1f}% of copy ({res['copy_gbps']:.1f} GB/s)")
    if "codes_equal_fraction" in res:
        print(f"  against fp4drift's CPU quantizer on a 1024 x 1024 slice: codes equal "
              f"{100 * res['codes_equal_fraction']:.4f}%, scales equal {100 * res['scales_equal_fraction']:.4f}%")


def result(torch, a, x, seconds: float, peer: str) -> dict:
    """The common fields of a peer's result line: its time against the bytes and the copy roofline."""
    cg = copy_gbps(torch, x, a.repeat)
    eff = counted_bytes(x) / seconds / 1e9
    return {"peer": peer, "torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": a.rows,
            "cols": a.cols, "dtype": a.dtype, "seconds": seconds, "effective_gbps": eff, "copy_gbps": cg,
            "fraction_of_copy": eff / cg}
