"""Command line: fp4drift-analysis COMMAND ... (or python -m fp4drift_analysis), from any directory
with the environment scripts/setup made (source .venv/bin/activate, or .venv/bin/fp4drift-analysis).

  plot-quantize Q.h5 --out F.png        error table of an `fp4drift quantize` output
  plot-gemm G.h5 --out F.png            error split of an `fp4drift gemm` output
  plot-run T.h5 [T.h5 ...] --out F.png  a run trace (mlp, lm: 4 panels; sum/dot: overlaid)
  plot-lm T.h5 --out F.png              an lm trace: losses with floor and unigram loss, loss gap,
                                        whole-model weight error, operand NMSE per linear kind
  plot-growth T.h5 ... --out F.png      weight error vs step, log-log, fit over the last window with
                                        CI, and the local exponents over windows below
  plot-heatmap T.h5 --out F.png         per-layer (lm: per-parameter) weight error per recipe
  plot-stats T.h5 --out F.png           quantization-statistic histories of the GEMM operands
  compare T.h5 T.h5 ... --out F.png     overlay traces (RN vs SR, RHT on/off, ...)
  ablation T.h5 ... --out F.png         bars: loss gap (window mean) and weight error per recipe
  fit T.h5 ... [--window LO:HI]         growth-exponent fits over a stated window (OLS and HAC CIs)
                                        and the local exponents, as a table
Every command that reads run traces also takes a sweep index (OUT/sweep.h5) for the traces of its
complete runs, labelled by their overrides; --where KEY=VALUE (repeatable) selects runs. plot-lm,
plot-heatmap and plot-stats draw one run: their --where must select exactly one.
A run still being written (or stopped, failed or killed) is refused unless --allow-incomplete, which
plot-run, plot-lm, plot-growth, plot-heatmap, plot-stats, compare, ablation and fit take: the trace
is then read as far as it goes (in SWMR mode while its run writes it), and the title or label says
up to which step; a sweep index given to them is then also read while its sweep runs (its complete
runs, as sweep-stats --allow-incomplete).
The training plots (plot-growth, plot-heatmap, plot-stats, compare, ablation, fit) read mlp and
lm traces but never both at once: their weight errors (the layers a recipe quantizes, together;
an lm's quantized linears' weights) and losses are different quantities.
  sweep-stats SWEEP.h5 --group-by K[,K]  a sweep's metric per group and recipe: mean over seeds with
                                        t interval; --baseline R: paired gaps, t and sign tests
  bias T.h5 ...                         SR bias test across seeds of sum/dot traces
  check [BOUNDS ...] [--fp4drift EXE] [--traces DIR]   the CI regression of numeric bounds
Output images are PNG or PDF by the suffix. Without --out a plot goes to the current directory as
TRACE-COMMAND.png (TRACE: the first trace's name without .h5); nothing is written anywhere else.
Exit status 2 on bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .bounds import BoundsError, REPO, check
from .stats import fit_growth, sr_bias_test
from .traces import LmRun, MlpRun, SchemaError, SumDotRun, load_run


def _parse_window(text: str | None) -> tuple[float, float] | None:
    """--window LO:HI, the steps lo < step <= hi of a fit."""
    if text is None:
        return None
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--window must be LO:HI (steps, lo < step <= hi), got {text!r}") from None
    if not 0 <= lo < hi:
        raise ValueError(f"--window must satisfy 0 <= LO < HI, got {text!r}")
    return lo, hi


def _fit_table(paths: list[str], confidence: float, labels: dict[str, str] | None = None,
               allow_incomplete: bool = False, window: tuple[float, float] | None = None) -> None:
    from .plots import headline_weight_error
    from .stats import GROWTH_WINDOW_FACTOR, local_exponents
    names = {p: (labels or {}).get(p, Path(p).name) for p in paths}
    width = max(40, *(len(n) + 14 for n in names.values()))
    head = "run:recipe" if labels else "trace:recipe"
    print(f"{head:<{width}} {'window':>11} {'points':>6} {'exponent':>9}  {'OLS CI':>17}  {'HAC CI':>17}  lag")
    loaded = [load_run(p, allow_incomplete) for p in paths]
    whats, locals_ = [], []
    for p, r in zip(paths, loaded):
        if not isinstance(r, (MlpRun, LmRun)):
            raise SchemaError(f"{p}: fit needs an mlp or lm trace")
        for run in r.runs:
            # the headline series: the layers the recipe quantizes, together (numerics.md,
            # "Run summary metrics"), fitted over the stated window - by default the last factor
            # of GROWTH_WINDOW_FACTOR in steps, as fp4drift's summary
            e, what = headline_weight_error(r, run)
            whats.append(what)
            s = r.compare_step.astype(float)
            w = window or ((float(s[-1]) / GROWTH_WINDOW_FACTOR, float(s[-1])) if len(s) else (0.0, 1.0))
            try:
                ols = fit_growth(s, e, confidence, "ols", window=w)
                hac = fit_growth(s, e, confidence, "hac", window=w)
            except ValueError as err:   # one short run does not hide the others' fits
                print(f"{names[p] + ':' + run.name:<{width}} {f'{w[0]:g}<s<={w[1]:g}':>11}  no fit: {err}")
                locals_.append((names[p] + ":" + run.name, []))
                continue
            span = f"{ols.first_step:.0f}-{ols.last_step:.0f}"
            print(f"{names[p] + ':' + run.name:<{width}} {span:>11} {ols.points:>6} {ols.exponent:>9.3f}  "
                  f"[{ols.ci_low:6.3f}, {ols.ci_high:6.3f}]  [{hac.ci_low:6.3f}, {hac.ci_high:6.3f}]  {hac.lag:>3}")
            locals_.append((names[p] + ":" + run.name, local_exponents(s, e, confidence=confidence)))
    print(f"local exponents (slopes over windows of a factor {GROWTH_WINDOW_FACTOR:g} in steps, "
          f"{100 * confidence:g}% OLS t CI):")
    for name, ws in locals_:
        print(f"  {name}: " + ("; ".join(w.label() for w in ws) if ws else "too few compares"))
    for p, r in zip(paths, loaded):
        if r.incomplete:
            print(f"{names[p]}: {r.incomplete}")
    print(f"series: {'; '.join(dict.fromkeys(whats))}")
    print(f"({100 * confidence:g}% intervals; OLS assumes independent residuals and is optimistic along one "
          "trajectory; HAC = Newey-West; docs/analysis.md)")


def _bias_table(paths: list[str], confidence: float, labels: dict[str, str] | None = None) -> int:
    biased = 0
    for p in paths:
        r = load_run(p)
        if not isinstance(r, SumDotRun):
            raise SchemaError(f"{p}: bias needs a sum/dot trace")
        t = sr_bias_test(r.error[-1, :], confidence)
        biased += not t.unbiased
        print(f"{(labels or {}).get(p, Path(p).name)} ({r.label}), n = {int(r.n[-1])}: {t.summary()}")
    return biased


def _one_trace(command: str, path: str, where: list[str] | None, allow_incomplete: bool) -> str:
    """The one trace a single-trace command draws: the path itself, or the one run of a sweep index
    that --where selects (a selection of several is refused, naming them)."""
    from .sweep import expand_traces
    paths, labels = expand_traces([path], where, allow_incomplete)
    if len(paths) != 1:
        names = ", ".join(labels.get(t, t) for t in paths[:6]) + (", ..." if len(paths) > 6 else "")
        raise ValueError(f"{path}: {command} draws one run and the sweep index stands for {len(paths)} ({names}); "
                         "select one with --where KEY=VALUE")
    return paths[0]


def _sweep_stats(a) -> None:
    import json

    from .sweep import load_sweep
    from .sweep_stats import find_seed_key, group_runs, json_report, paired_gaps, text_report
    if not 0.0 < a.confidence < 1.0:
        raise ValueError(f"--confidence must be in (0, 1), got {a.confidence}")
    s = load_sweep(a.sweep, allow_incomplete=a.allow_incomplete)
    keys = [k.strip() for k in a.group_by.split(",") if k.strip()] if a.group_by else []
    if a.plot and not keys:
        raise ValueError("--plot needs a --group-by key (the x axis)")
    seed_key = find_seed_key(s, a.seed_key)
    cells = group_runs(s, keys, a.metric, seed_key, a.confidence)
    pairs = paired_gaps(cells, a.baseline, a.confidence) if a.baseline else None
    if a.plot:
        from . import plots
        plots.plot_sweep_stats(s, cells, keys, a.metric, seed_key, a.confidence, a.plot)
    if a.json:
        print(json.dumps(json_report(s, cells, pairs, keys, a.metric, seed_key, a.confidence), indent=1))
    else:
        print(text_report(s, cells, pairs, keys, a.metric, seed_key, a.confidence))
    if a.plot:
        print(f"wrote {a.plot}", file=sys.stderr if a.json else sys.stdout)


def default_out(command: str, trace: str) -> Path:
    """Where a plot goes without --out: the current directory, the one place the user chose by
    running the command there (never the package's source tree or the trace's directory)."""
    return Path.cwd() / f"{Path(trace).stem}-{command}.png"


def _at_least_one(text: str) -> int:
    """argparse type of a window length: 0 drew NaN curves (--smooth) or, as a slice [-0:],
    averaged the whole run instead of its end; negative ones were as wrong."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return n


def _fraction(text: str) -> float:
    """argparse type of --gap-fraction: a share of the records in (0, 1]."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return v


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fp4drift-analysis", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def cmd(name, help, many=False):
        s = sub.add_parser(name, help=help)
        s.add_argument("traces" if many else "trace", nargs="+" if many else None)
        s.add_argument("--out", help="output image (.png or .pdf; default: TRACE-COMMAND.png in the current directory)")
        return s

    INCOMPLETE = ("read a run that is still being written (or stopped, failed or killed) as far as it goes; "
                  "a sweep index while its sweep runs (its complete runs)")

    cmd("plot-quantize", "plot the error table of an `fp4drift quantize` output")
    cmd("plot-gemm", "plot the error split of an `fp4drift gemm` output")
    r = cmd("plot-run", "plot a run trace (one mlp or lm trace, or several sum/dot traces overlaid)", many=True)
    lm = cmd("plot-lm", "plot an lm trace: losses, loss gap, weight error, operand NMSE per linear kind")
    lm.add_argument("--smooth", type=_at_least_one, default=20, help="trailing mean over this many steps")
    g = cmd("plot-growth", "weight error vs step (log-log) with fitted growth exponents and CIs", many=True)
    g.add_argument("--recipes", help="comma list (default: all)")
    g.add_argument("--layer", type=int, help="mlp: one layer (-1: the last; default: the quantized layers together)")
    g.add_argument("--param", help="lm: one parameter of param_names, e.g. head, or all for the whole model "
                   "(default: the quantized linears' weights together)")
    g.add_argument("--method", choices=("ols", "hac"), default="ols", help="CI of the exponent")
    h = cmd("plot-heatmap", "per-layer heat map of the weight error (or --quantity) per recipe")
    h.add_argument("--quantity", default="weight_rel_error",
                   help="weight_rel_error, grad_rel_error, grad_cosine, grad_sr_mean_rel_error")
    st = cmd("plot-stats", "quantization-statistic histories of the GEMM operands")
    st.add_argument("--smooth", type=_at_least_one, default=1, help="trailing mean over this many steps")
    WHERE = ("a sweep index (OUT/sweep.h5) stands for its complete runs' traces, labelled by their "
             "overrides; KEY=VALUE selects the runs (repeatable; KEY an override key or `entry`)")
    g.add_argument("--where", action="append", help=WHERE)
    for s in (r, lm, h, st):
        s.add_argument("--where", action="append", help=WHERE + (" (the plot draws one run: select one)"
                                                                   if s is not r else ""))
    c = cmd("compare", "overlay several traces (RN vs SR, RHT on/off, ablations)", many=True)
    c.add_argument("--recipes", help="comma list (default: all)")
    c.add_argument("--where", action="append", help=WHERE)
    a = cmd("ablation", "bars of the final loss gap and weight error per (trace, recipe)", many=True)
    a.add_argument("--gap-fraction", type=_fraction, default=None,
                   help="loss gap: the trailing fraction of the records averaged (default 0.1, as fp4drift's summary)")
    a.add_argument("--gap-min-records", type=_at_least_one, default=None,
                   help="loss gap: at least this many records averaged (default 20)")
    a.add_argument("--where", action="append", help=WHERE)
    f = sub.add_parser("fit", help="growth-exponent fits with confidence intervals")
    f.add_argument("traces", nargs="+")
    f.add_argument("--confidence", type=float, default=0.95)
    f.add_argument("--window", help="fit over the compares with LO < step <= HI (LO:HI; default: the last factor "
                   "2 in steps, as fp4drift's summary)")
    f.add_argument("--where", action="append", help=WHERE)
    for s in (r, lm, g, h, st, c, a, f):
        s.add_argument("--allow-incomplete", action="store_true", help=INCOMPLETE)
    b = sub.add_parser("bias", help="SR bias test across seeds (sum/dot traces); exit 1 if biased")
    b.add_argument("traces", nargs="+")
    b.add_argument("--confidence", type=float, default=0.99)
    b.add_argument("--where", action="append", help=WHERE)
    ss = sub.add_parser("sweep-stats", help="a sweep's metric grouped by config keys: mean over seeds with t "
                        "intervals, paired gaps to a baseline recipe")
    ss.add_argument("sweep", help="a sweep index (OUT/sweep.h5)")
    ss.add_argument("--group-by", default="", help="comma list of override keys (or `entry`, the list entry); "
                    "the recipe is always one")
    ss.add_argument("--metric", default="tail_loss", help="a /summary_recipes column (tail_loss, rel_loss_gap_window_mean, "
                    "quantized_weight_rel_error, quantized_growth_exponent, ...) or a numeric /summary one (default: tail_loss)")
    ss.add_argument("--seed-key", help="the key that numbers the replicates (default: the first of lm.seed, "
                    "mlp.seed, seed the sweep overrides)")
    ss.add_argument("--baseline", help="recipe to pair every other recipe with, seed by seed")
    ss.add_argument("--confidence", type=float, default=0.95)
    ss.add_argument("--json", action="store_true", help="machine-readable output")
    ss.add_argument("--plot", help="metric against the first --group-by key with t-interval error bars (.png/.pdf)")
    ss.add_argument("--allow-incomplete", action="store_true", help="read a sweep still running (complete runs only)")
    k = sub.add_parser("check", help="check numeric bounds (data/bounds); exit 1 on a violation, 2 on bad input")
    k.add_argument("bounds", nargs="*", default=[str(REPO / "data" / "bounds")], help="files or directories")
    k.add_argument("--fp4drift", help="the fp4drift executable (default: $FP4DRIFT_EXE or build/apps/fp4drift/fp4drift)")
    k.add_argument("--traces", help="read DIR/EXPERIMENT.h5 where it matches the experiment instead of running it")

    a = p.parse_args(argv)
    if getattr(a, "out", "") is None:
        a.out = str(default_out(a.command, a.traces[0] if hasattr(a, "traces") else a.trace))
    if a.command == "check":
        return check(a.bounds, exe=a.fp4drift, traces_dir=a.traces)
    recipes = a.recipes.split(",") if getattr(a, "recipes", None) else None
    from . import plots   # matplotlib only where a plot is drawn (check and fit start faster)

    try:
        labels = None
        if a.command in ("fit", "compare", "plot-growth", "ablation", "plot-run", "bias"):
            from .sweep import expand_traces
            a.traces, labels = expand_traces(a.traces, a.where, getattr(a, "allow_incomplete", False))
        if a.command in ("plot-lm", "plot-heatmap", "plot-stats"):
            a.trace = _one_trace(a.command, a.trace, a.where, a.allow_incomplete)
        if a.command == "fit":
            _fit_table(a.traces, a.confidence, labels, a.allow_incomplete, _parse_window(a.window))
            return 0
        if a.command == "sweep-stats":
            _sweep_stats(a)
            return 0
        if a.command == "bias":
            return 1 if _bias_table(a.traces, a.confidence, labels) else 0
        if a.command == "plot-quantize":
            plots.plot_quantize(a.trace, a.out)
        elif a.command == "plot-gemm":
            plots.plot_gemm(a.trace, a.out)
        elif a.command == "plot-run":
            plots.plot_runs(a.traces, a.out, a.allow_incomplete)
        elif a.command == "plot-lm":
            plots.plot_lm(a.trace, a.out, a.smooth, a.allow_incomplete)
        elif a.command == "plot-growth":
            plots.plot_growth(a.traces, a.out, recipes, a.layer, a.method, a.param, labels, a.allow_incomplete)
        elif a.command == "plot-heatmap":
            plots.plot_heatmap(a.trace, a.out, a.quantity, a.allow_incomplete)
        elif a.command == "plot-stats":
            plots.plot_stats(a.trace, a.out, a.smooth, a.allow_incomplete)
        elif a.command == "compare":
            plots.plot_compare(a.traces, a.out, recipes, labels=labels, allow_incomplete=a.allow_incomplete)
        elif a.command == "ablation":
            plots.plot_ablation(a.traces, a.out, a.gap_fraction, a.gap_min_records, labels, a.allow_incomplete)
        print(f"wrote {a.out}")
    except (OSError, SchemaError, KeyError, ValueError, BoundsError) as e:
        print(f"fp4drift_analysis: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
