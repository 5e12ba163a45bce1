"""Command line:
  python -m fp4drift_analysis plot-quantize FILE.h5 --out FILE.png
  python -m fp4drift_analysis plot-run FILE.h5 [FILE.h5 ...] --out FILE.png"""

from __future__ import annotations

import argparse
import sys

from .plots import plot_quantize, plot_runs
from .traces import SchemaError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp4drift_analysis", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    pq = sub.add_parser("plot-quantize", help="plot the error table of an `fp4drift quantize` output")
    pq.add_argument("trace")
    pq.add_argument("--out", required=True, help="output image (.png or .pdf)")
    pr = sub.add_parser("plot-run", help="plot the error against n of `fp4drift run` sum/dot traces (compare several)")
    pr.add_argument("traces", nargs="+")
    pr.add_argument("--out", required=True, help="output image (.png or .pdf)")
    a = p.parse_args(argv)
    try:
        if a.command == "plot-quantize":
            plot_quantize(a.trace, a.out)
        else:
            plot_runs(a.traces, a.out)
        print(f"wrote {a.out}")
    except (OSError, SchemaError, KeyError) as e:
        print(f"fp4drift_analysis: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
