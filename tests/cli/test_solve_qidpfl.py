"""``fedgame solve qidpfl``: the QI-DPFL game on its own, JSON in and JSON out (spec
``qidpfl.md`` §3.1, §3.5-3.8; golden instance V6 of §4.1, acceptance checks 3, 8, 12, 14)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedgame.cli import app

runner = CliRunner()

GOLDEN: dict[str, Any] = {
    "nu": [1.0, 1.2, 0.9, 1.5, 2.5],
    "phi1": 1,
    "R": 10,
    "sizes": [600, 800, 1000, 500, 700],
    "server": {"gamma": 0.5, "beta": 1, "lam": 1, "V": 1, "d": 7850, "C": 1, "T": 30, "pi": 0.9429},
    "curve": {"I1": 0.92, "I2": 0.6, "I3": 50, "I4": 0, "eps": 0.86, "eps_max": 0.914},
}

COUNTS = [[50, 50, 0], [40, 40, 20], [90, 5, 5], [30, 35, 35], [10, 10, 80], [34, 33, 33]]


def solve(problem: object, tmp_path: Path) -> tuple[int, str]:
    f = tmp_path / "problem.json"
    f.write_text(json.dumps(problem))
    res = runner.invoke(app, ["solve", "qidpfl", "--input", str(f)])
    return res.exit_code, res.output


def said(text: str, out: str) -> bool:
    """``text`` appears in ``out`` once Rich's line wrapping is undone."""
    return " ".join(text.split()) in " ".join(out.split())


def test_golden_instance_from_a_file(tmp_path: Path) -> None:
    code, out = solve(GOLDEN, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    assert d["emd"] is None and d["kept"] == [0, 1, 2, 3, 4]
    (r,) = d["rewards"]
    assert r["R"] == 10 and r["participants"] == [0, 1, 2, 3]
    np.testing.assert_allclose(r["rho"], np.array([4800, 3000, 5700, 300, 0]) / 2116, rtol=0, atol=1e-10)
    np.testing.assert_allclose(r["shares"], [8 / 23, 5 / 23, 19 / 46, 1 / 46, 0], rtol=0, atol=1e-10)
    np.testing.assert_allclose(r["utilities"], np.array([2560, 1000, 3610, 10, 0]) / 2116, rtol=0, atol=1e-10)
    assert sum(r["payments"]) == pytest.approx(10, rel=1e-12)
    assert 0 <= r["max_gain"] <= 1e-12
    rounds = d["rounds"]
    assert [x["t"] for x in rounds] == list(range(1, 31))
    assert rounds[0]["A"] == pytest.approx(3.370177457e-4, rel=1e-8)
    for t, R_star in ((1, 0.0259621935), (10, 0.03382563994), (30, 0.06089612587)):
        x = rounds[t - 1]
        assert x["R_star"] == pytest.approx(R_star, rel=1e-8)
        assert x["R_min"] == pytest.approx(0.07061260952, rel=1e-8)
        assert x["R_max"] == pytest.approx(0.1412252190, rel=1e-8)
        assert x["R_applied"] == x["R_min"]  # QI-DPFL pays R_min in rounds 1, 10, 30
        assert x["n_participants"] == 4
    # u_1 at R_1* is 0.02707330461 (V6); at the applied R_min it is higher
    u1_star = 2 * 0.5 / 900 + 2 * math.sqrt(rounds[0]["A"] * 0.5)
    assert u1_star == pytest.approx(0.02707330461, rel=1e-8)
    assert rounds[0]["cost"] > u1_star
    assert d["total_cost"] == pytest.approx(sum(x["cost"] for x in rounds), rel=1e-12)
    assert d["acc_scale"] == 1.0
    assert d["reward_range"]["R_min"] == pytest.approx(0.07061260952, rel=1e-8)


def test_stdin_several_rewards_calibration_and_fixed_costs() -> None:
    prob = {**GOLDEN, "R": [0, 1, 100], "fixed_cost": [0.1, 0, 0, 0, 0.2], "server": {**GOLDEN["server"], "acc_scale": "calibrate"}}
    res = runner.invoke(app, ["solve", "qidpfl", "--input", "-"], input=json.dumps(prob))
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    rs = d["rewards"]
    assert [r["R"] for r in rs] == [0, 1, 100]
    for r in rs:
        assert r["participants"] == [0, 1, 2, 3] and r["max_gain"] <= 1e-12
        np.testing.assert_allclose(r["rho"], np.array([4800, 3000, 5700, 300, 0]) / 2116 * r["R"] / 10, rtol=1e-12)
    assert rs[1]["utilities"][0] == pytest.approx(1 * (8 / 23) ** 2 - 0.1, rel=1e-12)
    assert rs[1]["utilities"][4] == 0.0  # a non-participant reports 0 (A5)
    rounds = d["rounds"]
    assert rounds[0]["R_star"] == pytest.approx(rounds[0]["R_min"], rel=1e-9)  # check 14
    assert d["acc_scale"] == pytest.approx(7.397445217940884, rel=1e-9)
    assert rounds[-1]["R_applied"] == rounds[-1]["R_max"]


def test_screening_through_the_cli(tmp_path: Path) -> None:
    prob = {
        "nu": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
        "R": 2,
        "sizes": [sum(c) for c in COUNTS],
        "label_counts": COUNTS,
        "reference": "uniform",
        "keep_fraction": 0.5,
    }
    code, out = solve(prob, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    p = np.array(COUNTS) / np.array(COUNTS).sum(axis=1, keepdims=True)
    emd = np.abs(p - 1 / 3).sum(axis=1)
    np.testing.assert_allclose(d["emd"], emd, atol=1e-15)
    assert d["kept"] == sorted(np.argsort(emd, kind="stable")[:3].tolist()) == [1, 3, 5]
    assert d["theta_th"] == pytest.approx(emd[[1, 3, 5]].max())
    r = d["rewards"][0]
    assert set(r["participants"]) <= {1, 3, 5} and len(r["rho"]) == 6
    assert r["rho"][0] == r["rho"][2] == r["rho"][4] == 0.0  # screened out
    # an absolute threshold and an explicit reference (a histogram, normalised)
    code, out = solve({**prob, "keep_fraction": None, "theta_th": 0.35, "reference": [1, 1, 1]}, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    assert d["kept"] == np.flatnonzero(emd <= 0.35).tolist()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nu": [1.0, -1.2, 0.9, 1.5, 2.5]}, "nu.1: must be > 0"),
        ({"nu": [1.0]}, "nu: must list at least 2 clients"),
        ({"R": -1}, "R: must be >= 0"),
        ({"R": [1, -3]}, "R.1: must be >= 0"),
        ({"fixed_cost": [0, 0, -1, 0, 0]}, "fixed_cost.2: must be >= 0"),
        ({"sizes": [600, 800, 0, 500, 700]}, "sizes.2: must be > 0"),
        ({"phi1": 0}, "phi1: must be > 0"),
        ({"curve": {**GOLDEN["curve"], "eps": 0.92}}, "curve.eps: must be < I1 = 0.92"),
        ({"curve": {**GOLDEN["curve"], "eps_max": 0.95}}, "curve.eps_max: must be < I1 = 0.92"),
        ({"curve": {**GOLDEN["curve"], "eps": 0.915}}, "curve.eps: must be <= eps_max = 0.914, got 0.915"),
        ({"server": {**GOLDEN["server"], "pi": 1.0}}, "server.pi: must be in (0, 1), got 1.0"),
        ({"server": {**GOLDEN["server"], "T": 0}}, "server.T: must be an integer in [1, 1000000], got 0"),
        ({"server": {"d": 10, "T": 5}}, "server.pi"),
        ({"server": {**GOLDEN["server"], "acc_scale": "calibrate"}, "curve": None}, 'server.acc_scale: "calibrate" needs a curve'),
        ({"theta_th": 0.5}, "theta_th: only used with label_counts"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_problems_are_refused_naming_the_field(change: dict[str, object], field: str, tmp_path: Path) -> None:
    code, out = solve({**GOLDEN, **change}, tmp_path)
    assert code == 2, out
    assert said(field, out)
    assert "rounds" not in out


SCREEN: dict[str, Any] = {
    "nu": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
    "R": 2,
    "sizes": [sum(c) for c in COUNTS],
    "label_counts": COUNTS,
    "theta_th": 1.0,
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"label_counts": [[50, 50, 0], [40, -40, 20], *COUNTS[2:]]}, "label_counts.1.1: must be a count >= 0, got -40"),
        ({"label_counts": [[50, 50, 0], [0, 0, 0], *COUNTS[2:]]}, "label_counts.1: must have a positive total"),
        ({"label_counts": [[50, 50, 0], [40, 40], *COUNTS[2:]]}, "label_counts.1: must have P = 3 class counts (as label_counts.0), got 2"),
        ({"reference": [1, 1, 1, 1]}, "label_counts.0: must have P = 4 class counts (as the reference), got 3"),
        ({"reference": [1, -1, 1]}, "reference.1: must be >= 0"),
        ({"sizes": [100, 100, 99, 100, 100, 100]}, "sizes.2: must equal the total of label_counts.2 (|D_h| = 100), got 99"),
        ({"theta_th": 0.05}, "theta_th: screening kept N = 0 client(s); the game needs at least 2"),
        ({"theta_th": None, "keep_fraction": 0.2}, "keep_fraction: screening kept N = 2"),
        ({"theta_th": None, "keep_fraction": 0.1}, "keep_fraction: screening kept N = 1 client(s); the game needs at least 2"),
        ({"theta_th": None}, "theta_th, keep_fraction: with label_counts give exactly one of them"),
        ({"keep_fraction": 0.5}, "theta_th, keep_fraction: with label_counts give exactly one of them"),
        ({"theta_th": None, "keep_fraction": 1.5}, "keep_fraction: must be in (0, 1], got 1.5"),
    ],
)
def test_bad_screening_inputs_are_refused(change: dict[str, object], field: str, tmp_path: Path) -> None:
    code, out = solve({**SCREEN, **change}, tmp_path)
    if field.startswith("keep_fraction: screening kept N = 2"):  # 0.2·6 → ⌈1.2⌉ = 2 clients: fine
        assert code == 0, out
        return
    assert code == 2, out
    assert said(field, out)
    assert '"rewards"' not in out


def test_the_second_smallest_emd_is_the_allowed_threshold(tmp_path: Path) -> None:
    code, out = solve({**SCREEN, "theta_th": 0.0}, tmp_path)
    assert code == 2
    assert said("allowed: theta_th >= 0.2233333333, the second smallest EMD), got 0.0", out)
