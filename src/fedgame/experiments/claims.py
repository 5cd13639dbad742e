"""Claims between two sets of runs: "A's final accuracy is above B's", decided from per-seed
``summary.json`` files with a computed verdict, never typed.

The rule (:func:`decide`): seeds present in both sets are compared paired (the same seed gives
the same data split, draws and initial model), by a one-sided paired t-test with n − 1 degrees
of freedom; without two common seeds, by Welch's t-test with Welch–Satterthwaite degrees of
freedom. "holds" when the one-sided p of A > B is below 0.05, "fails" when that of B > A is,
otherwise "not decided"; always with the difference, its two-sided 95 % interval and p. One seed
decides nothing. Across the orderings one table claims, :func:`holm` adjusts the p-values
(Holm 1979) before the verdicts are read. Every page that decides an ordering (the paper
tables, figure pages, the reproduction page and ``fedgame claim``) decides it by this rule, on
per-seed values, and prints it with :meth:`Decision.line` or :meth:`Decision.cells` and
:func:`rule_note`; a claim that needs several orderings at once is read by :func:`all_hold`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from scipy import stats

from fedgame.pipeline.results import finished_runs
from fedgame.pipeline.store import atomic_write_text

__all__ = [
    "ALPHA",
    "COLUMNS",
    "ORDERINGS",
    "Decision",
    "Gap",
    "all_hold",
    "decide",
    "gap",
    "holm",
    "read_orderings",
    "read_runs",
    "rule_note",
    "write_orderings",
]

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
            raise ValueError(f"runs: two runs with seed {seed} under {folder} ({where[seed]} and {run.dir}); point at one cell's folder")
        out[seed], where[seed] = float(s[key]), run.dir
    if not out:
        raise ValueError(f"runs: no summary.json with {key!r} under {folder}")
    return out


def _mean_se(xs: list[float]) -> tuple[float, float, float]:
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else math.nan
    return m, sd, sd / math.sqrt(n) if n > 1 else math.nan


@dataclass(frozen=True)
class Gap:
    """mean ± std of A and B, their difference with its standard error, the paired difference
    over common seeds with its standard error, and the verdict of the rule (:func:`decide`;
    ``verdict`` is its verdict)."""

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
    decision: Decision | None = None
    """The verdict by :func:`decide` (paired t over common seeds, else Welch), the rule."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self, a: str, b: str, *, scale: float = 100.0, unit: str = " points") -> str:
        """A two-row table and the claim line, accuracies in percent by default."""
        return "\n".join(
            [
                "| runs | mean ± std | seeds |",
                "|---|---|---|",
                f"| {a} | {scale * self.a_mean:.2f} ± {scale * self.a_std:.2f} | {' '.join(map(str, self.a_seeds))} |",
                f"| {b} | {scale * self.b_mean:.2f} ± {scale * self.b_std:.2f} | {' '.join(map(str, self.b_seeds))} |",
                "",
                f"{a} > {b}: difference {self.decision.line(scale=scale, unit=unit, verdict=False) if self.decision else ''}: "
                f"**{self.verdict}** (one-sided test at p < {ALPHA}; 95 % interval in brackets).",
            ]
        )


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

    def line(self, *, scale: float = 1.0, unit: str = "", verdict: bool = True, spec: str = ".2f") -> str:
        """``+1.23 points [0.4, 2.1] (paired t, n = 5, df 4, p = 0.012): holds`` (without the
        verdict where ``verdict`` is False); the difference and interval times ``scale`` in the
        format ``spec``."""
        if self.test == "none":
            return f"{scale * self.diff:+{spec}}{unit}" + (f": {self.verdict}" if verdict else "")
        p = f"p = {self.p:.3g}" + (" Holm-adjusted" if self.adjusted else "") + self._reverse("; B > A: p = ")
        return (
            f"{scale * self.diff:+{spec}}{unit} [{scale * self.ci_low:{spec}}, {scale * self.ci_high:{spec}}] "
            f"({self.test}, {self._n()}, df {self.df:.3g}, {p})" + (f": {self.verdict}" if verdict else "")
        )

    def cells(self, *, scale: float = 1.0, spec: str = ".2f") -> list[str]:
        """The cells of :data:`COLUMNS` for a table of orderings: difference, 95 % interval, test
        (with n and df), one-sided p (Holm-adjusted where the decision is) and the verdict."""
        if self.test == "none":
            return [f"{scale * self.diff:+{spec}}", "—", "none", "—", self.verdict]
        return [
            f"{scale * self.diff:+{spec}}",
            f"[{scale * self.ci_low:{spec}}, {scale * self.ci_high:{spec}}]",
            f"{self.test}, {self._n()}, df {self.df:.3g}",
            f"{self.p:.3g}" + self._reverse(" (B > A: ", ")"),
            self.verdict,
        ]

    def _reverse(self, before: str, after: str = "") -> str:
        """The one-sided p of B > A, which is what decides a "fails": printed only then."""
        return f"{before}{self.p_reverse:.3g}{after}" if self.verdict == "fails" else ""

    def _n(self) -> str:
        return f"n = {self.n_pairs}" if self.test == "paired t" else f"n = {self.n_a} and {self.n_b}"


#: the columns of a table of orderings after those naming A and B (:meth:`Decision.cells`)
COLUMNS = ("A − B", "95 % interval", "test", "one-sided p", "verdict")


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
            return Decision("none", na, nb, 0, diff, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, "not decided (one seed)")
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
    return Decision(test, na, nb, n, m, m - half, m + half, t, df, p, p_rev, _verdict_of(p, p_rev, alpha))  # type: ignore[arg-type]  # mypy infers str for test


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
        out[i] = Decision(
            d.test,
            d.n_a,
            d.n_b,
            d.n_pairs,
            d.diff,
            d.ci_low,
            d.ci_high,
            d.t,
            d.df,
            p_adj[k],
            r_adj[k],
            _verdict_of(p_adj[k], r_adj[k], alpha),
            adjusted=True,
        )
    return out


def all_hold(decisions: Iterable[Decision]) -> str:
    """The verdict on a claim that needs every one of several orderings (P above U *and* B,
    a rise at every step): "fails" where one of them fails, "holds" where every one holds,
    otherwise "not decided" ("not decided (one seed)" where a one-seed cell is why)."""
    verdicts = [d.verdict for d in decisions]
    if not verdicts:
        return "not decided"
    if "fails" in verdicts:
        return "fails"
    if all(v == "holds" for v in verdicts):
        return "holds"
    return "not decided (one seed)" if "not decided (one seed)" in verdicts else "not decided"


def rule_note(decisions: list[Decision], where: str = "table", unit: str = "points of accuracy") -> str:
    """The sentence a page prints with its orderings: the rule of :func:`decide`, the unit of
    the differences and Holm's family (the orderings ``decisions`` of this ``where``)."""
    m = sum(d.test != "none" and math.isfinite(d.p) for d in decisions)  # the family holm() adjusts
    family = f"Holm-adjusted over the {m} orderings of this {where}" if m > 1 else f"unadjusted (one ordering in this {where})"
    return (
        f"Each ordering A > B is decided from the per-seed values: the difference of the means ({unit}; "
        "paired: the mean difference over the seeds both sides share) with its two-sided 95 % interval, by a "
        "one-sided paired t-test over the common seeds (Welch's t-test where fewer than two seeds are common); "
        f"p {family}. It holds at p < {ALPHA}, fails where B > A has p < {ALPHA}, and is otherwise not decided; "
        "one seed decides nothing."
    )


#: the file beside a page that lists every ordering the page decided, one row each: what names the
#: ordering (``labels``: the page's own columns, e.g. τ, split, A, B, what) then every field of
#: :class:`Decision`. The reproduction page quotes these rows instead of deciding again, so a
#: verdict has one value wherever it is printed.
ORDERINGS = "orderings.csv"


def write_orderings(path: Path, rows: list[tuple[dict[str, Any], Decision]]) -> None:
    """Write ``rows`` (labels, decision) to ``path`` as CSV, decisions after Holm where the page
    adjusted them; the label columns are those of the first row (every row must have the same)."""
    labels = list(rows[0][0]) if rows else []
    clash = set(labels) & set(Decision.__dataclass_fields__)
    if clash:
        raise ValueError(f"orderings: label column(s) {', '.join(sorted(clash))} clash with the decision's fields")
    fields = labels + list(Decision.__dataclass_fields__)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for lab, d in rows:
        if list(lab) != labels:
            raise ValueError(f"orderings: label columns {list(lab)} differ from {labels}")
        w.writerow({**{k: str(v) for k, v in lab.items()}, **{k: repr(v) if isinstance(v, float) else v for k, v in d.to_dict().items()}})
    atomic_write_text(Path(path), buf.getvalue())


def read_orderings(path: Path) -> list[tuple[dict[str, str], Decision]]:
    """The rows :func:`write_orderings` wrote: the labels as text and each :class:`Decision`."""
    fields = Decision.__dataclass_fields__
    out = []
    with Path(path).open(newline="") as f:
        for row in csv.DictReader(f):
            lab = {k: v for k, v in row.items() if k not in fields}
            kw: dict[str, Any] = {}
            for k in fields:
                v = row[k]
                kw[k] = (
                    (v == "True")
                    if k == "adjusted"
                    else int(v)
                    if k in ("n_a", "n_b", "n_pairs")
                    else float(v)
                    if k not in ("test", "verdict")
                    else v
                )
            out.append((lab, Decision(**kw)))
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
    return Gap(ma, sa, sorted(a), mb, sb, sorted(b), ma - mb, se, d.verdict, pm, pse, d)
