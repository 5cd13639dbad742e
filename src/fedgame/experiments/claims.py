"""Claims between two sets of runs: "A's final accuracy is above B's", decided from per-seed
``summary.json`` files with a computed verdict, never typed.

The rule (:func:`decide`): seeds present in both sets are compared paired (the same seed gives
the same data split, draws and initial model), by a one-sided paired t-test with n − 1 degrees
of freedom; without two common seeds, by Welch's t-test with Welch–Satterthwaite degrees of
freedom. "holds" when the one-sided p of A > B is below 0.05, "fails" when that of B > A is,
otherwise "not decided"; always with the difference, its two-sided 95 % interval and p. One seed
decides nothing. Across the orderings one table claims, :func:`holm` adjusts the p-values
(Holm 1979) before the verdicts are read.

:func:`verdict` and :func:`ordering` are the earlier two-standard-error rule, which the paper
pages' generators still call until they are regenerated under :func:`decide`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from scipy import stats

from fedgame.pipeline.results import finished_runs

__all__ = ["ALPHA", "Decision", "Gap", "decide", "gap", "holm", "read_runs", "verdict"]

#: one-sided level of every ordering claim
ALPHA = 0.05


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
    """mean ± std of A and B, their difference with its standard error, the paired difference
    over common seeds with its standard error (and the earlier two-standard-error reading of it,
    ``paired_verdict``), and the verdict of the rule (:func:`decide`; ``verdict`` is its verdict)."""

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
    decision: Decision | None = None
    """The verdict by :func:`decide` (paired t over common seeds, else Welch), the rule."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self, a: str, b: str, *, scale: float = 100.0, unit: str = " points") -> str:
        """A two-row table and the claim line, accuracies in percent by default."""
        return "\n".join([
            "| runs | mean ± std | seeds |", "|---|---|---|",
            f"| {a} | {scale * self.a_mean:.2f} ± {scale * self.a_std:.2f} | {' '.join(map(str, self.a_seeds))} |",
            f"| {b} | {scale * self.b_mean:.2f} ± {scale * self.b_std:.2f} | {' '.join(map(str, self.b_seeds))} |",
            "",
            f"{a} > {b}: difference {self.decision.line(scale=scale, unit=unit, verdict=False) if self.decision else ''}: "
            f"**{self.verdict}** (one-sided test at p < {ALPHA}; 95 % interval in brackets).",
        ])


@dataclass(frozen=True)
class Decision:
    """The verdict on "A above B" (:func:`decide`): which test, the difference of means (paired:
    the mean difference over common seeds), its two-sided 95 % interval, the one-sided p of A > B
    and of B > A, and the verdict at :data:`ALPHA` (after Holm's adjustment where ``adjusted``)."""

    test: Literal["paired t", "Welch t", "none"]
    n_a: int
    n_b: int
    n_pairs: int
    diff: float
    ci_low: float
    ci_high: float
    t: float
    df: float
    p: float
    p_reverse: float
    verdict: str
    adjusted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self, *, scale: float = 1.0, unit: str = "", verdict: bool = True) -> str:
        """``+1.23 points [0.4, 2.1] (paired t, n = 5, df 4, p = 0.012): holds`` (without the
        verdict where ``verdict`` is False)."""
        if self.test == "none":
            return f"{scale * self.diff:+.2f}{unit}" + (f" ({self.verdict})" if verdict else "")
        p = f"p = {self.p:.3g}" + (" Holm-adjusted" if self.adjusted else "")
        n = f"n = {self.n_pairs}" if self.test == "paired t" else f"n = {self.n_a} and {self.n_b}"
        return (f"{scale * self.diff:+.2f}{unit} [{scale * self.ci_low:.2f}, {scale * self.ci_high:.2f}] "
                f"({self.test}, {n}, df {self.df:.3g}, {p})" + (f": {self.verdict}" if verdict else ""))


def _verdict_of(p: float, p_reverse: float, alpha: float = ALPHA) -> str:
    if p < alpha:
        return "holds"
    if p_reverse < alpha:
        return "fails"
    return "not decided"


def decide(a: dict[int, float], b: dict[int, float], *, alpha: float = ALPHA) -> Decision:
    """The claim mean(A) > mean(B) over per-seed values (see module docstring): paired over
    the common seeds where there are two or more, else Welch; "not decided (one seed)" where
    a side has a single value. A zero spread with a nonzero difference is decided (p = 0)."""
    common = sorted(set(a) & set(b))
    if len(common) >= 2:
        d = [a[s] - b[s] for s in common]
        n = len(d)
        m = sum(d) / n
        sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
        df, se, test = float(n - 1), sd / math.sqrt(n), "paired t"
        na, nb = len(a), len(b)
    else:
        xa, xb = list(a.values()), list(b.values())
        na, nb, n = len(xa), len(xb), 0
        if na < 2 or nb < 2:
            diff = (sum(xa) / na if na else math.nan) - (sum(xb) / nb if nb else math.nan)
            return Decision("none", na, nb, 0, diff, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan,
                            "not decided (one seed)")
        ma, sa, _ = _mean_se(xa)
        mb, sb, _ = _mean_se(xb)
        m = ma - mb
        va, vb = sa**2 / na, sb**2 / nb
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)) if se > 0 else float(na + nb - 2)
        test = "Welch t"
    if se > 0:
        t = m / se
        p, p_rev = float(stats.t.sf(t, df)), float(stats.t.cdf(t, df))
        half = float(stats.t.ppf(0.975, df)) * se
    else:  # every pair (or every value) equal: the sign of the difference decides, or nothing does
        t = math.copysign(math.inf, m) if m else math.nan
        p, p_rev = (0.0, 1.0) if m > 0 else (1.0, 0.0) if m < 0 else (math.nan, math.nan)
        half = 0.0
    return Decision(test, na, nb, n, m, m - half, m + half, t, df, p, p_rev, _verdict_of(p, p_rev, alpha))  # type: ignore[arg-type]


def holm(decisions: list[Decision], *, alpha: float = ALPHA) -> list[Decision]:
    """Holm's step-down adjustment of the one-sided p-values of the orderings one table claims
    (each direction adjusted over the m claims), verdicts re-read at ``alpha``; decisions that
    decide nothing (one seed) are left as they are and not counted."""
    live = [i for i, d in enumerate(decisions) if d.test != "none" and math.isfinite(d.p)]
    m = len(live)

    def adjusted(ps: list[float]) -> list[float]:
        order = sorted(range(m), key=lambda k: ps[k])
        out, run = [0.0] * m, 0.0
        for rank, k in enumerate(order):
            run = max(run, min(1.0, (m - rank) * ps[k]))
            out[k] = run
        return out

    p_adj = adjusted([decisions[i].p for i in live])
    r_adj = adjusted([decisions[i].p_reverse for i in live])
    out = list(decisions)
    for k, i in enumerate(live):
        d = decisions[i]
        out[i] = Decision(d.test, d.n_a, d.n_b, d.n_pairs, d.diff, d.ci_low, d.ci_high, d.t, d.df, p_adj[k], r_adj[k],
                          _verdict_of(p_adj[k], r_adj[k], alpha), adjusted=True)
    return out


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
    d = decide(a, b)
    return Gap(ma, sa, sorted(a), mb, sb, sorted(b), ma - mb, se, d.verdict, pm, pse,
               verdict(pm, pse) if common else "no common seeds", d)
