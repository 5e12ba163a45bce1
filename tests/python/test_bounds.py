"""The numeric-bounds checker (python -m fp4drift_analysis check): the shipped bounds files
parse, bad input exits 2 naming the problem, a violated bound exits 1 with its diff, and
matching traces are read instead of rerun."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from fp4drift_analysis import bounds as B

EXE = os.environ.get("FP4DRIFT_EXE", "")
needs_exe = pytest.mark.skipif(not (EXE and os.access(EXE, os.X_OK)), reason="FP4DRIFT_EXE not set to the fp4drift binary")


def run_check(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "analysis"))
    extra = ["--fp4drift", EXE] if EXE else []
    return subprocess.run([sys.executable, "-m", "fp4drift_analysis", "check", *args, *extra],
                          capture_output=True, text=True, env=env)


SUM_RN = """
[experiments.rn]
config = "data/configs/sum-fp16-rn.toml"
overrides = { "sum.n" = 4096 }
"""

BOUND = """
[[bounds]]
name = "{name}"
experiment = "rn"
metric = "sum.first_stagnation"
{limits}
rationale = "n ones in FP16 under RNE stop at 2048"
provenance = "theory: p = 11"
"""


def test_shipped_bounds_parse_with_rationale_and_provenance() -> None:
    experiments, bounds = B.load_bounds([str(ROOT / "data" / "bounds")])
    assert 6 <= len(bounds) <= 14
    for b in bounds:
        assert b.rationale and b.provenance.split(":")[0] in ("theory", "measured")
        for e in b.experiments():
            assert e in experiments
    # every config experiment writes back in fp4drift's TOML subset to the same table
    for e in experiments.values():
        if e.config:
            cfg = e.expected_config()
            assert tomllib.loads(B.write_config(cfg)) == cfg


@pytest.mark.parametrize("text,needle", [
    (SUM_RN + BOUND.format(name="a", limits="max = 1\ntolerance = 3"), "unknown key 'tolerance'"),
    (SUM_RN.replace("overrides", "override") + BOUND.format(name="a", limits="max = 1"), "unknown key 'override'"),
    ("[bound]\nx = 1\n", "unknown top-level key 'bound'"),
    (SUM_RN + BOUND.format(name="a", limits="min = 3\nmax = 1"), "min 3.0 > max 1.0"),
    (SUM_RN + BOUND.format(name="a", limits=""), "needs 'min', 'max' or both"),
    (SUM_RN + BOUND.format(name="a", limits="max = 1").replace("theory: p = 11", "p = 11"), "provenance must start"),
    (SUM_RN + BOUND.format(name="a", limits="max = 1").replace('"rn"', '"nope"'), "unknown experiment 'nope'"),
    (SUM_RN + BOUND.format(name="a", limits="max = 1").replace("sum.first_stagnation", "sum.nothing"), "unknown metric"),
    (SUM_RN.replace("sum-fp16-rn", "missing") + BOUND.format(name="a", limits="max = 1"), "missing.toml not found"),
    (SUM_RN + BOUND.format(name="a", limits="max = 1") + BOUND.format(name="a", limits="max = 2"), "used twice"),
])
def test_bad_bounds_files_exit_2_naming_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "b.toml"
    f.write_text(text)
    r = run_check(str(f))
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr
    assert "PASS" not in r.stdout and "FAIL" not in r.stdout   # no table after bad input


def test_missing_bounds_path_exits_2(tmp_path: Path) -> None:
    r = run_check(str(tmp_path / "nowhere.toml"))
    assert r.returncode == 2 and "nowhere.toml: no such file" in r.stderr


@needs_exe
def test_violated_bound_exits_1_with_a_diff(tmp_path: Path) -> None:
    f = tmp_path / "b.toml"
    f.write_text(SUM_RN + BOUND.format(name="holds", limits="min = 2049\nmax = 2049")
                 + BOUND.format(name="deliberately-violated", limits="max = 2000"))
    r = run_check(str(f))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    row = {ln.split()[0]: ln.split() for ln in lines if ln.startswith(("holds", "deliberately-violated"))}
    assert row["holds"][1] == "2049" and row["holds"][-1] == "PASS"
    assert row["deliberately-violated"][1] == "2049" and row["deliberately-violated"][-1] == "FAIL"
    assert row["deliberately-violated"][-2] == "-2.5%"       # (2000 - 2049) / 2000
    assert "--- bound deliberately-violated" in r.stdout
    assert "-   expected: sum.first_stagnation(rn: run=0) <= 2000" in r.stdout
    assert "+   measured: 2049   (49 above the max (2.5% of it))" in r.stdout
    assert "rationale:  n ones in FP16 under RNE stop at 2048" in r.stdout
    assert "1 of 2 hold, 1 VIOLATED" in r.stdout


@needs_exe
def test_matching_traces_are_read_and_others_rerun(tmp_path: Path) -> None:
    f = tmp_path / "b.toml"
    f.write_text(SUM_RN + BOUND.format(name="stagnation", limits="min = 2049\nmax = 2049"))
    (tmp_path / "traces").mkdir()
    cfg = tmp_path / "rn.toml"
    cfg.write_text(B.write_config(B.load_bounds([str(f)])[0]["rn"].expected_config()))
    subprocess.run([EXE, "run", str(cfg), "--out", str(tmp_path / "traces" / "rn.h5")], check=True, capture_output=True)
    r = run_check(str(f), "--traces", str(tmp_path / "traces"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "experiment rn: read" in r.stdout
    # a trace of another config (n = 3000) under the same name is not used: the experiment runs
    cfg.write_text(cfg.read_text().replace("n = 4096", "n = 3000"))
    subprocess.run([EXE, "run", str(cfg), "--out", str(tmp_path / "traces" / "rn.h5")], check=True, capture_output=True)
    r = run_check(str(f), "--traces", str(tmp_path / "traces"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "experiment rn: ran" in r.stdout and "its config differs" in r.stdout


def test_margin_and_non_finite_values() -> None:
    assert B._margin(0.9, None, 1.0) == (pytest.approx(0.1), True)
    assert B._margin(5.0, 4.0, 100.0) == (pytest.approx(0.25), True)   # nearest limit: 4
    assert B._margin(-0.5, None, 0.0) == (0.5, False)                  # a zero limit: absolute
    bound = B.Bound("x", "f", "sum.value", {}, "e", 0.0, 1.0, "r", "theory: t")
    B.METRICS["test.nan"] = ((), {}, lambda tr, p: (math.nan, "nan"))
    try:
        bound.metric = "test.nan"
        r = B.evaluate(bound, {"e": None})
    finally:
        del B.METRICS["test.nan"]
    assert not r.ok    # a NaN never passes a bound


def test_ratio_of_negative_values_fails_instead_of_passing(monkeypatch) -> None:
    """-0.2 / -0.1 = 2 must not pass a ranking 'ratio >= 1': it says the opposite."""
    values = {"num": -0.2, "den": -0.1}
    monkeypatch.setitem(B.METRICS, "fake", (None, None, lambda tr, p: (values[p["which"]], p["which"])))

    def part(which: str) -> B.Bound:
        return B.Bound(which, "f.toml", "fake", {"which": which}, "e", None, None, "", "")

    ratio = B.Bound("r", "f.toml", B.RATIO, {}, None, 1.0, None, "a ranking", "theory", part("num"), part("den"))
    assert not B.evaluate(ratio, {"e": None}).ok
    values.update(num=0.2, den=0.1)
    assert B.evaluate(ratio, {"e": None}).ok


def test_a_shortened_run_is_not_taken_for_the_experiment(tmp_path: Path) -> None:
    """--steps shortens a run without showing in its config attribute: a trace made with it must
    not stand in for an experiment that runs the config's full length (and vice versa)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('workload = "sum"\nn = 16\n')

    class Trace:
        def __init__(self, command_line: str) -> None:
            self.attrs = {"config": cfg.read_text(), "command_line": command_line}

    full = B.Experiment("e", str(tmp_path / "b.toml"), config=str(cfg))
    short = B.Experiment("e", str(tmp_path / "b.toml"), config=str(cfg), steps=100)
    assert B._trace_matches(full, Trace("fp4drift run c.toml --out t.h5")) is None
    assert "--steps 50" in B._trace_matches(full, Trace("fp4drift run c.toml --steps 50 --out t.h5"))
    assert B._trace_matches(full, Trace("fp4drift run c.toml --steps=50")) is not None
    assert B._trace_matches(short, Trace("fp4drift run c.toml --steps 100")) is None
    assert B._trace_matches(short, Trace("fp4drift run c.toml --steps 99")) == "it was run with another --steps"
    assert B._trace_matches(short, Trace("fp4drift run c.toml")) == "it was not run with --steps"


def test_traces_dir_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    # --traces naming no directory was ignored: every experiment ran instead of being read, and
    # a mistyped directory went unnoticed.
    f = tmp_path / "b.toml"
    f.write_text(SUM_RN + BOUND.format(name="stagnation", limits="min = 2049\nmax = 2049"))
    r = run_check(str(f), "--traces", str(tmp_path / "no-such-dir"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--traces" in r.stderr and "no-such-dir" in r.stderr and "is not a directory" in r.stderr
    assert "experiment rn" not in r.stdout


@pytest.mark.parametrize("value,lo,hi", [(2048.0, 2049.0, 2049.0),      # an equality missed by one
                                         (1.0001, None, 1.0),           # a maximum exceeded slightly
                                         (-1e-4, 0.0, None)])           # a zero limit: absolute margin
def test_a_violation_never_prints_a_margin_that_reads_as_a_pass(monkeypatch, value, lo, hi) -> None:
    """A violated bound's margin cell is negative and nonzero with two significant digits (or
    says VIOLATED); "-0.0%" beside a FAIL reads like a pass."""
    monkeypatch.setitem(B.METRICS, "fake", (None, None, lambda tr, p: (value, "fake")))
    r = B.evaluate(B.Bound("eq", "f.toml", "fake", {}, "e", lo, hi, "", ""), {"e": None})
    assert not r.ok
    cell = B._fmt_margin(r)
    if cell != "VIOLATED":
        number = float(cell.rstrip("%"))
        assert number < 0, cell
        digits = cell.lstrip("+-").rstrip("%").split("e")[0].replace(".", "").lstrip("0")
        assert len(digits) >= 2, cell
    assert "0.0%" not in B.explain(r)


def test_non_finite_violation_says_violated(monkeypatch) -> None:
    monkeypatch.setitem(B.METRICS, "fake", (None, None, lambda tr, p: (math.nan, "fake")))
    r = B.evaluate(B.Bound("eq", "f.toml", "fake", {}, "e", 1.0, None, "", ""), {"e": None})
    assert B._fmt_margin(r) == "VIOLATED"


HARMONIC = "data/configs/sum-bf16-harmonic.toml"


def _bf16_rne_harmonic_first_loss(n: int = 4096) -> tuple[int, float]:
    """Oracle independent of fp4drift: s_i = RNE_bf16(s_{i-1} + float32(1/i)). s has 8
    significant bits below 8 and a term's lowest bit is >= 2^-36 for i <= 4096, so s + t is
    exact in double; Python's round() of an exact double is ties-to-even."""
    import numpy as np
    s = 0.0
    for i in range(1, n + 1):
        t = float(np.float32(1.0 / i))
        x = s + t
        e = math.frexp(x)[1]
        new = math.ldexp(round(math.ldexp(x, 8 - e)), e - 8)
        if new == s:
            return i, s
        s = new
    raise AssertionError("no addend lost")


def test_bf16_harmonic_rn_stall_is_what_the_config_and_the_bound_state() -> None:
    # The config's comment once put RN's stall "near s = 5.5 - 6" and no bound guarded it; the
    # recursion loses its first addend at i = 65 with s = 5.0625 (i = 64 is a tie to even).
    first, stall = _bf16_rne_harmonic_first_loss()
    assert (first, stall) == (65, 5.0625)
    experiments, bounds = B.load_bounds([str(ROOT / "data" / "bounds" / "sums.toml")])
    guard = [b for b in bounds if b.metric == "sum.first_stagnation"
             and experiments[b.experiment].config == HARMONIC]
    assert len(guard) == 1, "a bound must guard the BF16 harmonic RN stall"
    assert guard[0].lo == guard[0].hi == first
    cfg = experiments[guard[0].experiment].expected_config()["sum"]
    assert cfg["rounding"] == "rne" and cfg["format"] == "bf16" and cfg["terms"] == "harmonic"
    comments = " ".join(ln for ln in (ROOT / HARMONIC).read_text().splitlines() if ln.startswith("#"))
    assert f"i = {first}" in comments and f"{stall}" in comments


@needs_exe
def test_fp4drift_bf16_harmonic_rn_stalls_where_the_oracle_does(tmp_path: Path) -> None:
    from fp4drift_analysis import load_run
    first, stall = _bf16_rne_harmonic_first_loss()
    cfg = tomllib.loads((ROOT / HARMONIC).read_text())
    cfg["sum"].update(rounding="rne", runs=1, n=4096)
    (tmp_path / "h.toml").write_text(B.write_config(cfg))
    subprocess.run([EXE, "run", str(tmp_path / "h.toml"), "--out", str(tmp_path / "h.h5")], check=True,
                   capture_output=True)
    r = load_run(str(tmp_path / "h.h5"))
    assert int(r.first_stagnation[0]) == first
    assert list(r.computed[r.n >= 64, 0]) == [stall] * int((r.n >= 64).sum())
    assert r.computed[r.n == 32, 0][0] < stall
