"""The FedPCS game solve gives the same bits whichever SIMD and BLAS kernels the CPU picks
(docs/speed.md, "The same plan on every CPU kind"), and the host-independent helpers it uses
(``_linalg``, the elementwise kernels) against NumPy's and LAPACK's routines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedgame.incentives.fedpcs import _kernels, _linalg
from fedgame.incentives.fedpcs._dynamics import inclusion_probability, inclusion_probability_derivative

ROOT = Path(__file__).resolve().parents[2]

# J at three constant schedules and the whole solve of the main job's game (N = 100, K = 10,
# T = 5; about 12 s), printed as the floats' hex digits
_PROBE = """
import json, sys, tempfile
from pathlib import Path
from fedgame.incentives.fedpcs import accuracy_weights, equilibrium_cost, solve_plan
from fedgame.incentives.fedpcs.plugin import _types
from fedgame.pipeline.build import fedpcs_game
from fedgame.pipeline.config import load_recipe

game = fedpcs_game(load_recipe(Path(sys.argv[1])))
T, K = game.rounds - 1, game.clients_per_round
rho0, varphi = _types(game)
v = accuracy_weights(T, gamma=game.gamma, acc_scale=game.acc_scale)
out = {f"J({R})": equilibrium_cost(R, rho0, varphi, K, T, v=v, gamma=game.gamma, rng=game.seed).objective.hex() for R in (1.0, 7.5)}
with tempfile.TemporaryDirectory() as d:
    plan = solve_plan(game, cache=Path(d))
out["reward"] = [float(x).hex() for x in plan.reward]
out["rho"] = [float(x).hex() for x in plan.rho.ravel()]
out["evaluations"] = plan.extras.get("evaluations")
print(json.dumps(out))
"""


def _other_kernels_env() -> dict[str, str]:
    """The environment of a process that runs other kernels than this one: NumPy without its
    AVX-512 routines (those this host has; on an AVX2 host there are none to switch off) and
    OpenBLAS's Haswell kernels (AVX2; this host's own are SkylakeX, Cooper Lake or Zen)."""
    from numpy._core._multiarray_umath import __cpu_features__

    avx512 = [name for name, on in __cpu_features__.items() if on and (name.startswith("AVX512") or name == "X86_V4")]
    env = {k: v for k, v in os.environ.items() if k not in ("NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE")}
    return env | {"NPY_DISABLE_CPU_FEATURES": " ".join(avx512), "OPENBLAS_CORETYPE": "Haswell"}


def _probe(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT / "recipes" / "main" / "fedpcs.yaml")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_game_solve_gives_the_same_bits_under_other_simd_and_blas_kernels() -> None:
    """Two processes, this host's NumPy and OpenBLAS kernels against AVX2-only ones, solve the
    main job's game: every J and the whole plan agree to the bit (before SOLVER_VERSION 8 the
    costs differed in their last digits here and the rewards by 1e-6; on the AVX2 host the
    paper-budget game took 4,737 evaluations against 1,279 on AVX-512 hosts)."""
    here = _probe(dict(os.environ))
    other = _probe(_other_kernels_env())
    assert here == other


def test_elementwise_kernels_follow_the_c_library_within_two_ulp() -> None:
    x = np.concatenate([np.linspace(0.0, 1.0, 1001), [1e-300, 1e-17, 0.5 - 1e-12, 1.0 - 1e-15]])
    out = np.empty_like(x)
    _kernels.log1m(x, out)
    with np.errstate(divide="ignore"):
        ref = np.log1p(-x)
    assert out[x == 1.0] == -np.inf
    finite = x < 1.0
    assert np.all(np.abs(out[finite] - ref[finite]) <= 2 * np.spacing(np.abs(ref[finite])))
    z = np.concatenate([-np.geomspace(1e-300, 700.0, 500), [0.0, -np.inf]])
    _kernels.neg_expm1(z, out := np.empty_like(z))
    ref = -np.expm1(z)
    assert np.all(np.abs(out - ref) <= 2 * np.spacing(np.abs(ref)) + 1e-300)


def test_inclusion_probability_keeps_its_values_and_its_cap() -> None:
    """P and P' through the host-independent kernels, of any shape, against their formulas
    (x capped at 1: P = 1, P' = 0 there)."""
    rho = np.array([[0.0, 1.0, 5.0], [2.0, 30.0, 1.0]])
    phi = np.array([1.0, 0.1, 2.0])
    N, K = 10, 4
    x = np.minimum(rho / (N * phi), 1.0)
    np.testing.assert_allclose(inclusion_probability(rho, phi, N, K), 1.0 - (1.0 - x) ** K, rtol=1e-14, atol=1e-16)
    dP = inclusion_probability_derivative(rho, phi, N, K)
    expected = np.where(rho / (N * phi) < 1.0, K / (N * phi) * (1.0 - x) ** (K - 1), 0.0)
    np.testing.assert_allclose(dP, expected, rtol=1e-13, atol=1e-16)
    assert inclusion_probability(rho, phi, N, K)[1, 1] == 1.0


def test_lstsq_is_lapacks_minimum_norm_solution_tall_wide_and_rank_deficient() -> None:
    rng = np.random.default_rng(3)
    A = rng.normal(size=(29, 5))
    b = rng.normal(size=29)
    for M in (A, A[:3].copy(), np.column_stack([A[:, :3], A[:, 1]]), np.column_stack([A[:3, :2], A[:3, :2]])):
        rhs = b[: M.shape[0]]
        np.testing.assert_allclose(_linalg.lstsq(M, rhs), np.linalg.lstsq(M, rhs, rcond=None)[0], rtol=1e-9, atol=1e-11)
    assert _linalg.lstsq(np.zeros((3, 2)), b[:3]).tolist() == [0.0, 0.0]


def test_anderson_mix_solves_a_linear_fixed_point_in_one_step() -> None:
    """On an affine map g(x) = M x + c with as many differences as dimensions, the mixed
    step is the fixed point (the secant model is exact)."""
    rng = np.random.default_rng(4)
    M = 0.5 * rng.normal(size=(3, 3)) / 3
    c = rng.normal(size=3)
    X = rng.normal(size=(4, 3))
    F = X @ M.T + c - X
    fixed = np.linalg.solve(np.eye(3) - M, c)
    np.testing.assert_allclose(_linalg.anderson_mix(X, F, 1.0), fixed, rtol=1e-9)


def test_geomspace_and_sums_match_numpy() -> None:
    np.testing.assert_allclose(_linalg.geomspace(1e-2, 100.0, 23), np.geomspace(1e-2, 100.0, 23), rtol=1e-14)
    assert _linalg.geomspace(1e-2, 100.0, 23)[[0, -1]].tolist() == [1e-2, 100.0]
    assert _linalg.geomspace(3.0, 5.0, 1).tolist() == [3.0]
    a, b = np.arange(1.0, 40.0), np.linspace(-1.0, 1.0, 39)
    assert _linalg.dot(a, b) == pytest.approx(float(a @ b), rel=1e-14)
    M = np.outer(np.arange(3.0), a)
    np.testing.assert_allclose(_linalg.weighted_rows(M, b), M @ b, rtol=1e-14, atol=1e-12)


@pytest.mark.parametrize("seed", ["0", "1", "2"])
def test_the_main_jobs_game_keeps_its_plan(seed: str, tmp_path: Path) -> None:
    """The main job (scripts/main.sh) solves its FedPCS game afresh, so a change of the
    search, of how it prices ahead or of the kernels' arithmetic that moved the plan would
    move the main job's numbers. Each seed's plan, solved from an empty cache, has the bits
    that ``SOLVER_VERSION`` 8 gave at dcb44c9 (tests/incentives/data/main_job_plans.json:
    the rewards and φ as hex floats, ρ, α and the per-round cost as SHA-256 of their bytes).
    The plan is the same on every CPU kind (the test above), so this holds on every host;
    a deliberate change of the search bumps ``SOLVER_VERSION`` and rewrites the file."""
    import hashlib

    from fedgame.incentives.fedpcs import solve_plan
    from fedgame.incentives.fedpcs.plugin import SOLVER_VERSION
    from fedgame.pipeline.build import fedpcs_game
    from fedgame.pipeline.config import load_recipe

    want = json.loads((Path(__file__).parent / "data" / "main_job_plans.json").read_text())
    assert want["solver_version"] == SOLVER_VERSION
    game = fedpcs_game(load_recipe(ROOT / want["recipe"], [f"seed={seed}"]))
    assert game is not None
    plan = solve_plan(game, cache=tmp_path)
    w = want["seeds"][seed]
    assert [float(x).hex() for x in plan.reward] == w["reward"]
    assert [float(x).hex() for x in plan.phi] == w["phi"]
    for name in ("rho", "alpha", "cost"):
        got = hashlib.sha256(np.ascontiguousarray(getattr(plan, name), dtype=np.float64).tobytes()).hexdigest()
        assert got == w[f"sha256_{name}"], name
