"""Writes docs-bytes.h5: the bytes of fp4drift's own documentation as a token corpus.

A byte-level tokenization (vocab 256, ids = UTF-8 bytes, stored as uint16 in /train) of the
Markdown files under docs/ in sorted order, each followed by a newline: real English text with
code and tables, small enough to ship and with no download. `fp4drift run` reads it with
`[data] source = "data/tokens/docs-bytes.h5"` (lm workload, vocab 256).

    python data/tokens/make_docs_bytes.py            # from the repository root
"""
from pathlib import Path

import h5py
import numpy as np

root = Path(__file__).resolve().parents[2]
text = b"".join(p.read_bytes() + b"\n" for p in sorted((root / "docs").glob("*.md")))
ids = np.frombuffer(text, dtype=np.uint8).astype(np.uint16)
out = Path(__file__).with_name("docs-bytes.h5")
with h5py.File(out, "w") as f:
    d = f.create_dataset("train", data=ids, compression="gzip", compression_opts=9, chunks=True)
    d.attrs["tokenizer"] = "utf-8 bytes"
    d.attrs["vocab"] = 256
    d.attrs["source"] = "docs/*.md of fp4drift, sorted, each followed by a newline"
print(f"{out}: {ids.size} tokens")
