"""``fedgame solve phs``: PHS Problem 1 on its own, JSON in and JSON out (spec ``phs.md`` §3.5,
§6 checks 2, 7, 9)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.privacy.analysis.phs import phs_noise_multiplier, phs_V

runner = CliRunner()

GOLDEN: dict[str, Any] = {
    "eps": [0.2, 0.5, 1, 5, 10],
    "delta": 1e-5,
    "sizes": [500, 600, 700, 550, 650],
    "batch_size": 64,
    "D": 26010,
    "eta": 1,
    "T_g": 100,
    "T_l": 5,
    "K": 2,
    "C": 1,
}


def solve(problem: object, tmp_path: Path) -> tuple[int, str]:
    f = tmp_path / "problem.json"
    f.write_text(json.dumps(problem))
    res = runner.invoke(app, ["solve", "phs", "--input", str(f)])
    return res.exit_code, res.output


def test_golden_example_from_a_file(tmp_path: Path) -> None:
    code, out = solve({**GOLDEN, "counts": [20] * 5}, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    np.testing.assert_allclose(d["V"], [1.83256e-2, 5.06985e-3, 2.23849e-3, 4.33395e-4, 1.50679e-4], rtol=5e-6)
    np.testing.assert_allclose(d["p_u"], [0.166667, 0.2, 0.233333, 0.183333, 0.216667], atol=5e-7)
    np.testing.assert_allclose(d["p_star"], [0.0165421, 0.0597935, 0.135424, 0.203349, 0.584891], atol=1e-5)
    assert d["objective"] == pytest.approx(2.796250275, abs=1e-7)
    assert d["objective_at_p_u"] == pytest.approx(4.716747992, abs=1e-8)
    assert d["eta_star"] == pytest.approx(0.0144074, abs=5e-8)
    assert d["tau_hi"] == pytest.approx(7.885, abs=5e-4) and d["tau_lo"] == pytest.approx(2.292, abs=5e-4)
    assert d["kkt_residual"] <= 1e-6 and d["method"] == "structured" and d["eta_from"] == "eta"
    # Eq. 6 with T_k = 20: z = σ B / C, the golden z of §3.5, and the library's calibration
    assert d["counts_used"] == "given" and d["counts"] == [20] * 5
    z = np.asarray(d["noise_multiplier"])
    np.testing.assert_allclose(z, [86.6382, 45.5698, 30.2801, 13.3236, 7.85608], rtol=6e-6)
    np.testing.assert_allclose(d["sigma"], z / 64, rtol=1e-12)
    r = 64 / np.asarray(GOLDEN["sizes"], dtype=float)
    np.testing.assert_allclose(z, phs_noise_multiplier(np.asarray(GOLDEN["eps"], dtype=float), 1e-5, r, 100), rtol=1e-12)
    np.testing.assert_allclose(d["r"], r, rtol=1e-15)
    # both solvers
    assert d["structured"]["objective"] == d["objective"] and d["structured"]["converged"]
    assert d["cvxpy"]["objective"] == pytest.approx(d["objective"], rel=1e-6)
    assert 0 <= d["max_abs_difference"] <= 1e-4
    assert d["structured"]["seconds"] > 0 and d["cvxpy"]["seconds"] > 0


def test_stdin_expected_counts_L_and_sampling_ratio() -> None:
    sizes = np.array([400, 800, 1200, 600])
    prob = {
        "eps": [0.3, 1.0, 2.0, 0.7],
        "delta": [1e-5, 1e-5, 2e-5, 1e-5],
        "sizes": sizes.tolist(),
        "sampling_ratio": 0.1,
        "D": 1000,
        "L": 0.5,
        "T_g": 50,
        "T_l": 4,
        "K": 10,
        "C": 2.0,
    }
    res = runner.invoke(app, ["solve", "phs", "--input", "-"], input=json.dumps(prob))
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["eta"] == pytest.approx(2 * 0.5 * math.sqrt(50 * 4), rel=1e-15) and d["eta_from"] == "L"
    V = phs_V(np.array(prob["eps"]), np.array(prob["delta"]), 0.1, sizes)
    np.testing.assert_allclose(d["V"], V, rtol=1e-15)
    assert d["counts_used"] == "expected"
    p = np.asarray(d["p_star"])
    np.testing.assert_allclose(d["counts"], p * 10 * 50, rtol=1e-15)  # E[T_k] = p*_k K T^g (Eq. 40)
    np.testing.assert_allclose(d["sigma"], np.sqrt(V * p * 10 * 50 * 4) * 2.0, rtol=1e-12)  # Eq. 6
    np.testing.assert_allclose(d["noise_multiplier"], np.asarray(d["sigma"]) * 0.1 * sizes / 2.0, rtol=1e-12)
    # fixed_batch reading (A3): σ doubles, the noise multiplier w.r.t. the sensitivity does not
    res2 = runner.invoke(app, ["solve", "phs", "-i", "-"], input=json.dumps({**prob, "sensitivity_factor": 2}))
    d2 = json.loads(res2.stdout)
    np.testing.assert_allclose(d2["sigma"], 2 * np.asarray(d["sigma"]), rtol=1e-15)
    assert d2["noise_multiplier"] == d["noise_multiplier"]


def test_default_eta_is_2_sqrt_T_and_batch_above_size_gives_r_1(tmp_path: Path) -> None:
    prob = {**GOLDEN, "batch_size": [64, 64, 1000, 64, 64]}
    del prob["eta"]
    code, out = solve(prob, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    assert d["eta"] == pytest.approx(2 * math.sqrt(500), rel=1e-15) and d["eta_from"].startswith("default")
    assert d["r"][2] == 1.0  # A9: B_k > |M_k| → r_k = 1


def test_public_data_uses_cvxpy(tmp_path: Path) -> None:
    code, out = solve({**GOLDEN, "eps": [0.2, 0.5, 1, "inf", None], "counts": [20] * 5}, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    assert d["V"][3:] == [0.0, 0.0] and d["sigma"][3:] == [0.0, 0.0] and d["noise_multiplier"][3:] == [0.0, 0.0]
    assert all(s > 0 for s in d["sigma"][:3])
    assert d["method"] == "cvxpy" and d["structured"] is None and d["max_abs_difference"] is None
    assert d["cvxpy"]["converged"] and d["objective"] <= d["objective_at_p_u"]
    assert sum(d["p_star"][3:]) > sum(d["p_u"][3:])  # the free clients take more


def test_equal_budgets_and_sizes_report_no_eta_star(tmp_path: Path) -> None:
    code, out = solve({**GOLDEN, "eps": [1] * 5, "sizes": [600] * 5}, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    assert d["eta_star"] is None  # inf: p* = p^u for every η
    np.testing.assert_allclose(d["p_star"], 0.2, atol=1e-12)


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"eps": [0.2, 0.5, -1, 5, 10]}, ["eps.2: must be > 0", '"inf" for public data', "got -1"]),
        ({"eps": [0, 0.5, 1, 5, 10]}, ["eps.0: must be > 0", "got 0"]),
        ({"eps": [0.2, 0.5, "abc", 5, 10]}, ["eps.2", "valid number", "'abc'"]),
        ({"delta": 0}, ["delta: must be in (0, 1]", "got 0"]),
        ({"delta": [1e-5, 1e-5, -1e-5, 1e-5, 1e-5]}, ["delta.2: must be in (0, 1]", "got -1e-05"]),
        ({"delta": 0.5}, ["delta: must be <= r", "0.128", "client 0", "got 0.5"]),
        ({"delta": [1e-5] * 3}, ["delta: a list must have one value per client", "got 3"]),
        ({"batch_size": 0.5}, ["batch_size: must be >= 1", "got 0.5"]),
        ({"batch_size": [64, 64, 0, 64, 64]}, ["batch_size.2: must be >= 1", "got 0"]),
        ({"sampling_ratio": 0.1}, ["batch_size, sampling_ratio: give exactly one"]),
        ({"sizes": [500, 0, 700, 550, 650]}, ["sizes.1: must be > 0", "got 0"]),
        ({"sizes": [500, -3, 700, 550, 650]}, ["sizes.1: must be > 0", "got -3"]),
        ({"sizes": [500, 600]}, ["sizes: must have one value per client", "got 2"]),
        ({"eta": -1}, ["eta: must be > 0", "got -1"]),
        ({"eta": 0}, ["eta: must be > 0", "got 0"]),
        ({"L": 1}, ["eta, L: give at most one"]),
        ({"D": 0}, ["D: must be >= 1", "got 0"]),
        ({"T_g": 0}, ["T_g: must be >= 1", "got 0"]),
        ({"K": 0}, ["K: must be >= 1", "got 0"]),
        ({"C": -1}, ["C: must be > 0", "got -1"]),
        ({"counts": [20, 20, -1, 20, 20]}, ["counts.2: must be >= 0", "got -1"]),
        ({"sensitivity_factor": 3}, ["sensitivity_factor", "got 3"]),
        ({"unknown": 1}, ["unknown", "Extra inputs are not permitted"]),
    ],
)
def test_bad_problems_are_refused_naming_the_field(change: dict[str, Any], fragments: list[str], tmp_path: Path) -> None:
    code, out = solve({**GOLDEN, **change}, tmp_path)
    assert code == 2, out
    flat = " ".join(out.split())  # Rich may wrap long lines
    for frag in fragments:
        assert frag in flat, (frag, out)
    assert "p_star" not in out


def test_several_bad_fields_one_line_each_and_a_non_object(tmp_path: Path) -> None:
    code, out = solve({**GOLDEN, "eps": [0.2, -1, 1, 5, 10], "sizes": [500, 600, 0, 550, 650], "eta": -1}, tmp_path)
    assert code == 2
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: phs problem: ")  # every mistake one line
    assert [part.split(":")[0] for part in lines[0].removeprefix("error: phs problem: ").split("; ")] == ["eps.1", "sizes.2", "eta"]
    code, out = solve([1, 2], tmp_path)
    assert code == 2 and "expected a JSON object" in out
