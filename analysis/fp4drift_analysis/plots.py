"""Plots of fp4drift outputs (PNG or PDF by the file suffix)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .traces import load_quantize  # noqa: E402


def plot_quantize(path: str, out: str) -> None:
    """SNR (= -10 log10 NMSE) per recipe, with the clipped and underflow fractions."""
    r = load_quantize(path)
    nmse = r.stat("nmse")
    snr = np.where(nmse > 0, -10.0 * np.log10(np.where(nmse > 0, nmse, 1.0)), np.nan)
    y = np.arange(len(r.names))
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 0.38 * len(y) + 1.8), sharey=True)
    ax0.barh(y, snr, color="tab:blue")
    ax0.set_yticks(y, r.names)
    ax0.invert_yaxis()
    ax0.set_xlabel("SNR = -10 log10(NMSE)  [dB]")
    ax0.grid(axis="x", alpha=0.3)
    for yi, v in zip(y, snr):
        ax0.text(v, yi, f" {v:.1f}", va="center", fontsize=8)
    h = 0.38
    ax1.barh(y - h / 2, 100 * r.stat("clipped_fraction"), height=h, label="clipped (|x e_b| > max)")
    ax1.barh(y + h / 2, 100 * r.stat("underflow_fraction"), height=h, label="underflow (x != 0 -> 0)")
    ax1.set_xlabel("fraction of elements  [%]")
    ax1.legend(loc="lower right", fontsize=8)
    ax1.grid(axis="x", alpha=0.3)
    source = r.attrs.get("source", "")
    fig.suptitle(f"fp4drift quantize: {source}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
