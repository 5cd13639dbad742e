"""Claims between two sets of runs: "A's final accuracy is above B's", decided from per-seed
``summary.json`` files with a computed verdict, never typed.

A verdict is ``holds`` when mean(A) > mean(B) by at least two standard errors of the
difference, ``within two standard errors`` when the gap is smaller than that, and ``fails`` when
B is above A by two standard errors or more. Seeds present in both sets are also compared
pairwise (the same seed gives the same data split, draws and initial model), which is the
sharper test when runs share their randomness.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedgame.pipeline.results import finished_runs

__all__ = ["Gap", "gap", "read_runs", "verdict"]


def read_runs(folder: str | Path, key: str = "final_accuracy") -> dict[int, float]:
    """``{seed: summary[key]}`` of every finished fedgame run (a ``summary.json`` with a seed)
    under ``folder``. Two runs with the same seed mean the folder holds more than one cell:
    refused, naming both, rather than one silently replacing the other."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"runs: not a folder: {folder}")
    out: dict[int, float] = {}
    where: dict[int, Path] = {}
    for run in finished_runs(root, with_config=False):
        s = run.summary
        if "seed" not in s or s.get(key) is None:
            continue
        seed = int(s["seed"])
        if seed in out:
            raise ValueError(f"runs: two runs with seed {seed} under {folder} ({where[seed]} and {run.dir}); "
                             "point at one cell's folder")
        out[seed], where[seed] = float(s[key]), run.dir
    if not out:
        raise ValueError(f"runs: no summary.json with {key!r} under {folder}")
    return out


def _mean_se(xs: list[float]) -> tuple[float, float, float]:
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else math.nan
    return m, sd, sd / math.sqrt(n) if n > 1 else math.nan


def verdict(diff: float, se: float) -> str:
    """``holds`` (diff ≥ 2 se), ``fails`` (diff ≤ −2 se) or ``within two standard errors``."""
    if not math.isfinite(se):
        return "holds (one seed, no error bar)" if diff > 0 else "fails (one seed, no error bar)"
    if diff >= 2 * se:
        return "holds"
    if diff <= -2 * se:
        return "fails"
    return "within two standard errors"


def ordering(a_mean: float, a_std: float, a_n: int, b_mean: float, b_std: float, b_n: int) -> str:
    """The verdict on "A above B" from two cells' mean ± sample std over their seeds: the
    difference against the standard error of the difference, √(s_A²/n_A + s_B²/n_B)."""
    se = math.sqrt(a_std**2 / a_n + b_std**2 / b_n) if a_n > 1 and b_n > 1 else math.nan
    return verdict(a_mean - b_mean, se)


@dataclass(frozen=True)
class Gap:
    """mean ± std of A and B, their difference with its standard error and verdict, and the
    paired difference over common seeds with its own."""

    a_mean: float
    a_std: float
    a_seeds: list[int]
    b_mean: float
    b_std: float
    b_seeds: list[int]
    diff: float
    se: float
    verdict: str
    paired_diff: float
    paired_se: float
    paired_verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self, a: str, b: str, *, scale: float = 100.0, unit: str = " points") -> str:
        """A two-row table and the claim line, accuracies in percent by default."""
        return "\n".join([
            "| runs | mean ± std | seeds |", "|---|---|---|",
            f"| {a} | {scale * self.a_mean:.2f} ± {scale * self.a_std:.2f} | {' '.join(map(str, self.a_seeds))} |",
            f"| {b} | {scale * self.b_mean:.2f} ± {scale * self.b_std:.2f} | {' '.join(map(str, self.b_seeds))} |",
            "",
            f"{a} > {b}: difference {scale * self.diff:+.2f}{unit} (standard error {scale * self.se:.2f}): **{self.verdict}**; "
            f"paired over common seeds {scale * self.paired_diff:+.2f}{unit} (standard error {scale * self.paired_se:.2f}): "
            f"**{self.paired_verdict}**.",
        ])


def gap(a: dict[int, float], b: dict[int, float]) -> Gap:
    """The claim mean(A) > mean(B) over per-seed values ``a`` and ``b``."""
    ma, sa, ea = _mean_se(list(a.values()))
    mb, sb, eb = _mean_se(list(b.values()))
    se = math.sqrt(ea**2 + eb**2)
    common = sorted(set(a) & set(b))
    if common:
        pm, _, pse = _mean_se([a[s] - b[s] for s in common])
    else:
        pm, pse = math.nan, math.nan
    return Gap(ma, sa, sorted(a), mb, sb, sorted(b), ma - mb, se, verdict(ma - mb, se), pm, pse,
               verdict(pm, pse) if common else "no common seeds")
