# %% [markdown]
# # 5. The recipe across architectures: transformer, Mamba-2, hybrid
#
# The NVFP4 recipe was validated on a hybrid Mamba-Transformer (mostly Mamba-2 mixers and FFNs, a
# few attention blocks). This notebook trains three language models of equal size on the same
# synthetic language - a pure transformer (4 x [attention, SwiGLU FFN]), a pure Mamba-2 stack (5
# mixers) and a hybrid in the paper's model's proportions (`MFMAMF`) - each with the paper's
# NVFP4 recipe (first and last blocks and the head in BF16) and with BF16, beside a double
# reference (`data/configs/lm-arch-*.toml`, shortened here to 150 steps: about a minute of CPU
# time for all three). It asks three questions at this small scale:
#
# * does NVFP4 train each architecture as well as BF16 does;
# * which linear kind - attention's projections, the FFN's, the Mamba mixer's in- and
#   out-projections - carries the most quantization error;
# * how far each recipe's weights move from the reference's.
#
# The full experiment (1000 steps, FP8, every ablation, three seeds, the H200) is
# `data/sweeps/lm-architectures.toml`; its results and their reading are in docs/findings.md.

# %%
import matplotlib.pyplot as plt
import numpy as np

import nbsupport as nbs

STEPS = 150
ARCHS = ("transformer", "mamba", "hybrid")


def run(arch):
    c = nbs.config(f"lm-arch-{arch}.toml")
    return nbs.load_run(str(nbs.fp4drift(f"arch-{arch}", ["run", c, "--steps", str(STEPS)], inputs=(c,))))


runs = {a: run(a) for a in ARCHS}
for a, r in runs.items():
    print(f"{a:12} pattern {r.model['pattern']:10} {r.model['parameters']:7d} parameters, linear kinds: {', '.join(r.kinds)}")

# %% [markdown]
# ## Training: NVFP4 against BF16 and the reference
#
# The loss is the per-step training loss on fresh batches (a held-out loss); the dashed line is
# the double reference, the dotted ones the source's exact loss floor and the unigram loss (what
# a model without context reaches). The table compares the mean of the last 15 steps.

# %%
def tail(x, n=15):
    return float(np.mean(x[-n:]))


fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), sharey=True)
rows = []
for ax, (a, r) in zip(axes, runs.items()):
    ax.plot(r.step, r.reference_loss, "k--", lw=1, label=f"reference ({r.reference_precision})")
    for i, rr in enumerate(r.runs):
        ax.plot(r.step, rr.loss, color=f"C{i}", lw=0.8, label=rr.name)
    ax.axhline(float(r.options["loss_floor_nats"]), color="gray", ls=":", lw=1)
    ax.axhline(float(r.options["unigram_loss_nats"]), color="gray", ls=":", lw=1)
    ax.set_title(f"{a} ({r.model['pattern']})")
    ax.set_xlabel("step")
    rows.append([a, tail(r.reference_loss)] + [tail(r.run(n).loss) / tail(r.reference_loss) - 1 for n in ("nvfp4", "bf16")])
axes[0].set_ylabel("loss (nats)")
axes[0].legend()
nbs.caption(fig, "Training loss of the three architectures: NVFP4 (paper recipe) and BF16 beside the double reference.")
plt.show()
nbs.table(rows, ["model", "reference tail", "nvfp4 gap", "bf16 gap"])

# %% [markdown]
# ## Which linear kind carries the most quantization error
#
# Every GEMM operand of every linear is quantized and its NMSE recorded (`operand_nmse`, slot =
# linear x 6 + role x 2 + operand). Averaged over the steps and the six operands, per linear kind,
# leaving out the linears kept in BF16 (the first and last blocks and the head). Notebook 1
# derives NVFP4's NMSE for Gaussian data (about 0.01); what differs between kinds is the shape of
# their operands' distributions (outlier channels, the gate's products, the scan's outputs).

# %%
def nmse_by_kind(r, recipe="nvfp4"):
    rr = r.run(recipe)
    hp = set(r.high_precision_blocks)
    per_linear = rr.operand_nmse.reshape(len(rr.operand_nmse), -1, 6).mean(axis=(0, 2))
    out = {}
    for name, kind, v in zip(r.linear_names, r.linear_kinds, per_linear):
        if name == "head" or int(name.split(".")[1]) in {int(b) for b in hp}:
            continue
        out.setdefault(kind, []).append(float(v))
    return {k: float(np.mean(v)) for k, v in out.items()}


kinds = {a: nmse_by_kind(r) for a, r in runs.items()}
all_kinds = [k for k in ("qkv", "o", "gateup", "down", "mamba_in", "mamba_out") if any(k in d for d in kinds.values())]
fig, ax = plt.subplots(figsize=(8, 3.5))
w = 0.25
for i, a in enumerate(ARCHS):
    ax.bar(np.arange(len(all_kinds)) + (i - 1) * w, [kinds[a].get(k, np.nan) for k in all_kinds], w, label=a)
ax.set_xticks(np.arange(len(all_kinds)), all_kinds)
ax.set_ylabel("mean operand NMSE (nvfp4)")
ax.legend()
nbs.caption(fig, "NVFP4 operand NMSE per linear kind, the BF16 blocks left out.")
plt.show()
nbs.table([[a] + [kinds[a].get(k, np.nan) for k in all_kinds] for a in ARCHS], ["model", *all_kinds])

# %% [markdown]
# ## How far the weights move from the reference
#
# The relative distance of all parameters from the reference's, at every compare. A 4-bit
# recipe's trajectory leaves the reference's far more than BF16's does while its loss stays
# close: a different trajectory, not a worse one - which is why the architecture comparison
# ranks recipes by loss.

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
for i, (a, r) in enumerate(runs.items()):
    for n, ls in (("nvfp4", "-"), ("bf16", "--")):
        ax.semilogy(r.compare_step, r.run(n).weight_rel_error_total, color=f"C{i}", ls=ls, label=f"{a} {n}")
ax.set_xlabel("step")
ax.set_ylabel("weight relative error")
ax.legend(fontsize=7, ncol=2)
nbs.caption(fig, "Relative weight error against the double reference (solid: nvfp4, dashed: bf16).")
plt.show()

# %% [markdown]
# ## What we see
#
# 1. The three models are the same size: their parameter counts are within 3.5% of each other.
# 2. All three learn the language: the reference's final loss is below three quarters of the
#    unigram loss, and above the source's floor.
# 3. NVFP4 trains each architecture about as well as BF16: its final loss is within 2% of the
#    reference's, as BF16's is.
# 4. No linear kind stands out: in every model each kind's NVFP4 operand NMSE is within 25% of the
#    model's mean over kinds, and all lie between 0.005 and 0.03 (the Gaussian level is ~0.01).
# 5. NVFP4's weights end farther from the reference's than BF16's, in every architecture.

# %%
counts = [r.model["parameters"] for r in runs.values()]
assert max(counts) / min(counts) < 1.035, counts
for a, r in runs.items():
    ref = tail(r.reference_loss)
    assert float(r.options["loss_floor_nats"]) < ref < 0.75 * float(r.options["unigram_loss_nats"]), (a, ref)
    for n in ("nvfp4", "bf16"):
        gap = tail(r.run(n).loss) / ref - 1
        assert abs(gap) < 0.02, (a, n, gap)
    m = np.mean(list(kinds[a].values()))
    for k, v in kinds[a].items():
        assert abs(v / m - 1) < 0.25 and 0.005 < v < 0.03, (a, k, v, m)
    assert r.run("nvfp4").weight_rel_error_total[-1] > r.run("bf16").weight_rel_error_total[-1], a
print("All claims hold.")
