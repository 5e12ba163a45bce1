"""Plots of fp4drift outputs (PNG or PDF by the file suffix). Every axis says its quantity and
unit; every figure's title names the trace(s) it shows."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from .stats import (GROWTH_WINDOW_FACTOR, aggregate_rel_error, fit_growth, local_exponents,  # noqa: E402
                    window_mean_gap)
from .traces import (OPERAND_ROLES, LmRun, MlpRun, SchemaError, SumDotRun, load_gemm,  # noqa: E402
                     load_quantize, load_run)

SUFFIXES = (".png", ".pdf")


def _save(fig, out: str) -> None:
    """PNG (130 dpi) or PDF (vector) by the suffix; anything else is refused before drawing."""
    _check_out(out)
    fig.savefig(out, dpi=130)
    plt.close(fig)


def _check_out(out: str) -> None:
    if Path(out).suffix.lower() not in SUFFIXES:
        raise ValueError(f"{out}: output must end in .png or .pdf")


def _kind(r) -> str:
    return "lm" if isinstance(r, LmRun) else "mlp" if isinstance(r, MlpRun) else r.options.get("operation", "sum/dot")


def _load(trace, allow_incomplete: bool):
    """A trace path loaded (a run still being written only with allow_incomplete), or a run
    already loaded passed through."""
    return trace if isinstance(trace, (MlpRun, LmRun, SumDotRun)) else load_run(trace, allow_incomplete)


def _mlp(path, allow_incomplete: bool = False) -> MlpRun:
    r = _load(path, allow_incomplete)
    if not isinstance(r, MlpRun):
        raise SchemaError(f"{r.path}: a {_kind(r)} trace, this plot needs an mlp trace")
    return r


def _lm(path, allow_incomplete: bool = False) -> LmRun:
    r = _load(path, allow_incomplete)
    if not isinstance(r, LmRun):
        raise SchemaError(f"{r.path}: a {_kind(r)} trace, this plot needs an lm trace")
    return r


def _training(path, allow_incomplete: bool = False) -> MlpRun | LmRun:
    """An mlp or lm trace: the plots of training runs against a reference read both."""
    r = _load(path, allow_incomplete)
    if not isinstance(r, (MlpRun, LmRun)):
        raise SchemaError(f"{r.path}: a {_kind(r)} trace, this plot needs an mlp or lm trace")
    return r


def _note(r) -> str:
    """What a title adds for a run read before it completed: " - incomplete (running, up to step N)"."""
    return f" - {r.incomplete}" if r.incomplete else ""


def _rows(r: MlpRun | LmRun) -> tuple[str, list[str]]:
    """What the per-layer columns of weight_rel_error (and the probes) are: mlp layers, or the
    lm trace's parameters."""
    if isinstance(r, LmRun):
        return "parameter", r.param_names
    return "layer", [str(i) for i in range(r.layers)]


def _linears(r: MlpRun | LmRun) -> int:
    return len(r.linear_names) if isinstance(r, LmRun) else r.layers


def _ref_sq_norm(t: MlpRun | LmRun) -> np.ndarray | None:
    """The reference's final ||W_l||_F^2 per layer (lm: per parameter), written when the run
    completed; None for a trace without it (older, or still running)."""
    if t.incomplete:
        return None
    import h5py
    group = "lm/reference" if isinstance(t, LmRun) else "mlp/reference"
    try:
        with h5py.File(t.path, "r") as f:
            if group in f and "final_weight_sq_norm" in f[group].attrs:
                return np.asarray(f[group].attrs["final_weight_sq_norm"], dtype=float)
    except OSError:
        return None
    return None


def headline_weight_error(t: MlpRun | LmRun, run) -> tuple[np.ndarray, str]:
    """A run's headline weight error at each compare, and what it is: the layers its recipe
    quantizes (an lm: the weights of the linears it quantizes) as one Frobenius ratio, weighted
    by the reference's final norms, as fp4drift's summary computes quantized_weight_rel_error
    (exact at the last compare). A trace without those attributes (written before them, or still
    running) gives the mlp's last layer or the lm's whole model instead, and the label says so."""
    key = "quantized_params" if isinstance(t, LmRun) else "quantized_layers"
    norms = _ref_sq_norm(t)
    if key not in run.attrs or norms is None:
        if isinstance(t, LmRun):
            return run.weight_rel_error_total, "whole model (trace without quantized_params)"
        return run.weight_rel_error[:, -1], "last layer (trace without quantized_layers)"
    q = np.atleast_1d(np.asarray(run.attrs[key])).astype(int)
    if q.size == 0:
        return np.full(len(t.compare_step), np.nan), "no quantized layers"
    what = "quantized linears' weights" if isinstance(t, LmRun) else f"quantized layers {','.join(map(str, q))}"
    return aggregate_rel_error(run.weight_rel_error[:, q], norms[q]), what


def _weight_error(t: MlpRun | LmRun, run, layer: int | None = None, param: str | None = None) -> tuple[np.ndarray, str]:
    """The weight error plotted for a run, and what it is: the headline (headline_weight_error)
    unless an mlp `layer` or an lm `param` (a parameter name, or `all` for the whole model) is
    named. Traces of the two workloads are not overlaid: their weight errors are different
    quantities."""
    if isinstance(t, LmRun):
        if layer is not None:
            raise ValueError(f"{t.path}: an lm trace has parameters, not layers: name one with --param "
                             f"({', '.join(t.param_names)})")
        if param is None:
            return headline_weight_error(t, run)
        if param == "all":
            return run.weight_rel_error_total, "whole model"
        if param not in t.param_names:
            raise ValueError(f"{t.path}: no parameter {param!r} (parameters: {', '.join(t.param_names)})")
        return run.weight_rel_error[:, t.param_names.index(param)], param
    if param is not None:
        raise ValueError(f"{t.path}: --param names an lm parameter; an mlp trace's layers are chosen with --layer")
    if layer is None:
        return headline_weight_error(t, run)
    return run.weight_rel_error[:, layer], "last layer" if layer == -1 else f"layer {layer}"


def _trace_label(r, many: bool) -> str:
    return Path(str(r.attrs.get("config_source", r.path))).stem if many else ""


def running_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to `window` records (the per-step batch loss is noisy)."""
    x = np.asarray(x, dtype=float)
    c = np.cumsum(np.insert(x, 0, 0.0))
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(i - window, 0)
    return (c[i] - c[lo]) / (i - lo)


def _growth_line(ax, steps, err, color, label, method="ols"):
    """err vs step on log-log axes with the power law fitted over the last window (the last
    factor of GROWTH_WINDOW_FACTOR in steps) dashed over that window; the fit, with its window,
    in the legend. One power law through the whole curve would average exponents that change
    along it (local_exponents)."""
    ok = (err > 0) & (steps > 0) & np.isfinite(err)
    fit = None
    if ok.any():
        hi = float(steps[-1])
        try:
            fit = fit_growth(steps, err, method=method, window=(hi / GROWTH_WINDOW_FACTOR, hi))
        except ValueError:
            fit = None
    text = f"{label}: {fit.label()}" if fit else f"{label}: no fit (< 3 positive points in the last window)"
    ax.loglog(steps[ok], err[ok], color=color, lw=1, label=text)
    if fit is not None:
        s = np.array([fit.first_step, fit.last_step])
        ax.loglog(s, fit.prefactor * s ** fit.exponent, color=color, ls="--", lw=1.2)
    return fit


def _local_exponent_points(ax, steps, err, color, label) -> None:
    """The local exponents (slopes over windows of a factor GROWTH_WINDOW_FACTOR) as points at
    each window's geometric centre, the window as a horizontal bar, the 95% t interval vertical."""
    ws = local_exponents(steps, err)
    if not ws:
        return
    lo = np.array([w.first_step for w in ws], dtype=float)
    hi = np.array([w.last_step for w in ws], dtype=float)
    x = np.sqrt(lo * hi)
    y = np.array([w.exponent for w in ws])
    ax.errorbar(x, y, xerr=[x - lo, hi - x], yerr=[y - [w.ci_low for w in ws], [w.ci_high for w in ws] - y],
                color=color, fmt="o", ms=3, lw=0.8, capsize=2, label=label)
    ax.set_xscale("log")


def _gap_lines(ax, r, run, color, smooth: int) -> None:
    """A run's per-step relative loss gap (faint), a trailing mean of `smooth` steps to read the
    curve by, and the run's loss gap - the mean over the trailing window, as fp4drift's summary
    defines it - as a horizontal segment over that window, its value in the legend."""
    gw = window_mean_gap(r.step, run.rel_loss_gap)
    ax.plot(r.step, 100 * run.rel_loss_gap, color=color, lw=0.4, alpha=0.3)
    ax.plot(r.step, 100 * running_mean(run.rel_loss_gap, smooth), color=color, lw=0.9)
    ax.hlines(100 * gw.mean, gw.first_step, gw.last_step, color=color, lw=2.5,
              label=f"{run.name}: {gw.label()} = {100 * gw.mean:+.3g}%")


def plot_quantize(path: str, out: str) -> None:
    """SNR (= -10 log10 NMSE) per recipe, with the clipped and underflow fractions."""
    _check_out(out)
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
    _save(fig, out)


def plot_mlp(path, out: str, smooth: int = 20, allow_incomplete: bool = False) -> None:
    """Training trajectories of an mlp trace: losses (reference dashed), relative loss gap, and
    the last layer's weight error against the reference on log-log axes with the fitted growth
    exponent and its 95% CI, and the mean NMSE of the quantized GEMM operands."""
    _check_out(out)
    r = _mlp(path, allow_incomplete)
    path = r.path
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (a0, a1), (a2, a3) = axes
    a0.semilogy(r.step, r.reference_loss, "k--", lw=1, label=f"reference ({r.reference_precision})")
    for i, run in enumerate(r.runs):
        c = f"C{i}"
        a0.semilogy(r.step, run.loss, color=c, lw=0.8, label=run.name)
        _gap_lines(a1, r, run, c, smooth)
        err, which = headline_weight_error(r, run)
        _growth_line(a2, r.compare_step.astype(float), err, c, f"{run.name} ({which})")
        nmse = np.where(run.operand_nmse > 0, run.operand_nmse, np.nan)
        with np.errstate(all="ignore"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN rows: nothing quantized
                a3.semilogy(r.step, np.nanmean(nmse, axis=1), color=c, lw=0.8, label=run.name)
    a0.set(xlabel="step", ylabel=_loss_label(r), title="loss")
    a1.set(xlabel="step", ylabel="(loss - loss_ref) / loss_ref  [%]",
           title=f"relative loss gap (thin: mean of {smooth} steps; bar: window mean)")
    a1.axhline(0, color="k", lw=0.5)
    a2.set(xlabel="step", ylabel="||W - W_ref||_F / ||W_ref||_F",
           title="quantized layers' weight error (last-window fit dashed)")
    a3.set(xlabel="step", ylabel="mean NMSE over quantized GEMM operands", title="operand quantization error")
    for a in axes.flat:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"fp4drift run (mlp): {r.attrs.get('config_source', path)}{_note(r)}", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def _quantized_steps(r: LmRun) -> np.ndarray:
    """Steps trained in the recipes' own formats: before the BF16 switch (after it every recipe's
    operands are BF16, whose NMSE would dilute the recipe's); all steps if none precede it."""
    s = r.switch_to_bf16_step
    keep = r.step < s if s is not None else np.ones(len(r.step), dtype=bool)
    return keep if keep.any() else np.ones(len(r.step), dtype=bool)


def lm_kind_nmse(r: LmRun, recipe: str, stat: str = "nmse") -> dict[str, np.ndarray]:
    """Per linear kind, the mean of an operand statistic over the steps before the BF16 switch
    and over the layers of that kind: a [3, 2] array (role fprop/dgrad/wgrad x operand)."""
    keep = _quantized_steps(r)
    return {k: v[keep].mean(axis=0) for k, v in r.operand_by_kind(recipe, stat).items()}


def plot_lm(path, out: str, smooth: int = 20, allow_incomplete: bool = False) -> None:
    """An lm trace in four panels: the losses (raw per-batch values faint, trailing means of
    `smooth` records solid; the source's loss floor and the unigram loss as horizontal lines),
    the relative loss gap, the whole model's weight error against the reference on log-log axes
    with its fitted growth exponent, and the operand NMSE per linear kind (bars: mean over the
    six operands; markers: the three GEMM roles). A BF16 switch is a vertical line."""
    _check_out(out)
    r = _lm(path, allow_incomplete)
    path = r.path
    switch = r.switch_to_bf16_step
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    (a0, a1), (a2, a3) = axes
    a0.plot(r.step, r.reference_loss, color="k", lw=0.4, alpha=0.3)
    # the reference on top: the recipes' means would otherwise hide it where they agree with it
    a0.plot(r.step, running_mean(r.reference_loss, smooth), color="k", lw=1.2, ls="--", label=f"reference ({r.reference_precision})",
            zorder=5)
    for i, run in enumerate(r.runs):
        c = f"C{i}"
        a0.plot(r.step, run.loss, color=c, lw=0.4, alpha=0.3)
        a0.plot(r.step, running_mean(run.loss, smooth), color=c, lw=1.1, label=run.name)
        _gap_lines(a1, r, run, c, smooth)
        err, which = headline_weight_error(r, run)
        _growth_line(a2, r.compare_step.astype(float), err, c, f"{run.name} ({which})")
    if np.isfinite(r.loss_floor_nats):
        a0.axhline(r.loss_floor_nats, color="tab:green", lw=0.9, ls=":",
                   label=f"loss floor of the source {r.loss_floor_nats:.3f}")
    if np.isfinite(r.unigram_loss_nats):
        a0.axhline(r.unigram_loss_nats, color="tab:gray", lw=0.9, ls="-.",
                   label=f"unigram loss {r.unigram_loss_nats:.3f}")
    a0.set(xlabel="step", ylabel="next-token cross-entropy [nats]",
           title=f"loss (faint: per batch; solid: mean of {smooth} steps)")
    a1.axhline(0, color="k", lw=0.5)
    a1.set(xlabel="step", ylabel="(loss - loss_ref) / loss_ref  [%]",
           title=f"relative loss gap (thin: mean of {smooth} steps; bar: window mean)")
    a2.set(xlabel="step", ylabel="||p - p_ref|| / ||p_ref||",
           title="quantized linears' weight error (last-window fit dashed)")
    if switch is not None:
        for a in (a0, a1, a2):
            if a is not a2 or switch > 0:   # step 0 has no place on a log axis
                a.axvline(switch, color="tab:purple", lw=0.9, ls="--",
                          label=f"switch to BF16 at step {switch}" if a is a0 else None)
    _kind_bars(a3, r)
    for a in axes.flat:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    m = r.model
    fig.suptitle(f"fp4drift run (lm): {r.attrs.get('config_source', path)} - pattern {m.get('pattern', '?')}, "
                 f"d_model {m.get('d_model', '?')}, vocab {m.get('vocab', '?')}, {m.get('parameters', '?')} parameters, "
                 f"{len(r.step)} steps, data {r.data}{_note(r)}", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def _kind_bars(ax, r: LmRun) -> None:
    kinds = r.kinds
    runs = [run for run in r.runs if (run.operand_nmse > 0).any()]   # fp32 quantizes nothing
    x = np.arange(len(kinds))
    width = 0.8 / max(1, len(runs))
    markers = ("o", "^", "s")
    for j, run in enumerate(runs):
        c = f"C{r.runs.index(run)}"
        means = lm_kind_nmse(r, run.name)
        xs = x - 0.4 + width * (j + 0.5)
        bars = np.array([means[k].mean() for k in kinds])
        ax.bar(xs, np.where(bars > 0, bars, np.nan), width=width, color=c, alpha=0.6, label=run.name)
        for role in range(3):
            v = np.array([means[k][role].mean() for k in kinds])
            ax.scatter(xs, np.where(v > 0, v, np.nan), color=c, edgecolor="k", lw=0.4, s=18, marker=markers[role],
                       zorder=3, label=OPERAND_ROLES[role] if j == 0 else None)
    skipped = [run.name for run in r.runs if run not in runs]
    ax.set_yscale("log")
    ax.set_xticks(x, kinds)
    steps = "steps before the BF16 switch" if r.switch_to_bf16_step is not None else "all steps"
    ax.set(xlabel="linear kind" + (f"  (not quantized: {', '.join(skipped)})" if skipped else ""),
           ylabel=f"operand NMSE, mean over layers and {steps}",
           title="operand quantization error per linear kind")


def _loss_label(r: MlpRun) -> str:
    task = r.config.get("mlp", {}).get("task", "regression")
    return "loss: cross-entropy [nats]" if task == "classification" else "loss: 0.5 mean squared error"


def plot_runs(paths: list[str], out: str, allow_incomplete: bool = False) -> None:
    """Relative error |s_n - exact| / |exact| against n on log-log axes, one line per trace:
    run 0 for RNE/RZ; for SR the RMS over the runs (solid), |mean| (dotted) and the bound
    sqrt(sum step^2 / 4) (dashed), all relative to |exact|. One mlp or lm trace is drawn by
    plot_mlp / plot_lm; with allow_incomplete also while its run is going (or after it stopped),
    the title saying up to which step."""
    def positive(v: np.ndarray) -> np.ndarray:  # exact points (error 0) have no place on a log axis
        return np.where(v > 0, v, np.nan)

    _check_out(out)
    if len(paths) == 1:
        first = load_run(paths[0], allow_incomplete)
        if isinstance(first, MlpRun):
            plot_mlp(first, out)
            return
        if isinstance(first, LmRun):
            plot_lm(first, out)
            return
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, path in enumerate(paths):
        r = load_run(path, allow_incomplete)
        if isinstance(r, (MlpRun, LmRun)):
            raise SchemaError(f"{path}: an {_kind(r)} trace; plot one at a time, or overlay {_kind(r)} traces "
                              "with `compare`")
        color = f"C{i}"
        scale = np.where(r.exact != 0, np.abs(r.exact), 1.0)
        if r.options.get("rounding") == "sr" and r.error.shape[1] > 1:
            ax.loglog(r.n, positive(r.rms_error / scale), color=color, label=f"{r.label}: RMS over {r.error.shape[1]} runs")
            ax.loglog(r.n, positive(np.abs(r.mean_error) / scale), color=color, ls=":", label="  |mean error|")
            ax.loglog(r.n, positive(np.sqrt(r.sr_half_step_sq) / scale), color=color, ls="--", lw=0.8,
                      label="  sqrt(sum step^2/4)")
        else:
            ax.loglog(r.n, positive(np.abs(r.error[:, 0]) / scale), color=color, label=r.label)
    ax.set_xlabel("n (terms)")
    ax.set_ylabel("relative error |s_n - exact| / |exact|")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("fp4drift run: recursive sums", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def _names(paths: list[str], labels: dict[str, str] | None) -> str:
    """The inputs of a figure for its title: trace file names, a sweep's runs by its directory."""
    names = [f"sweep {Path(p).parents[2].name}" if labels and p in labels else Path(p).name for p in paths]
    return ", ".join(dict.fromkeys(names))


def _run_pairs(paths: list[str], recipes: list[str] | None, labels: dict[str, str] | None = None,
               allow_incomplete: bool = False):
    """(label, trace, run) for every recipe (or the named ones) of every mlp trace, or of every
    lm trace: the two are not mixed (their loss and weight error are different quantities).
    `labels` names traces by path (a sweep's runs by their overrides: sweep.expand_traces); the
    label of a run read before it completed (allow_incomplete) says how far it got."""
    traces = [_training(p, allow_incomplete) for p in paths]
    kinds = {_kind(t) for t in traces}
    if len(kinds) > 1:
        raise SchemaError(f"a mix of mlp and lm traces ({', '.join(paths)}): their losses and weight errors "
                          "(an mlp's last layer, an lm's whole model) are different quantities; give traces of "
                          "one workload")
    many = len(traces) > 1
    pairs = []
    for path, t in zip(paths, traces):
        names = recipes or t.names
        for name in names:
            if recipes and name not in t.names:
                continue
            prefix = labels[path] if labels and path in labels else _trace_label(t, many)
            label = f"{prefix}:{name}" if prefix else name
            pairs.append((f"{label} [{t.incomplete}]" if t.incomplete else label, t, t.run(name)))
    if not pairs:
        raise KeyError(f"none of the recipes {', '.join(recipes or [])} is in {', '.join(paths)}")
    return pairs


def plot_growth(paths: list[str], out: str, recipes: list[str] | None = None, layer: int | None = None,
                method: str = "ols", param: str | None = None, labels: dict[str, str] | None = None,
                allow_incomplete: bool = False) -> None:
    """Weight error against the reference vs step on log-log axes, one line per (trace, recipe),
    with the power law fitted over the last window (dashed; exponent, CI and window in the
    legend), and below it the local exponents over windows of a factor GROWTH_WINDOW_FACTOR in
    steps with their 95% t intervals: where the curve bends, the exponent moves. The series is
    the headline (the quantized layers together) unless `layer` (mlp) or `param` (lm; `all`: the
    whole model) names another."""
    _check_out(out)
    pairs = _run_pairs(paths, recipes, labels, allow_incomplete)
    for label, t, run in pairs:   # an index past the layers was an IndexError traceback
        if isinstance(t, MlpRun) and layer is not None and not -t.layers <= layer < t.layers:
            raise ValueError(f"{label}: layer {layer} does not exist ({t.layers} layers: 0..{t.layers - 1}, "
                             "or -1 for the last)")
    series = [_weight_error(t, run, layer, param) for _, t, run in pairs]   # refuses before drawing
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for i, ((label, t, run), (err, _)) in enumerate(zip(pairs, series)):
        steps = t.compare_step.astype(float)
        _growth_line(ax, steps, err, f"C{i % 10}", label, method)
        _local_exponent_points(bx, steps, err, f"C{i % 10}", label)
    whats = {w for _, w in series}
    which = whats.pop() if len(whats) == 1 else "each run's quantized layers together"
    ax.set(ylabel=f"||W - W_ref||_F / ||W_ref||_F  ({which})",
           title=f"weight error growth; error ~ step^b fitted over the last factor {GROWTH_WINDOW_FACTOR:g} of steps "
                 f"({'OLS' if method == 'ols' else 'Newey-West HAC'} CI)")
    bx.set(xlabel="step", ylabel="local exponent b (95% t CI)",
           title=f"local exponents: slopes over windows of a factor {GROWTH_WINDOW_FACTOR:g} in steps")
    if not bx.get_legend_handles_labels()[0]:
        bx.text(0.5, 0.5, "too few compares for a window of 3", transform=bx.transAxes, ha="center")
    for a in (ax, bx):
        a.grid(True, which="both", alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out)


def plot_heatmap(path: str, out: str, quantity: str = "weight_rel_error", allow_incomplete: bool = False) -> None:
    """Per-layer heat map (layers x compare steps, log colour scale) of the weight error against
    the reference, or of another per-layer compare quantity (grad_rel_error, ...), one panel
    per recipe on a shared colour scale. An lm trace has one row per parameter."""
    _check_out(out)
    r = _training(path, allow_incomplete)
    what, rows = _rows(r)
    mats = []
    for run in r.runs:
        m = run.weight_rel_error if quantity == "weight_rel_error" else run.extra.get(quantity)
        if m is None:
            raise KeyError(f"{path}: run {run.name} has no {quantity}")
        mats.append(np.asarray(m, dtype=float))
    pos = np.concatenate([m[(m > 0) & np.isfinite(m)] for m in mats])
    if pos.size == 0:
        raise ValueError(f"{path}: {quantity} has no positive finite value to plot on a log scale")
    norm = LogNorm(vmin=pos.min(), vmax=pos.max())
    row_h = 0.45 if what == "layer" else 0.22
    fig, axes = plt.subplots(len(mats), 1, figsize=(9, 1.2 + row_h * len(rows) * len(mats)), squeeze=False,
                             sharex=True, gridspec_kw={"left": 0.1 if what == "layer" else 0.2})   # room for names
    cs = r.compare_step
    for ax, run, m in zip(axes[:, 0], r.runs, mats):
        im = ax.imshow(np.where(m > 0, m, np.nan).T, aspect="auto", origin="lower", norm=norm, cmap="viridis",
                       extent=(cs[0] - 0.5, cs[-1] + 0.5, -0.5, len(rows) - 0.5), interpolation="nearest")
        ax.set_yticks(range(len(rows)), rows, fontsize=8 if what == "layer" else 6)
        ax.set_ylabel(f"{run.name}\n{what}")
    axes[-1, 0].set_xlabel("step")
    unit = "||W - W_ref||_F / ||W_ref||_F" if quantity == "weight_rel_error" else quantity
    fig.colorbar(im, ax=axes[:, 0].tolist(), label=unit)
    fig.suptitle(f"per-{what} {quantity}: {r.attrs.get('config_source', path)}{_note(r)}", fontsize=10)
    _save(fig, out)


STAT_LABELS = {"nmse": "NMSE = sum (x_hat - x)^2 / sum x^2", "clipped_fraction": "clipped fraction [%]",
               "underflow_fraction": "underflow fraction [%]", "zero_scale_fraction": "zero-scale blocks [%]"}


def plot_stats(path: str, out: str, smooth: int = 1, allow_incomplete: bool = False) -> None:
    """Quantization-statistic histories of an mlp or lm trace: per statistic a panel, one line
    per (recipe, GEMM role), the mean over the quantized operands of that role (all layers; an
    lm trace's per-kind view is plot_lm's last panel)."""
    _check_out(out)
    r = _training(path, allow_incomplete)
    keys = ["nmse"] + [k for k in ("clipped_fraction", "underflow_fraction", "zero_scale_fraction")
                       if all(f"operand_{k}" in run.extra for run in r.runs)]
    fig, axes = plt.subplots(len(keys), 1, figsize=(9, 2.6 * len(keys)), sharex=True, squeeze=False)
    slots = np.arange(6 * _linears(r))
    role_of = (slots % 6) // 2
    styles = ("-", "--", ":")
    for ax, key in zip(axes[:, 0], keys):
        for i, run in enumerate(r.runs):
            a = run.operand_stat(key)
            quantized = run.operand_nmse.max(axis=0) > 0   # slots the recipe quantizes at all
            for role in range(3):
                cols = quantized & (role_of == role)
                if not cols.any():
                    continue
                y = a[:, cols].mean(axis=1) * (1 if key == "nmse" else 100)
                ax.plot(r.step, running_mean(y, smooth), color=f"C{i}", ls=styles[role], lw=0.9,
                        label=f"{run.name} {OPERAND_ROLES[role]}")
        if key == "nmse":
            ax.set_yscale("log")
        ax.set_ylabel(STAT_LABELS[key])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(f"quantization statistics of the GEMM operands (mean per role): "
                 f"{r.attrs.get('config_source', path)}{_note(r)}", fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def plot_compare(paths: list[str], out: str, recipes: list[str] | None = None, smooth: int = 20,
                 labels: dict[str, str] | None = None, allow_incomplete: bool = False) -> None:
    """Overlay several traces: sum/dot traces as in plot_runs; mlp traces (e.g. RN vs SR, RHT on
    and off, or one config against an ablation) by relative loss gap and last-layer weight
    error with fitted exponents, one line per (trace, recipe); lm traces the same with the
    whole model's weight error."""
    _check_out(out)
    loaded = [load_run(p, allow_incomplete) for p in paths]
    if all(isinstance(t, SumDotRun) for t in loaded):
        plot_runs(paths, out)
        return
    if any(isinstance(t, SumDotRun) for t in loaded):
        raise SchemaError("compare: mix of training (mlp/lm) and sum/dot traces; compare traces of one kind")
    pairs = _run_pairs(paths, recipes, labels, allow_incomplete)
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(13, 5))
    for i, (label, t, run) in enumerate(pairs):
        c = f"C{i % 10}"
        gw = window_mean_gap(t.step, run.rel_loss_gap)
        a0.plot(t.step, 100 * running_mean(run.rel_loss_gap, smooth), color=c, lw=1,
                label=f"{label}: {gw.label()} = {100 * gw.mean:+.3g}%")
        a0.hlines(100 * gw.mean, gw.first_step, gw.last_step, color=c, lw=2.5)
        _growth_line(a1, t.compare_step.astype(float), _weight_error(t, run)[0], c, label)
    a0.axhline(0, color="k", lw=0.5)
    a0.set(xlabel="step", ylabel=f"(loss - loss_ref) / loss_ref  [%], curve: mean of {smooth} steps",
           title="relative loss gap (bar: the window mean)")
    which = _weight_error(pairs[0][1], pairs[0][2])[1]
    a1.set(xlabel="step", ylabel=f"||W - W_ref||_F / ||W_ref||_F ({which})", title="weight error (fit dashed)")
    for a in (a0, a1):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle("fp4drift run: " + _names(paths, labels), fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def ablation_table(paths: list[str], fraction: float | None = None, min_records: int | None = None,
                   labels: dict[str, str] | None = None, allow_incomplete: bool = False):
    """(label, loss gap, headline weight error at the last compare, growth exponent over the last
    window, GapWindow) per (trace, recipe). The loss gap is window_mean_gap's, the one definition
    fp4drift's summary prints (fraction and min_records default to its window); the weight error
    headline_weight_error's (the quantized layers together); the exponent the slope over the last
    factor GROWTH_WINDOW_FACTOR of steps."""
    from .stats import GAP_WINDOW_FRACTION, GAP_WINDOW_MIN_RECORDS, final_growth_window
    fraction = GAP_WINDOW_FRACTION if fraction is None else fraction
    min_records = GAP_WINDOW_MIN_RECORDS if min_records is None else min_records
    rows = []
    for label, t, run in _run_pairs(paths, None, labels, allow_incomplete):
        gw = window_mean_gap(t.step, run.rel_loss_gap, fraction, min_records)
        err = _weight_error(t, run)[0]
        b = final_growth_window(t.compare_step, err).exponent if len(err) else np.nan
        rows.append((label, gw.mean, float(err[-1]) if len(err) else np.nan, b, gw))
    return rows


def plot_ablation(paths: list[str], out: str, fraction: float | None = None, min_records: int | None = None,
                  labels: dict[str, str] | None = None, allow_incomplete: bool = False) -> None:
    """Ablation bars: per (trace, recipe) the loss gap (the window mean, the window in the axis
    label) and the headline weight error, sorted by loss gap."""
    _check_out(out)
    rows = sorted(ablation_table(paths, fraction, min_records, labels, allow_incomplete), key=lambda r: r[1])
    y = np.arange(len(rows))
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 0.4 * len(rows) + 1.8), sharey=True)
    gaps = [100 * r[1] for r in rows]
    a0.barh(y, gaps, color="tab:red")
    a0.set_yticks(y, [r[0] for r in rows])
    a0.invert_yaxis()
    for yi, v in zip(y, gaps):
        a0.text(v, yi, f" {v:.2f}%", va="center", fontsize=8)
    windows = sorted({(r[4].first_step, r[4].last_step) for r in rows})
    span = "; ".join(f"{a}-{b}" for a, b in windows)
    a0.set_xlabel(f"relative loss gap [%]\nmean of steps {span}")
    a1.barh(y, [r[2] for r in rows], color="tab:blue")
    for yi, r in zip(y, rows):
        a1.text(r[2], yi, f" {r[2]:.3g} (b = {r[3]:.2f})", va="center", fontsize=8)
    a1.set_xlabel("||W - W_ref||_F / ||W_ref||_F at the last compare, quantized layers together\n"
                  f"(b: growth exponent over the last factor {GROWTH_WINDOW_FACTOR:g} of steps)")
    for a in (a0, a1):
        a.grid(axis="x", alpha=0.3)
    fig.suptitle("ablation: " + _names(paths, labels), fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def plot_gemm(path: str, out: str) -> None:
    """The error split of an `fp4drift gemm` output per recipe: total, quantization and
    accumulation relative Frobenius errors on a log axis."""
    _check_out(out)
    g = load_gemm(path)
    y = np.arange(len(g.names))
    h = 0.27
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(y) + 1.8))
    for j, part in enumerate(("total", "quantization", "accumulation")):
        v = g.attr(f"{part}_rel_frobenius")
        ax.barh(y + (j - 1) * h, np.where(v > 0, v, np.nan), height=h, label=part)
    ax.set_xscale("log")
    ax.set_yticks(y, g.names)
    ax.invert_yaxis()
    ax.set_xlabel("||E||_F / ||C_exact||_F")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    a = g.attrs
    fig.suptitle(f"fp4drift gemm: {a.get('role', '')} M={a.get('m', '')} N={a.get('n', '')} K={a.get('k', '')}",
                 fontsize=10)
    fig.tight_layout()
    _save(fig, out)


def plot_sweep_stats(s, cells, group_by: list[str], metric: str, seed_key: str, confidence: float, out: str) -> None:
    """A sweep's metric against the first --group-by key: per cell the mean over seeds with its t
    interval as error bar (none for a single seed), one series per recipe (and value of the other
    group keys). A numeric key gets a numeric axis, any other one its values in sweep order."""
    from .sweep import format_value
    from .sweep_stats import describe
    _check_out(out)
    if not group_by:
        raise ValueError("--plot needs a --group-by key (the x axis)")
    xs = list(dict.fromkeys(c.key[0] for c in cells))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    series: dict[tuple, list] = {}
    for c in cells:
        series.setdefault((c.recipe, c.key[1:]), []).append(c)
    longest = max(len(r) + len(describe(group_by[1:], k)) for r, k in series)
    fig, ax = plt.subplots(figsize=(6.5 + 0.07 * longest, 4.5), layout="constrained")
    width = 0.6 / max(len(series), 1)
    for j, ((recipe, rest), cs) in enumerate(series.items()):
        if numeric:
            cs = sorted(cs, key=lambda c: c.key[0])
            x = np.array([float(c.key[0]) for c in cs])
        else:
            x = np.array([xs.index(c.key[0]) for c in cs]) + (j - (len(series) - 1) / 2) * width
        y = np.array([c.interval.mean for c in cs])
        err = np.array([c.interval.half_width for c in cs])
        label = recipe + (f" ({describe(group_by[1:], rest)})" if rest else "")
        ax.errorbar(x, y, yerr=np.where(np.isfinite(err), err, 0.0), marker="o", capsize=3,
                    linestyle="-" if numeric else "none", label=label)
    if not numeric:
        ax.set_xticks(range(len(xs)), ["(base)" if v is None else format_value(v) for v in xs])
    ax.set_xlabel(group_by[0])
    ax.set_ylabel(metric)
    ns = sorted({c.interval.n for c in cells})
    ax.set_title(f"{Path(s.path).name}: {metric}, mean over {seed_key} (n = {', '.join(map(str, ns))})\n"
                 f"error bars: {100 * confidence:g}% t interval, n-1 dof", fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.legend(fontsize=7, loc="outside right upper")
    _save(fig, out)
