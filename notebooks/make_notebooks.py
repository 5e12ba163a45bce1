"""Generate the notebooks (NN-*.ipynb) from their sources in notebooks/src/NN-*.py.

The sources are plain Python in the "percent" cell format: a line `# %%` starts a code cell,
`# %% [markdown]` a markdown cell whose lines are comments (`# ` is stripped). Editing a
source and re-running this script keeps the committed notebooks free of outputs and their
diffs readable; tests/python/test_notebooks.py checks that the two agree.

    .venv/bin/python notebooks/make_notebooks.py          # (re)write the notebooks
    .venv/bin/python notebooks/make_notebooks.py --check  # exit 1 if any is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent


def cells_of(source: str) -> list:
    cells, kind, lines = [], None, []

    def flush():
        if kind is None:
            return
        text = "\n".join(lines).strip("\n")
        if not text:
            return
        if kind == "markdown":
            md = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in text.split("\n")]
            cells.append(nbformat.v4.new_markdown_cell("\n".join(md)))
        else:
            cells.append(nbformat.v4.new_code_cell(text))

    for line in source.split("\n"):
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind is not None:
            lines.append(line)
    flush()
    return cells


def build(src: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells_of(src.read_text())
    for i, c in enumerate(nb.cells):  # stable ids: regenerating gives identical files
        c["id"] = f"{src.stem[:2]}-{i:02d}"
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    return nb


def targets() -> list:
    return [(src, HERE / f"{src.stem}.ipynb") for src in sorted((HERE / "src").glob("[0-9][0-9]-*.py"))]


def main(argv: list) -> int:
    check = "--check" in argv
    stale = []
    for src, dst in targets():
        text = nbformat.writes(build(src)) + "\n"
        if check:
            if not dst.exists() or dst.read_text() != text:
                stale.append(dst.name)
        else:
            dst.write_text(text)
            print(f"wrote {dst.relative_to(HERE.parent)}")
    if stale:
        print("out of date (run notebooks/make_notebooks.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
