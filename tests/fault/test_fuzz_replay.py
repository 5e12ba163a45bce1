"""Replay of seeded fuzz corpora against the CLI: mutated config files (`run`), corrupted and
odd HDF5 inputs (`quantize --input`) and random argument lists (quantize, gemm, run, sweep,
bench, accumulator). Every corpus is generated here from fixed seeds, one `random.Random`
per case, so a case keeps its inputs when others are added and a failure names the case that
reproduces it (`pytest -k 'config and 17'`).

Whatever the input, the CLI's contract (docs/reliability.md) must hold: the exit status is
0, 1, 2 or 130 - never a signal, which is how a crash, an abort or a sanitizer report shows;
a failure says so in exactly one line, `fp4drift: error: ...`; a failed command leaves no
output file, partial file, checkpoint or journal behind; a successful one leaves a complete
trace. Every invocation is tiny (a few hundred elements, a few steps) and has a timeout: a
case that runs long is a failure too, since bad input must be refused before work starts."""
from __future__ import annotations

import functools
import os
import random
import resource
import re
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

import fault_common as fc

# Seconds per invocation. A tiny case takes well under a second (a few under the sanitizers);
# one that reaches this limit is working on something it should have refused.
TIMEOUT = 60

ALLOWED_EXIT = {0, 1, 2, 130}


def check_outcome(r: subprocess.CompletedProcess, outputs: list[Path], what: str) -> None:
    """The contract of one invocation: exit status, one-line error, no leftovers on failure."""
    lines = r.stderr.splitlines()
    ctx = f"{what}: exit {r.returncode}, stderr {lines[-6:]}"
    assert r.returncode in ALLOWED_EXIT, ctx
    if r.returncode == 0:
        return
    assert len(lines) == 1, ctx
    assert lines[0].startswith("fp4drift: error: "), ctx
    for out in outputs:
        for p in (out, *(out.with_name(out.name + s) for s in (".partial", ".ckpt", ".rows"))):
            assert not p.exists(), f"{ctx}: {p.name} left behind"


def invoke(args: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        return fc.run(args, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: still running after {TIMEOUT} s: {args}")


def assert_complete(path: Path, what: str) -> None:
    with h5py.File(path, "r") as f:
        assert f.attrs["status"] == "complete", what


# ---------------------------------------------------------------------------------------------
# a. Config mutations: `fp4drift run CFG --out OUT.h5 --json`

# Small versions of the three workloads (under a second each): every key a shipped config of
# that workload sets, with lengths and widths cut down.
BASE_CONFIGS = {
    "sum": """workload = "sum"

[sum]
terms = "constant"
c = 1.0
n = 300
format = "fp16"
rounding = "sr"
sr_bits = 0
runs = 4
seed = 1
""",
    "dot": """workload = "dot"

[dot]
terms = "uniform"
n = 128
format = "e4m3"
rounding = "sr"
sr_bits = 8
runs = 4
round_products = true
""",
    "mlp": """workload = "mlp"

[mlp]
widths = [16, 32, 16]   # input, hidden, output
activation = "relu"
batch = 16
seed = 1
teacher_width = 16
outlier_fraction = 0.02
outlier_scale = 20.0
optimizer = "sgd"
lr = 0.02
momentum = 0.9
schedule = "warmup-cosine"
warmup_steps = 2
steps = 4

[recipes]
names = ["nvfp4", "bf16"]
high_precision_layers = [0]
edge_recipe = "bf16"

[reference]
compare_every = 2

[trace]
every = 1
flush_every = 2
""",
}

# Values beyond every range a config key has (and a few that are not numbers TOML or the
# getters accept): each must be refused, not run, wrapped or truncated.
HUGE = ["9223372036854775807", "9223372036854775808", "18446744073709551616", "-9223372036854775808",
        "99999999999999999999999999", "1e308", "1.8e308", "-1e308", "1e-320", "4294967296", "17179869185"]
NEGATIVE = ["-1", "-0", "-16", "-0.5", "-2147483648"]
WRONG_TYPE = ['"16"', "true", "[1, 2]", "{a = 1}", "1979-05-27", "nan", "inf", "0x10", "0o7", "1_000", "[]",
              '""', "[[1]]", '["a", 1]', "16.0"]
CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\r", "\t", "\x1f"]
BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82", b"\x80"]
NUMBER = re.compile(rb"(?<![A-Za-z_\d.])-?\d+(\.\d+)?(e-?\d+)?")


def mutate_config(base: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One seeded mutation of a config's bytes: (a name for the report, the new bytes)."""
    b = bytearray(base)
    kind = rng.choice(["delete", "duplicate", "flip", "control", "nul", "utf8", "huge", "negative",
                       "wrong-type", "zero", "unknown-key", "truncate", "dup-section", "long-string",
                       "long-key", "dup-key", "no-newline", "crlf", "many"])
    pos = rng.randrange(len(b))
    if kind == "delete":
        del b[pos:pos + rng.randint(1, 4)]
    elif kind == "duplicate":
        b[pos:pos] = b[pos:pos + rng.randint(1, 8)]
    elif kind == "flip":
        b[pos] ^= 1 << rng.randrange(8)
    elif kind == "control":
        b[pos:pos] = rng.choice(CONTROL).encode()
    elif kind == "nul":
        b[pos:pos] = b"\x00" * rng.randint(1, 3)
    elif kind == "utf8":
        b[pos:pos] = rng.choice(BAD_UTF8)
    elif kind in ("huge", "negative", "wrong-type", "zero"):
        numbers = list(NUMBER.finditer(bytes(b)))
        m = rng.choice(numbers)
        new = {"huge": HUGE, "negative": NEGATIVE, "wrong-type": WRONG_TYPE, "zero": ["0", "0.0", "-0.0"]}[kind]
        b[m.start():m.end()] = rng.choice(new).encode()
    elif kind == "unknown-key":
        lines = bytes(b).split(b"\n")
        i = rng.randrange(len(lines) + 1)
        lines.insert(i, rng.choice([b"nn = 1", b"steps2 = 4", b"extra.key = \"x\"", b"Workload = \"sum\"", b"x = 1e999"]))
        b = bytearray(b"\n".join(lines))
    elif kind == "truncate":
        del b[pos:]
    elif kind == "dup-section":
        text = bytes(b)
        heads = [m.start() for m in re.finditer(rb"^\[", text, re.M)]
        if heads:
            start = rng.choice(heads)
            end = text.find(b"\n[", start + 1)
            section = text[start:] if end < 0 else text[start:end + 1]
            b = bytearray(text + b"\n" + section)
        else:
            b = bytearray(text + b"\n" + text)
    elif kind == "long-string":
        numbers = list(NUMBER.finditer(bytes(b)))
        m = rng.choice(numbers)
        b[m.start():m.end()] = b'"' + b"A" * rng.choice([1000, 100_000, 900_000]) + b'"'
    elif kind == "long-key":
        b[0:0] = b"k" * rng.choice([300, 70_000]) + b" = 1\n"
    elif kind == "dup-key":
        lines = bytes(b).split(b"\n")
        keyed = [i for i, ln in enumerate(lines) if b"=" in ln]
        i = rng.choice(keyed)
        lines.insert(i + 1, lines[i])
        b = bytearray(b"\n".join(lines))
    elif kind == "no-newline":
        b = bytearray(bytes(b).replace(b"\n", b" ", rng.randint(1, 6)))
    elif kind == "crlf":
        b = bytearray(bytes(b).replace(b"\n", b"\r\n"))
    else:  # many: five byte-level edits at once
        for _ in range(5):
            p = rng.randrange(len(b))
            op = rng.randrange(3)
            if op == 0:
                b[p] = rng.randrange(256)
            elif op == 1:
                del b[p]
            else:
                b[p:p] = bytes([rng.randrange(256)])
    return kind, bytes(b)


CONFIG_CASES = 300


@pytest.mark.parametrize("case", range(CONFIG_CASES))
def test_config_mutation(case, tmp_path):
    rng = random.Random(1000 + case)
    workload = ("sum", "dot", "mlp")[case % 3]
    kind, text = mutate_config(BASE_CONFIGS[workload].encode(), rng)
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(text)
    out = tmp_path / "o.h5"
    what = f"config case {case} ({workload}, {kind})"
    r = invoke(["run", str(cfg), "--out", str(out), "--json"], what)
    check_outcome(r, [out], what)
    if r.returncode == 0:
        assert_complete(out, what)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "o.h5"], what


@pytest.mark.parametrize("workload", sorted(BASE_CONFIGS))
def test_config_bases_run(workload, tmp_path):
    """The unmutated bases succeed: otherwise every mutation would be refused for the base's
    fault and the corpus would test nothing."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE_CONFIGS[workload])
    out = tmp_path / "o.h5"
    r = invoke(["run", str(cfg), "--out", str(out), "--json"], workload)
    assert r.returncode == 0, r.stderr
    assert_complete(out, workload)


# ---------------------------------------------------------------------------------------------
# b. HDF5 inputs: `fp4drift quantize --input f.h5:/x --recipe nvfp4 --out q.h5 --json`

H5_OPTS = dict(libver=("earliest", "v108"), track_order=False)


def _valid_input(path: Path, data: np.ndarray | None = None, **dataset_kwargs) -> None:
    with h5py.File(path, "w", **H5_OPTS) as f:
        f.create_dataset("x", data=np.random.default_rng(7).standard_normal((64, 64)).astype(np.float32)
                         if data is None else data, track_times=False, **dataset_kwargs)


def make_h5_case(case: int, path: Path) -> tuple[str, list[str]]:
    """Writes case `case`'s input to `path`: (a name for the report, extra quantize options)."""
    rng = random.Random(2000 + case)
    kind = rng.choice(["truncate", "flip", "flip-many", "zero-range", "dtype", "rank", "nonfinite",
                       "nonfinite-allowed", "empty", "string", "huge-dims", "not-dataset", "filters",
                       "odd-file", "chunked-flip"])
    extra: list[str] = []
    good = np.random.default_rng(case).standard_normal((64, 64)).astype(np.float32)
    if kind in ("truncate", "flip", "flip-many", "zero-range"):
        _valid_input(path, good)
        b = bytearray(path.read_bytes())
        if kind == "truncate":
            del b[rng.randrange(len(b)):]
        elif kind == "flip":
            p = rng.randrange(len(b))
            b[p] ^= 1 << rng.randrange(8)
        elif kind == "flip-many":
            for _ in range(rng.randint(2, 32)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        else:
            p = rng.randrange(len(b))
            b[p:p + rng.randint(1, 512)] = bytes(len(b[p:p + rng.randint(1, 512)]))
        path.write_bytes(bytes(b))
    elif kind == "chunked-flip":
        # Chunked and checksummed: a flip in the data must be caught by the filter, a flip in
        # the B-tree or object headers by the library; in the raw data alone it just changes a
        # value (a valid run).
        _valid_input(path, good, chunks=(16, 16), compression=rng.choice(["gzip", None]), fletcher32=rng.random() < 0.5,
                     shuffle=rng.random() < 0.5)
        b = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(b))
    elif kind == "dtype":
        dt = rng.choice(["i1", "u1", "i4", "u8", "f2", ">f4", ">f8", "c8", "?", "V4", "f16"])
        with h5py.File(path, "w", **H5_OPTS) as f:
            if dt == "V4":
                f.create_dataset("x", data=np.zeros((64, 64), dtype=[("a", "<f4")]), track_times=False)
            elif dt == "f16":
                f.create_dataset("x", data=good.astype(np.longdouble), track_times=False)
            else:
                f.create_dataset("x", data=(good * 10).astype(dt), track_times=False)
    elif kind == "rank":
        shape = rng.choice([(), (64,), (4, 4, 4), (2, 2, 2, 2), (1, 64), (64, 1), (1,), (3, 5), (16, 16, 16)])
        _valid_input(path, np.ones(shape, dtype=np.float32) if shape else np.float32(1.5))
    elif kind in ("nonfinite", "nonfinite-allowed"):
        x = good.copy()
        for _ in range(rng.randint(1, 8)):
            x[rng.randrange(64), rng.randrange(64)] = rng.choice([np.nan, np.inf, -np.inf])
        _valid_input(path, x)
        if kind == "nonfinite-allowed":
            extra = ["--allow-nonfinite"]
    elif kind == "empty":
        with h5py.File(path, "w", **H5_OPTS) as f:
            choice = rng.randrange(4)
            if choice == 0:
                f.create_dataset("x", data=h5py.Empty("f4"), track_times=False)
            elif choice == 1:
                f.create_dataset("x", shape=(0, 64), dtype="f4", track_times=False)
            elif choice == 2:
                f.create_dataset("x", shape=(0,), dtype="f4", maxshape=(None,), track_times=False)
            else:
                f.create_dataset("x", shape=(64, 0), dtype="f8", track_times=False)
    elif kind == "string":
        with h5py.File(path, "w", **H5_OPTS) as f:
            if rng.random() < 0.5:
                f.create_dataset("x", data=np.array([[b"abc"] * 4] * 4, dtype="S3"), track_times=False)
            else:
                f.create_dataset("x", data=["a", "bb", "ccc"], dtype=h5py.string_dtype(), track_times=False)
    elif kind == "huge-dims":
        # Declared sizes the file never stores (chunked, unwritten: the fill value): the
        # reader must refuse them from the shape, before allocating.
        shape = rng.choice([(1 << 20, 1 << 20), (1 << 31, 1 << 31), (100_000, 100_000), (1 << 40,), (1 << 62, 4),
                            (2**63 - 1,), (3, 1 << 41)])
        with h5py.File(path, "w", **H5_OPTS) as f:
            f.create_dataset("x", shape=shape, dtype="f4", chunks=tuple(min(s, 64) for s in shape),
                             maxshape=tuple(None for _ in shape), track_times=False)
    elif kind == "not-dataset":
        with h5py.File(path, "w", **H5_OPTS) as f:
            choice = rng.randrange(5)
            if choice == 0:
                f.create_group("x")
            elif choice == 1:
                f["x"] = h5py.SoftLink("/nowhere")
            elif choice == 2:
                f["x"] = h5py.ExternalLink("missing.h5", "/x")
            elif choice == 3:
                f.create_dataset("y", data=good, track_times=False)  # /x missing
            else:
                f["x"] = h5py.SoftLink("/x")  # a link to itself
    elif kind == "filters":
        with h5py.File(path, "w", **H5_OPTS) as f:
            choice = rng.randrange(3)
            if choice == 0:
                # lzf is h5py's own filter: the HDF5 C library cannot decode it.
                f.create_dataset("x", data=good, chunks=(16, 16), compression="lzf", track_times=False)
            elif choice == 1:
                # Raw data in an external file that does not exist.
                f.create_dataset("x", shape=(64, 64), dtype="f4", external=[(str(path) + ".raw", 0, 64 * 64 * 4)],
                                 track_times=False)
            else:
                # Raw data in an external file that is too short.
                raw = Path(str(path) + ".raw")
                raw.write_bytes(b"\x00" * 100)
                f.create_dataset("x", shape=(64, 64), dtype="f4", external=[(str(raw), 0, 64 * 64 * 4)],
                                 track_times=False)
    else:  # odd-file: not HDF5 at all
        choice = rng.randrange(4)
        if choice == 0:
            path.write_bytes(b"")
        elif choice == 1:
            path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096))))
        elif choice == 2:
            path.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * rng.randint(0, 200))
        else:
            path.mkdir()
    return kind, extra


H5_CASES = 150


@pytest.mark.parametrize("case", range(H5_CASES))
def test_hdf5_input(case, tmp_path):
    src = tmp_path / "f.h5"
    kind, extra = make_h5_case(case, src)
    out = tmp_path / "q.h5"
    what = f"hdf5 case {case} ({kind})"
    r = invoke(["quantize", "--input", f"{src}:/x", "--recipe", "nvfp4", "--out", str(out), "--json", *extra], what)
    check_outcome(r, [out], what)
    if kind == "nonfinite":
        assert r.returncode == 2, f"{what}: a non-finite input was not refused ({r.returncode})"
    if kind == "nonfinite-allowed":
        assert r.returncode == 0, f"{what}: {r.stderr}"
    if r.returncode == 0:
        assert_complete(out, what)


def test_hdf5_valid_input_quantizes(tmp_path):
    """The uncorrupted input succeeds, so that the corruptions are what the refusals are about."""
    src = tmp_path / "f.h5"
    _valid_input(src)
    out = tmp_path / "q.h5"
    r = invoke(["quantize", "--input", f"{src}:/x", "--recipe", "nvfp4", "--out", str(out), "--json"], "valid")
    assert r.returncode == 0, r.stderr
    assert_complete(out, "valid")


# ---------------------------------------------------------------------------------------------
# c. Argument lists: quantize, gemm, run, sweep, bench, accumulator

# What each subcommand's case starts from: a valid, tiny invocation ({d} is the case's
# directory). The random options below are added to it or replace parts of it.
CLI_BASE = {
    "quantize": ["quantize", "--generate", "normal", "--shape", "16x32", "--recipe", "nvfp4", "--out", "{d}/q.h5"],
    "gemm": ["gemm", "--m", "16", "--n", "16", "--k", "32", "--recipe", "nvfp4", "--out", "{d}/g.h5"],
    "run": ["run", "{d}/sum.toml", "--out", "{d}/r.h5"],
    "sweep": ["sweep", "{d}/sweep.toml", "--dry-run", "--out", "{d}/sw"],
    # bench runs only with refused values or a benchmark that has nothing to run here: a
    # valid CPU benchmark takes seconds to minutes by design (best of several repetitions of
    # 2^24 elements), which is not what this replay is about.
    "bench": ["bench"],
    # Without a GPU (or a CUDA build) every accumulator invocation must be refused cleanly.
    "accumulator": ["accumulator"],
}

SUM_CFG = 'workload = "sum"\n\n[sum]\nterms = "constant"\nc = 1.0\nn = 64\nformat = "fp16"\nrounding = "rne"\n'
SWEEP_CFG = 'base = "sum.toml"\nworkers = 1\n\n[grid.sum]\nn = [32, 64]\n'

BAD_VALUES = ["-1", "0", "-0", "1e9", "99999999999", "4294967296", "9223372036854775807", "18446744073709551616",
              "-18446744073709551617", "abc", "", " ", "1.5", "0x10", "nan", "inf", "--", "-", "16x", "x16",
              "0x0", "16x16x16", "99999999x99999999", "1,2,,3", "\u00e9", "a\tb", "%s%n", "../../etc/passwd",
              "/dev/zero", "/nonexistent/dir/f.h5:/x", "f.h5:", ":/x", "all,all", "nvfp4,bogus", "1e-300",
              "-2147483649", "2147483648", "4096x4096x0", "A" * 5000]


@functools.lru_cache(maxsize=None)
def options_of(sub: str) -> tuple[tuple[str, bool], ...]:
    """(long option, takes a value) for every option of `fp4drift SUB --help`."""
    r = fc.run([sub, "--help"])
    assert r.returncode == 0, r.stderr
    found = []
    for line in r.stdout.splitlines():
        m = re.match(r"\s+(?:-\w,)?(--[\w-]+)(\s+\S+)?", line)
        if m and m.group(1) != "--help":
            found.append((m.group(1), m.group(2) is not None))
    assert found, r.stdout
    return tuple(found)


# bench cases that would benchmark for real (seconds to minutes each, by design): the
# replay gives bench only values that must be refused or a benchmark that needs a GPU. An
# option whose value parses and is in range would start a long benchmark, so bench cases
# whose every random value is valid are replaced by a refused one (see cli_case).
BENCH_LONG = {"quantize", "gemm-ref", "mlp-ref"}


def cli_case(case: int, d: Path) -> tuple[str, list[str]]:
    rng = random.Random(3000 + case)
    sub = ["quantize", "gemm", "run", "sweep", "bench", "accumulator"][case % 6]
    args = [a.format(d=d) for a in CLI_BASE[sub]]
    opts = options_of(sub)
    kind = rng.choice(["bad-value", "bad-value", "bad-value", "repeat", "unknown", "missing-value", "positional",
                       "subcommand", "many"])
    if kind == "bad-value" or kind == "many":
        for _ in range(1 if kind == "bad-value" else rng.randint(2, 5)):
            name, takes = rng.choice(opts)
            args += [name, rng.choice(BAD_VALUES)] if takes else [name, rng.choice(BAD_VALUES)]
    elif kind == "repeat":
        name, takes = rng.choice(opts)
        for _ in range(rng.randint(2, 3)):
            args += [name, rng.choice(BAD_VALUES + ["16", "1"])] if takes else [name]
    elif kind == "unknown":
        args.insert(rng.randint(1, len(args)), rng.choice(["--bogus", "--m=", "-z", "--out=", "---", "--shape=1x",
                                                           "--recipe=", "--json=1", "--help-me", "-"]))
    elif kind == "missing-value":
        takes_value = [n for n, t in opts if t] or [opts[0][0]]
        args.append(rng.choice(takes_value))
    elif kind == "positional":
        args.insert(1, rng.choice(["extra", "", "-", "/dev/null", "/dev/zero", str(d), "nonexistent.toml"]))
    else:  # subcommand: misspelt, empty or repeated
        args[0] = rng.choice(["quantise", "Quantize", "gem", "runn", "", "sweep sweep", "bench-", "accumulators",
                              "--quantize", "quantize quantize"])
    if sub == "bench":
        # Keep bench from benchmarking: a benchmark name that needs a GPU (refused here), or
        # an option value that every bench refuses.
        args.insert(1, rng.choice(["quantize-cuda", "gemm-cuda", "mlp-cuda", "quantize-dual-cuda", "bogus", ""]))
    return f"{sub}/{kind}", args


CLI_CASES = 200


@functools.lru_cache(maxsize=None)
def cuda_usable() -> bool:
    """Whether this build has a CUDA device to use: there, accumulator and the CUDA benchmarks
    would measure for real instead of refusing, which this replay does not want to wait for."""
    return fc.run(["quantize", "--generate", "normal", "--shape", "16x16", "--recipe", "nvfp4", "--backend", "cuda"]).returncode == 0


@pytest.mark.parametrize("case", range(CLI_CASES))
def test_cli_arguments(case, tmp_path, monkeypatch):
    # Relative output paths (a value such as "abc" given to --out) land in the case's directory.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sum.toml").write_text(SUM_CFG)
    (tmp_path / "sweep.toml").write_text(SWEEP_CFG)
    kind, args = cli_case(case, tmp_path)
    if kind.startswith(("bench", "accumulator")) and cuda_usable():
        pytest.skip("a usable CUDA device: bench and accumulator would run instead of refusing")
    what = f"cli case {case} ({kind}) {args}"
    r = invoke(args, what)
    check_outcome(r, [], what)
    left = [p.name for p in tmp_path.rglob("*.partial")]
    assert not left, f"{what}: {left} left behind"
    if kind.startswith("accumulator"):
        assert r.returncode != 0, f"{what}: accumulator ran without a GPU"


@pytest.mark.parametrize("sub", sorted(CLI_BASE))
def test_cli_bases(sub, tmp_path, monkeypatch):
    """The valid starting points: they succeed (accumulator and bench, which only refuse
    here, aside), so that what the random options add is what a refusal is about."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sum.toml").write_text(SUM_CFG)
    (tmp_path / "sweep.toml").write_text(SWEEP_CFG)
    args = [a.format(d=tmp_path) for a in CLI_BASE[sub]]
    if sub in ("bench", "accumulator"):
        pytest.skip("no valid invocation that is both quick and needs no GPU")
    r = invoke(args, sub)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------------------
# Regressions of defects the replay found


def _bounded(args: list[str]) -> subprocess.CompletedProcess:
    """fp4drift with at most 2 GiB of address space, where that can be set (not under ASan,
    which reserves terabytes): a regression that reads without bound then fails quickly
    with an out-of-memory error instead of filling the machine's memory."""
    limit = None if fc.asan_runtime() else 2 << 30

    def cap():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        return subprocess.run([fc.EXE, *args], capture_output=True, text=True, env=env, timeout=TIMEOUT, preexec_fn=cap)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {TIMEOUT} s: {args}")


@pytest.mark.parametrize("which", ["sweep", "base"])
def test_sweep_file_is_read_with_the_config_cap(which, tmp_path):
    """A sweep file, or the base config it names, that is endless (/dev/zero) or larger than a
    config may be is refused at once with one line, not read into memory without bound."""
    if which == "sweep":
        sweep = "/dev/zero"
    else:
        (tmp_path / "s.toml").write_text('base = "/dev/zero"\n[grid.sum]\nn = [1]\n')
        sweep = str(tmp_path / "s.toml")
    r = _bounded(["sweep", sweep, "--dry-run", "--out", str(tmp_path / "o")])
    check_outcome(r, [], which)
    assert r.returncode == 2 and "larger than the 1 MiB" in r.stderr, r.stderr
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * (1 << 20) + b"\nbase = \"s.toml\"\n")
    r = _bounded(["sweep", str(big), "--dry-run", "--out", str(tmp_path / "o")])
    check_outcome(r, [], which)
    assert r.returncode == 2 and "larger than the 1 MiB" in r.stderr, r.stderr


def test_sweep_file_name_stays_on_one_line(tmp_path):
    """A newline in the sweep file's name is shown escaped: the error stays one line."""
    d = tmp_path / "a\nb"
    d.mkdir()
    r = invoke(["sweep", str(d / "missing.toml"), "--dry-run"], "newline")
    check_outcome(r, [], "newline")
    assert r.returncode == 2 and "a\\x0Ab" in r.stderr, r.stderr
