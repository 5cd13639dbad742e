"""A dataset plug-in in one file (docs/your_data.md): short texts in JSON lines, as token ids.

Each line of the file is one example, ``{"text": "...", "label": "...", "speaker": "..."}``.
The plug-in lower-cases and splits each text on whitespace, numbers the words of the
*training* split by frequency (ties alphabetically; 0 is padding, 1 any word the training split
has not seen), cuts or pads every text to ``length`` ids, and keeps the speaker as the group
a natural partition makes its clients of. Load it with ``--plugin``::

    fedgame run docs/examples/your_data/text_phs.yaml --plugin docs/examples/your_data/jsonl_texts.py \\
        --set data.root=DIR
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from fedgame.data import DATASETS, Dataset, DatasetConfig, DatasetSplit, split_from_arrays

PAD, UNKNOWN = 0, 1


@DATASETS.register("jsonl_texts")
class JSONLTexts(Dataset):
    """Short texts in JSON lines (text, label, speaker), as token ids of a training-split vocabulary."""

    class Config(DatasetConfig):
        kind: Literal["jsonl_texts"] = "jsonl_texts"
        train: str = "train.jsonl"
        test: str = "test.jsonl"
        length: int = Field(32, ge=1, le=4096)
        vocab: int = Field(5000, ge=3)

    cfg: Config

    def _lines(self, name: str, root: str | None) -> list[dict[str, str]]:
        path = Path(root or ".") / name
        if not path.is_file():
            raise FileNotFoundError(f"data.options: no such file {str(path)!r} (the options' train/test, under data.root)")
        rows = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if line.strip():
                row = json.loads(line)
                missing = {"text", "label", "speaker"} - set(row)
                if missing:
                    raise ValueError(f"data.options: {path} line {i + 1} lacks {', '.join(sorted(missing))}")
                rows.append(row)
        return rows

    def load(self, *, root: str | None = None, max_train: int | None = None, max_test: int | None = None) -> DatasetSplit:
        train, test = self._lines(self.cfg.train, root)[:max_train], self._lines(self.cfg.test, root)[:max_test]
        counts = Counter(w for r in train for w in r["text"].lower().split())
        words = sorted(counts, key=lambda w: (-counts[w], w))[: self.cfg.vocab - 2]
        ids = {w: i + 2 for i, w in enumerate(words)}

        def encode(rows: list[dict[str, str]]) -> np.ndarray:
            out = np.full((len(rows), self.cfg.length), PAD, dtype=np.int64)
            for j, r in enumerate(rows):
                seq = [ids.get(w, UNKNOWN) for w in r["text"].lower().split()][: self.cfg.length]
                out[j, : len(seq)] = seq
            return out

        labels = sorted({r["label"] for r in train + test})
        code = {lab: i for i, lab in enumerate(labels)}
        return split_from_arrays(
            train_x=encode(train),
            train_y=[code[r["label"]] for r in train],
            test_x=encode(test),
            test_y=[code[r["label"]] for r in test],
            name="jsonl_texts",
            classes=len(labels),
            groups={"speaker": [r["speaker"] for r in train]},
        )
