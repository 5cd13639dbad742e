"""docs/api.md's example runs as written (from the repository root, as the page says)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


@pytest.mark.skipif(not FMNIST.exists(), reason="needs Debian's dataset-fashion-mnist")
def test_api_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/api.md", "exec"), {"__name__": "__docs__"})
    printed = capsys.readouterr().out
    assert "final accuracy" in printed and "client 0 spent epsilon" in printed and "mean field phi(t)" in printed
