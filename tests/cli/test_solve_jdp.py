"""``fedgame solve jdp``: JDP-FL's recruitment auctions M1 and M2 on their own, JSON in and JSON
out (spec ``jdp.md`` §3.2-3.3 worked examples, acceptance checks 1-5, 7 and 12)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.incentives.auctions import KnapsackAuction, UnitPriceAuction

runner = CliRunner()

WORKED: dict[str, Any] = {"costs": [10, 30, 20, 60], "data": [10, 20, 5, 30], "budget": 50}


def solve(problem: object, tmp_path: Path) -> tuple[int, str]:
    f = tmp_path / "instance.json"
    f.write_text(json.dumps(problem))
    res = runner.invoke(app, ["solve", "jdp", "--input", str(f)])
    return res.exit_code, res.output


def said(text: str, out: str) -> bool:
    """``text`` appears in ``out`` once Rich's line wrapping is undone."""
    return " ".join(text.split()) in " ".join(out.split())


def test_worked_example_from_a_file(tmp_path: Path) -> None:
    """Checks 1 and 2 through the CLI: both mechanisms by default."""
    code, out = solve(WORKED, tmp_path)
    assert code == 0, out
    r = json.loads(out)
    assert r["n"] == 4 and r["budget"] == 50
    m1, m2 = r["M1"], r["M2"]
    assert m1["winners"] == [0, 1] and m2["winners"] == [0, 1]
    np.testing.assert_allclose(m1["payments"], [50 / 3, 100 / 3, 0, 0], rtol=0, atol=1e-9)
    assert m1["price"] == pytest.approx(5 / 3, abs=1e-12)
    assert m1["total_payment"] == pytest.approx(50, abs=1e-9)
    assert m1["payments_within_budget"] is True and m1["costs_within_budget"] is True
    assert m1["data_bought"] == 30 and m1["winners_cost"] == 40
    np.testing.assert_allclose(m2["payments"], [20, 50, 0, 0], rtol=0, atol=1e-9)
    assert m2["total_payment"] == pytest.approx(70, abs=1e-9)
    assert m2["winners_cost"] == 40 and m2["data_bought"] == 30 and m2["fallback"] is False
    assert m2["payments_within_budget"] is False and m2["costs_within_budget"] is True
    assert "audit" not in m1 and "audit" not in m2


def test_stdin_one_mechanism_and_the_overspending_pair() -> None:
    """Check 3 from stdin, M2 only: both win, p = (0.9, 0.9), Σp = 1.8 > B = 1 (flagged)."""
    prob = {"costs": [0.1, 0.1], "data": [1, 1], "budget": 1, "mechanism": "M2"}
    res = runner.invoke(app, ["solve", "jdp", "--input", "-"], input=json.dumps(prob))
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert "M1" not in r
    assert r["M2"]["winners"] == [0, 1]
    np.testing.assert_allclose(r["M2"]["payments"], [0.9, 0.9], atol=1e-12)
    assert r["M2"]["payments_within_budget"] is False


def test_m1_alone_on_the_pair() -> None:
    """M1 on the same pair: q = (0.1, 0.1), both prefixes qualify (0.1 ≤ 1/2), ρ = B/D_W = 0.5."""
    prob = {"costs": [0.1, 0.1], "data": [1, 1], "budget": 1, "mechanism": "M1"}
    res = runner.invoke(app, ["solve", "jdp"], input=json.dumps(prob))
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)["M1"]
    out = UnitPriceAuction().run([0.1, 0.1], budget=1, data_sizes=[1, 1])
    assert r["winners"] == out.winners.tolist() == [0, 1]
    assert r["price"] == pytest.approx(0.5) and r["total_payment"] == pytest.approx(1.0)


def test_audit_of_the_worked_example(tmp_path: Path) -> None:
    """Checks 4-5 on request: no audited client gains by misreporting; IR holds."""
    code, out = solve({**WORKED, "audit_clients": [0, 1, 2, 3]}, tmp_path)
    assert code == 0, out
    r = json.loads(out)
    for name, utilities in (("M1", [20 / 3, 10 / 3, 0, 0]), ("M2", [10, 20, 0, 0])):
        a = r[name]["audit"]
        assert a["clients"] == [0, 1, 2, 3]
        assert a["truthful"] is True and a["worst_gain"] <= a["tolerance"] == pytest.approx(5e-8)
        assert max(a["max_gain"]) <= 1e-9 * 50
        np.testing.assert_allclose(a["truthful_utility"], utilities, atol=1e-9)
        assert a["best_misreport"] == [10, 30, 20, 60]  # nothing beats the truth
        assert all(g > 128 for g in a["grid_points"])
        ir = a["individual_rationality"]
        assert ir["holds"] is True and ir["paid_losers"] == 0
        assert ir["min_winner_utility"] == pytest.approx(min(u for u in utilities if u > 0), abs=1e-9)


def test_random_instance_agrees_with_the_library_and_audits_clean() -> None:
    rng = np.random.default_rng(5)
    c, d = rng.integers(1, 1001, 40), rng.integers(1, 1001, 40)
    B = 7_000.5
    prob = {"costs": c.tolist(), "data": d.tolist(), "budget": B, "audit_clients": [0, 7, 39]}
    res = runner.invoke(app, ["solve", "jdp"], input=json.dumps(prob))
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    for name, auction in (("M1", UnitPriceAuction()), ("M2", KnapsackAuction(warn_over_budget=False))):
        out = auction.run(c, budget=B, data_sizes=d)
        assert r[name]["winners"] == out.winners.tolist()
        np.testing.assert_allclose(r[name]["payments"], out.payment_vector(), rtol=1e-15)
        assert r[name]["payments_within_budget"] == (sum(r[name]["payments"]) <= B * (1 + 1e-12))
        assert r[name]["audit"]["truthful"] and r[name]["audit"]["individual_rationality"]["holds"]


def test_nobody_affordable_gives_null_price(tmp_path: Path) -> None:
    code, out = solve({"costs": [5, 7], "data": [1, 3], "budget": 1}, tmp_path)
    assert code == 0, out
    r = json.loads(out)
    assert r["M1"]["winners"] == [] and r["M1"]["price"] is None and r["M1"]["payments"] == [0, 0]
    assert r["M2"]["winners"] == [] and r["M2"]["total_payment"] == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"costs": [10, -30, 20, 60]}, "costs.1: must be > 0 and finite (a reported cost c_i), got -30.0"),
        ({"costs": [10, 30, 0, 60]}, "costs.2: must be > 0 and finite (a reported cost c_i), got 0.0"),
        ({"costs": []}, "costs: must list at least 1 candidate (n >= 1), got []"),
        ({"data": [10, 20, 5, 0]}, "data.3: must be > 0 and finite (a data size d_i), got 0.0"),
        ({"data": [10, 20, 5]}, "data: must have one value per candidate (n = 4, as costs), got 3"),
        ({"budget": 0}, "budget: must be > 0 and finite, got 0.0"),
        ({"budget": -50}, "budget: must be > 0 and finite, got -50.0"),
        ({"mechanism": "M3"}, "mechanism: must be one of 'M1', 'M2', 'both', got 'M3'"),
        ({"audit_clients": [0, 4]}, "audit_clients.1: must be a candidate index in [0, 3], got 4"),
        ({"audit_clients": [-1]}, "audit_clients.0: must be a candidate index in [0, 3], got -1"),
        ({"audit_clients": [2, 2]}, "audit_clients.1: candidate 2 is listed twice"),
        ({"costs": [10, "x", 20, 60]}, "costs.1: Input should be a valid number"),
        ({"budget": None}, "budget: Input should be a valid number"),
        ({"unknown": 1}, "unknown: Extra inputs are not permitted"),
    ],
)
def test_bad_instances_are_refused_naming_the_field(change: dict[str, object], field: str, tmp_path: Path) -> None:
    """Check 12 through the CLI: exit code 2, the field, the allowed range and the value."""
    code, out = solve({**WORKED, **change}, tmp_path)
    assert code == 2, out
    assert said(field, out)
    assert '"winners"' not in out


def test_every_bad_field_on_its_own_line(tmp_path: Path) -> None:
    code, out = solve({"costs": [1, -1, 0], "data": [1, 2], "budget": -3, "audit_clients": [9]}, tmp_path)
    assert code == 2
    for field in ("costs.1:", "costs.2:", "data: must have one value per candidate (n = 3", "budget:", "audit_clients.0:"):
        assert said(field, out), field
    many = {"costs": [-1.0] * 25, "data": [1] * 25, "budget": 1}
    code, out = solve(many, tmp_path)
    assert code == 2 and said("costs.9:", out) and not said("costs.10:", out)
    assert said("costs: 15 more entries are not > 0 and finite", out)


def test_unreadable_or_malformed_input(tmp_path: Path) -> None:
    res = runner.invoke(app, ["solve", "jdp", "--input", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and said("--input: cannot read", res.output)
    res = runner.invoke(app, ["solve", "jdp"], input="{not json")
    assert res.exit_code == 2 and said("--input: not valid JSON", res.output)
    res = runner.invoke(app, ["solve", "jdp"], input="[1, 2]")
    assert res.exit_code == 2 and said("problem: expected a JSON object, got list", res.output)
    res = runner.invoke(app, ["solve", "nope"], input="{}")
    assert res.exit_code == 2 and said("choose from fedpcs, phs, qidpfl, jdp", res.output)
