"""scripts/ncu-hotspots reads Nsight Compute's source-page CSV on the GPU machine, where a
mistake costs device time; here it reads a hand-made CSV of the same layout (a 'Kernel Name'
row, a header, one row per SASS instruction, numbers with thousands separators) whose sums are
known, and refuses files that are not such an export."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ncu-hotspots"

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
          "Thread Instructions Executed", "stall_barrier", "stall_long_sb", "stall_math", "stall_selected",
          "stall_long_sb (Not Issued)"]
# Four instructions: 3,000 + 1,000 + 2,000 + 2,000 = 8,000 warp instructions, of which the
# predicated IMAD ran on 8 lanes: 96,000 + 8,000 + 64,000 + 64,000 = 232,000 thread
# instructions. Stall samples: barrier 60, long_sb 30, math 10; "selected" (the warp issued) and
# the "Not Issued" subset must not count as waits.
ROWS = [
    ["0x10", "      IMAD.MOV.U32 R1, RZ, RZ, RZ", "15", "3,000", "96,000", "0", "0", "10", "5", "0"],
    ["0x20", "@P0   IMAD R2, R3, 0x10, R4", "0", "1,000", "8,000", "0", "0", "0", "0", "0"],
    ["0x30", "      BAR.SYNC.DEFER_BLOCKING 0x0", "60", "2,000", "64,000", "60", "0", "0", "0", "0"],
    ["0x40", "      FFMA R5, R6, R7, R8", "70", "2,000", "64,000", "0", "30", "0", "40", "25"],
]


def write_csv(path: Path, rows=ROWS, header=HEADER) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "void k<float>(const float *)"])
        w.writerow(header)
        w.writerows(rows)
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_sums_families_stalls_and_hotspots(tmp_path):
    r = run(str(write_csv(tmp_path / "k.csv")), "--elements", "1024", "--top", "3")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "executed: 8,000 warp instructions, 226.6 thread instructions per element\n" in out
    # IMAD.MOV and predicated IMAD are one family: 4,000 of 8,000 warp instructions, 104,000
    # thread instructions (101.56 per element).
    fams = {line.split()[0]: line.split()[1:] for line in
            out.split("opcode families")[1].split("stall reasons")[0].splitlines()[1:]}
    assert fams == {"IMAD": ["50.0%", "101.56"], "BAR": ["25.0%", "62.50"], "FFMA": ["25.0%", "62.50"]}
    assert "selected" not in out.split("stall reasons")[1].split("instructions where")[0]
    assert "  barrier             60.0%" in out and "  long_sb             30.0%" in out
    hot = out.split("instructions where warps waited most")[1].splitlines()[1:]
    assert hot[0].split()[:2] == ["60.0%", "barrier"] and "BAR.SYNC" in hot[0]
    assert hot[1].split()[:2] == ["30.0%", "long_sb"] and "FFMA" in hot[1]
    assert hot[2].split()[:2] == ["10.0%", "math"] and "IMAD.MOV" in hot[2]


def test_without_elements_there_is_no_per_element_column(tmp_path):
    r = run(str(write_csv(tmp_path / "k.csv")))
    assert r.returncode == 0, r.stderr
    assert "per element" not in r.stdout
    fams = r.stdout.split("opcode families")[1].split("stall reasons")[0].splitlines()[1:]
    assert [line.split() for line in fams][0] == ["IMAD", "50.0%"]


def test_without_thread_counts_each_warp_instruction_counts_32(tmp_path):
    keep = [i for i, h in enumerate(HEADER) if h != "Thread Instructions Executed"]
    path = write_csv(tmp_path / "k.csv", [[row[i] for i in keep] for row in ROWS], [HEADER[i] for i in keep])
    r = run(str(path), "--elements", "1024")
    assert r.returncode == 0, r.stderr
    assert "250.0 thread instructions per element (32 per warp instruction" in r.stdout


def test_refuses_what_is_not_a_source_export(tmp_path):
    plain = tmp_path / "details.txt"
    plain.write_text("  Section: GPU Speed Of Light Throughput\n")
    r = run(str(plain))
    assert r.returncode != 0 and "no kernel's source counters" in r.stderr
    no_counts = write_csv(tmp_path / "nocount.csv", [row[:3] for row in ROWS], HEADER[:3])
    r = run(str(no_counts))
    assert r.returncode != 0 and "Instructions Executed" in r.stderr
