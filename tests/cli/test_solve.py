"""``fedgame solve fedpcs``: the game on its own, as JSON in and JSON out (issue: FedPCS)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.incentives.fedpcs import accuracy_weights, equilibrium_cost, mean_field

runner = CliRunner()

CHECK3 = {"N": 10, "K": 3, "T": 20, "clients": [{"rho0": 2, "varphi": 0.3}], "R": 2, "phi": 5}


def solve(problem: object, tmp_path: Path) -> tuple[int, str]:
    f = tmp_path / "problem.json"
    f.write_text(json.dumps(problem))
    res = runner.invoke(app, ["solve", "fedpcs", "--input", str(f)])
    return res.exit_code, res.output


def test_check3_instance_from_a_file(tmp_path: Path) -> None:
    code, out = solve({**CHECK3, "zcdp": {"rho": 2.0, "delta": 1e-5}}, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    b = d["best_responses"][0]
    assert b["utility"] == pytest.approx(13.925483, abs=1e-6)  # spec §6 check 3
    np.testing.assert_allclose(b["alpha"][:5], [0.2363, 0.2464, 0.0699, 0.0048, 0.0], atol=1e-4)
    assert b["kkt_residual"] <= 1e-7 and b["alpha"][-1] == 0.0
    assert d["zcdp"]["eps"] == pytest.approx(2 + 2 * np.sqrt(2 * np.log(1e5)), rel=1e-12)
    assert d["social_welfare"] == pytest.approx(sum(r * 2 - 0.3 * r * r for r in b["rho"]), rel=1e-12)


def test_stdin_and_a_100_client_mean_field_equal_the_library() -> None:
    rng = np.random.default_rng(0)
    rho0, vp = rng.uniform(0.01, 12, 100), rng.uniform(0.05, 0.95, 100)
    prob = {
        "N": 100,
        "K": 20,
        "T": 4,
        "R": 2.0,
        "mean_field": {"tol": 1e-7},
        "clients": [{"rho0": float(a), "varphi": float(b)} for a, b in zip(rho0, vp)],
    }
    res = runner.invoke(app, ["solve", "fedpcs", "--input", "-"], input=json.dumps(prob))
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)["mean_field"]
    assert d["residual"] <= 1e-7 and len(d["clients"]) == 100
    ref = mean_field(rho0, vp, np.full(5, 2.0), 20, 4, rng=0)
    np.testing.assert_allclose(d["phi"], ref.phi, atol=1e-6)
    assert d["phi"][0] == pytest.approx(rho0.mean(), rel=1e-12)
    assert d["social_optimum"] >= d["social_welfare"]
    if d["social_welfare"] > 0:
        assert d["poa"] == pytest.approx(d["social_optimum"] / d["social_welfare"], rel=1e-9)
    else:
        assert d["poa"] is None  # +inf (A16), JSON has no infinity


def test_theorem7_block(tmp_path: Path) -> None:
    code, out = solve({**CHECK3, "homogeneous": {"G": 1.2, "H": 1.0, "v": 20, "gamma": 0.5, "B": 300, "N": 100}}, tmp_path)
    assert code == 0, out
    h = json.loads(out)["homogeneous"]
    assert h["rho_star"] == pytest.approx((2 * 1.2 * 20 / 0.5) ** (1 / 3), rel=1e-12)
    assert h["R_star"] == pytest.approx((h["rho_star"] - 1.0) / 1.2, rel=1e-12)
    assert h["K"] == int(300 // h["rho_star"]) and not h["corner"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"clients": [{"rho0": 0, "varphi": 0.3}]}, "clients.0.rho0"),
        ({"clients": [{"rho0": -2, "varphi": 0.3}]}, "clients.0.rho0"),
        ({"clients": [{"rho0": 2, "varphi": 1.0}]}, "clients.0.varphi"),
        ({"clients": [{"rho0": 2, "varphi": 0.0}]}, "clients.0.varphi"),
        ({"T": 0}, "T"),
        ({"R": [1.0, 2.0]}, "R: a list must have T+1 = 21"),
        ({"K": 11}, "K: must be in [1, N]"),
        ({"phi": None}, "phi, mean_field"),
        ({"mean_field": True}, "phi, mean_field"),
        ({"homogeneous": {"G": 1, "H": 5, "v": 1, "gamma": 0.5, "B": 2, "N": 10}}, "homogeneous.B"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_problems_are_refused_naming_the_field(change: dict[str, object], field: str, tmp_path: Path) -> None:
    code, out = solve({**CHECK3, **change}, tmp_path)
    assert code == 2
    assert field in out
    assert "best_responses" not in out


def _small_game() -> dict[str, object]:
    rng = np.random.default_rng(0)
    rho0, vp = rng.uniform(0.5, 10.0, 4), rng.uniform(0.2, 0.8, 4)
    return {"N": 4, "K": 2, "T": 3, "clients": [{"rho0": float(a), "varphi": float(b)} for a, b in zip(rho0, vp)]}


def test_stackelberg_block_returns_the_true_cost_rewards(tmp_path: Path) -> None:
    """Spec §7 R2: the server's rewards on the true cost, v_t = γ·acc_scale/(t+1)."""
    game = _small_game()
    code, out = solve({**game, "stackelberg": {"gamma": 0.5, "acc_scale": 1000, "R_max": 100}}, tmp_path)
    assert code == 0, out
    d = json.loads(out)
    s = d["stackelberg"]
    assert set(d) == {"stackelberg"}
    assert s["server_solver"] == "true_cost" and s["converged"] is True
    assert len(s["R"]) == len(s["phi"]) == len(s["cost"]["per_round"]) == 4
    assert s["R"][0] == s["R"][1] and all(0 <= r <= 100 for r in s["R"])
    assert np.shape(s["rho"]) == (4, 4)
    assert s["cost"]["total"] == pytest.approx(sum(s["cost"]["per_round"]), rel=1e-12)
    assert s["cost"]["objective"] == pytest.approx(sum(s["cost"]["per_round"][1:]), rel=1e-12)
    # the same cost as the library's true-cost function at these rewards
    rho0 = [c["rho0"] for c in game["clients"]]  # type: ignore[union-attr]
    vp = [c["varphi"] for c in game["clients"]]  # type: ignore[union-attr]
    ref = equilibrium_cost(s["R"], rho0, vp, 2, 3, v=accuracy_weights(3, gamma=0.5, acc_scale=1000.0))
    assert ref.objective == pytest.approx(s["cost"]["objective"], rel=1e-9)
    np.testing.assert_allclose(s["rho"], ref.mean_field.rho, atol=1e-9)


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"acc_scale": 0}, "stackelberg.acc_scale: Input should be greater than 0"),
        ({"gamma": 1.5, "acc_scale": 10}, "stackelberg.gamma: Input should be less than 1"),
        ({"acc_scale": 10, "R_max": -1}, "stackelberg.R_max: Input should be greater than 0"),
        ({"acc_scale": 10, "server_solver": "newton"}, "stackelberg.server_solver"),
        ({"gamma": 0.5}, "stackelberg.acc_scale: Field required"),
    ],
)
def test_bad_stackelberg_blocks_are_refused(block: dict[str, object], field: str, tmp_path: Path) -> None:
    code, out = solve({**_small_game(), "stackelberg": block}, tmp_path)
    assert code == 2 and field in out and '"stackelberg"' not in out


def test_stackelberg_needs_every_client_and_no_stray_rewards(tmp_path: Path) -> None:
    game = _small_game()
    block = {"acc_scale": 10}
    code, out = solve({**game, "clients": game["clients"][:3], "stackelberg": block}, tmp_path)  # type: ignore[index]
    assert code == 2 and "clients: stackelberg needs all N = 4 clients, got 3" in out
    code, out = solve({**game, "R": 1.0, "stackelberg": block}, tmp_path)
    assert code == 2 and "R: only used with phi or mean_field" in out


def test_malformed_json_and_unknown_game(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text("{not json")
    res = runner.invoke(app, ["solve", "fedpcs", "--input", str(f)])
    assert res.exit_code == 2 and "not valid JSON" in res.output
    res = runner.invoke(app, ["solve", "chess", "--input", str(f)])
    assert res.exit_code == 2 and "unknown game" in res.output
