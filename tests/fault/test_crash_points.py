"""Crash consistency of `fp4drift run` traces, by exhaustion over the file-system events of one
short run (tests/support/fault_inject.c numbers them): a process killed just before any one
of them, or meeting a full disk from any one of them on, must leave a trace that a later
command resumes to exactly the bits of an uninterrupted run - never a different trace.

What these runs cover (docs/reliability.md): the creation of a trace, its journal and its
step-0 checkpoint; three flushes (rows into the trace and the journal, both synced, then the
checkpoint file written, synced and renamed); the end (final states, status, removal of the
checkpoint and journal)."""
from __future__ import annotations

import hashlib
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fault_common as fc

pytestmark = pytest.mark.skipif(not fc.FAULT_LIB, reason="FP4D_FAULT_LIB (the fault-injection library) is not set")


# Every run of the sweeps, the one that counts the events included, writes its trace as TRACE
# in a directory of its own that it runs in, with the same config path: the trace's root
# attributes hold the command line and the config's path, their lengths decide how HDF5 lays
# out the root's object header, and with it how many writes a flush makes. A counting run
# whose paths were longer or shorter than the sweep's runs' made one write more than they do,
# and the kill "before its last event" then never happened.
TRACE = "t.h5"


def _first_run(cfg: Path, d: Path, env: dict[str, str]) -> fc.subprocess.CompletedProcess:
    d.mkdir()
    return fc.run(["run", str(cfg), "--out", TRACE, "--json"], fc.faulty(env), cwd=d)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The config, an uninterrupted reference trace, and the number of events of one run."""
    d = tmp_path_factory.mktemp("tiny")
    cfg = d / "tiny.toml"
    cfg.write_text(fc.TINY_MLP)
    count = d / "count"
    r = _first_run(cfg, d / "ref", {"FP4D_FAULT_COUNT_FILE": str(count)})
    assert r.returncode == 0, r.stderr
    ref = d / "ref" / TRACE
    n = int(count.read_text())
    # Creation, three flushes and the end: far more than a handful of events (a library that
    # intercepted nothing would count 0 and the sweeps below would prove nothing).
    assert n > 100, n
    assert not list(ref.parent.glob(TRACE + ".*")), "a complete run leaves no checkpoint, journal or partial file"
    # The count is that of the sweeps' runs, not only of this one: a run set to die before
    # event n + 1 never meets it (the sweeps reach every event), and one set to die before
    # event n does (none is counted that the runs do not make).
    past = _first_run(cfg, d / "past", {"FP4D_FAULT_KILL_AT": str(n + 1)})
    assert past.returncode == 0, f"a run made more than the {n} events counted: {past.stderr[-400:]}"
    last = _first_run(cfg, d / "last", {"FP4D_FAULT_KILL_AT": str(n)})
    assert last.returncode == -9, f"a run made fewer than the {n} events counted (exit {last.returncode})"
    return cfg, ref, n


def _points(n: int) -> list[int]:
    """Every event 1..n, or - to look at a few while debugging - those FP4D_FAULT_POINTS names:
    comma-separated numbers and ranges A-B or A-, where "last" or "last-K" counts from the end
    ("last-3-", "1,7,455-460")."""
    spec = os.environ.get("FP4D_FAULT_POINTS", "").strip()
    if not spec:
        return list(range(1, n + 1))

    def at(s: str) -> int:
        m = re.fullmatch(r"last(?:-(\d+))?|(\d+)", s.strip())
        assert m, f"FP4D_FAULT_POINTS: {s!r} is not a number, last or last-K"
        return int(m[2]) if m[2] else n - int(m[1] or 0)

    out: set[int] = set()
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(last(?:-\d+)?|\d+)\s*(?:(-)\s*(last(?:-\d+)?|\d+)?)?\s*", part)
        assert m, f"FP4D_FAULT_POINTS: {part!r} is not A, A-B or A-"
        lo = at(m[1])
        out.update(range(lo, (at(m[3]) if m[3] else n) + 1) if m[2] else [lo])
    return sorted(k for k in out if 1 <= k <= n)


def _files(t: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(t.parent.glob(t.name + "*"))}


def _continue(cfg: Path, t: Path) -> tuple[str, fc.subprocess.CompletedProcess]:
    """What a user does next: --resume where the trace exists, a plain run where it does not."""
    if t.exists():
        return "resume", fc.run(["run", str(cfg), "--out", t.name, "--json", "--resume"], cwd=t.parent)
    return "fresh", fc.run(["run", str(cfg), "--out", t.name, "--json"], cwd=t.parent)


def _outcome(cfg: Path, ref: Path, t: Path) -> str:
    before = _files(t)
    how, r = _continue(cfg, t)
    if r.returncode == 2 and "is complete" in r.stderr:
        # Killed after the trace was marked complete: the resume only finishes the cleanup the
        # run was doing, so no checkpoint or journal may be left beside the trace.
        left = sorted(p.name for p in t.parent.glob(t.name + ".*"))
        if left:
            return f"complete: LEFTOVERS {left}"
        how = "complete"
    elif r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        # A refusal is allowed by the contract only when it is clean: one line, exit 2, and
        # the files exactly as the failed run left them.
        clean = r.returncode == 2 and len(lines) == 1 and _files(t) == before
        return f"{how}: {'clean' if clean else 'UNCLEAN'} refusal (exit {r.returncode}): {lines[-1] if lines else ''}"
    diff = fc.differences(ref, t)
    return f"{how}: DIFFERENT TRACE {diff[:4]}" if diff else f"{how}: bit-exact"


def _sweep(tiny, tmp_path: Path, env_of, check_first) -> dict[int, str]:
    cfg, ref, n = tiny

    def one(k: int) -> str:
        d = tmp_path / str(k)
        first = _first_run(cfg, d, env_of(k))
        problem = check_first(k, first)
        return problem or _outcome(cfg, ref, d / TRACE)

    points = _points(n)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(points, pool.map(one, points)))


def _assert_all_resumed(outcomes: dict[int, str]) -> None:
    bad = {k: v for k, v in outcomes.items() if not v.endswith("bit-exact")}
    assert not bad, f"{len(bad)} of {len(outcomes)} crash points did not continue bit-exactly: " + \
        "; ".join(f"event {k}: {v}" for k, v in list(bad.items())[:6])


def test_sigkill_before_every_write_then_resume_is_bit_exact(tiny, tmp_path):
    def killed(k, r):
        return None if r.returncode == -9 else f"event {k}: the run was not killed (exit {r.returncode})"

    outcomes = _sweep(tiny, tmp_path, lambda k: {"FP4D_FAULT_KILL_AT": str(k)}, killed)
    _assert_all_resumed(outcomes)
    # Every phase was hit: kills during creation (no trace yet: a plain run starts over) and
    # kills during the run (the trace resumes).
    kinds = {v.split(":")[0] for v in outcomes.values()}
    if len(outcomes) == tiny[2]:
        assert {"fresh", "resume"} <= kinds, kinds


def test_disk_full_from_every_write_then_resume_is_bit_exact(tiny, tmp_path):
    def full_disk(k, r):
        lines = r.stderr.strip().splitlines()
        if r.returncode == 0:
            return None  # the space ran out only after the last write that needed it
        if r.returncode != 1 or len(lines) != 1 or "no space left on device" not in lines[0]:
            return f"event {k}: a full disk gave exit {r.returncode} and {len(lines)} stderr lines: {lines[-3:]}"
        return None

    outcomes = _sweep(tiny, tmp_path, lambda k: {"FP4D_FAULT_ENOSPC_AT": str(k)}, full_disk)
    _assert_all_resumed(outcomes)
