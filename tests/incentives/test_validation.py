"""Bad inputs: every error names the field, the value given and the allowed range."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedgame.incentives.fedpcs import (
    accuracy_weights,
    adaptive_k,
    adaptive_schedule,
    best_response,
    mean_field,
    optimal_reward,
    participation_factor,
    social_optimum,
    stackelberg,
    theorem7,
)

PHI = np.full(6, 5.0)  # T = 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"varphi": [0.3, 0.3, 0.3, 1.2]}, "clients[3].varphi: must be in (0, 1), got 1.2"),
        ({"varphi": [0.3, 0.0, 0.3, 0.3]}, "clients[1].varphi: must be in (0, 1), got 0"),
        ({"rho0": [1.0, -1.0, 2.0, 3.0]}, "clients[1].rho0: must be > 0, got -1"),
        ({"rho0": [1.0, 2.0, np.nan, 3.0]}, "clients[2].rho0: must be > 0, got nan"),
        ({"varphi": [0.3, 0.3]}, "varphi: expected 4 values (one per client, like rho0), got 2"),
        ({"K": 11}, "K: must be in [1, N] = [1, 10], got 11"),
        ({"K": 0}, "K: must be in [1, N] = [1, 10], got 0"),
        ({"K": 2.5}, "K: must be an integer in [1, N]"),
        ({"N": 0}, "N: must be an integer >= 1, got 0"),
        ({"R": [1.0, 2.0, 3.0, 4.0]}, "R: expected a number or a list of T+1 = 6 values, got 4"),
        ({"R": -1.0}, "R[0]: must be >= 0, got -1"),
        ({"phi": [5.0, 5.0, -1.0, 5.0, 5.0, 5.0]}, "phi[2]: must be > 0, got -1"),
        ({"phi": [5.0]}, "T: must be >= 1, got 0"),
        ({"alpha_init": np.full((4, 3), 0.5)}, "alpha_init: expected shape (4, 5) or (4, 6)"),
        ({"alpha_init": np.full((4, 5), 1.5)}, "alpha_init: values must be in [0, 1]"),
        ({"solver": "bfgs"}, "solver: must be 'newton' or 'lbfgsb', got 'bfgs'"),
        ({"n_starts": -1}, "n_starts: must be an integer >= 0, got -1"),
    ],
)
def test_best_response_rejects_bad_inputs(kwargs: dict, message: str) -> None:
    args = dict(rho0=[1.0, 2.0, 3.0, 4.0], varphi=[0.3] * 4, phi=PHI, R=2.0, N=10, K=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        best_response(**args)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"T": 0}, "T: must be >= 1, got 0"),
        ({"K": 5}, "K: must be in [1, N] = [1, 4], got 5"),
        ({"R": [1.0, 2.0]}, "R: expected a number or a list of T+1 = 4 values, got 2"),
        ({"varphi": [0.5, 0.5, 1.0, 0.5]}, "clients[2].varphi: must be in (0, 1), got 1"),
        ({"rho0": [1.0, 0.0, 2.0, 3.0]}, "clients[1].rho0: must be > 0, got 0"),
        ({"tol": 0.0}, "tol: must be > 0, got 0"),
        ({"max_iter": 0}, "max_iter: must be an integer >= 1, got 0"),
        ({"beta": 1.5}, "beta: must satisfy 0 < beta_min <= beta <= 1"),
        ({"phi_init": [1.0, 1.0, 1.0]}, "phi_init: expected a number or a list of T+1 = 4"),
        ({"restarts": "never"}, "restarts: must be 'final', 'every' or 'none', got 'never'"),
        ({"acceleration": "broyden"}, "acceleration: must be None or 'anderson'"),
    ],
)
def test_mean_field_rejects_bad_inputs(kwargs: dict, message: str) -> None:
    args = dict(rho0=[1.0, 2.0, 3.0, 4.0], varphi=[0.5] * 4, R=2.0, K=2, T=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        mean_field(**args)


def test_other_entry_points_name_their_fields() -> None:
    with pytest.raises(ValueError, match=re.escape("gamma: must be in (0, 1), got 1")):
        accuracy_weights(3, gamma=1.0)
    with pytest.raises(ValueError, match=re.escape("T: must be >= 1, got 0")):
        accuracy_weights(0)
    with pytest.raises(ValueError, match=re.escape("gamma: must be in (0, 1), got 0")):
        optimal_reward([1.0], [2.0], [0.5], [1.0], 0.0)
    with pytest.raises(ValueError, match=re.escape("budget: must be > 0, got -5")):
        theorem7(1.0, 1.0, 1.0, 0.5, -5.0, 10)
    with pytest.raises(ValueError, match=re.escape("H: must be finite, and > 0 when G = 0, got 0.0")):
        theorem7(0.0, 0.0, 1.0, 0.5, 100.0, 10)
    # a negative intercept of the averaged linear response is fine while G > 0
    neg = theorem7(1.0, -1.0, 1.0, 0.5, 5.0, 10)
    assert neg.rho_star == pytest.approx(4.0 ** (1 / 3)) and neg.R_star == pytest.approx(4.0 ** (1 / 3) + 1.0)
    slack = theorem7(1.0, -1.0, 1.0, 0.5, 100.0, 10)  # slack budget: K = N, ρ stays > 0
    assert slack.K == 10 and slack.rho_star > 0
    with pytest.raises(ValueError, match=re.escape("budget: must be >= rho* = 4")):
        adaptive_k(3.0, 4.0, 10)
    with pytest.raises(ValueError, match=re.escape("N: must be an integer >= 1, got 0")):
        adaptive_k(30.0, 4.0, 0)
    with pytest.raises(ValueError, match=re.escape("budget[1]: must be > 0, got 0")):
        adaptive_schedule(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)), 1.0, 0.5, [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=re.escape("clients[0].varphi: must be in (0, 1)")):
        social_optimum([1.0], [0.0, 0.5])
    with pytest.raises(ValueError, match=re.escape("rho_max: must be >= rho_min")):
        participation_factor(10, 2, 1.0, 0.5)
    with pytest.raises(ValueError, match=re.escape("beta_R: must be in (0, 1], got 0")):
        stackelberg([1.0, 2.0], [0.5, 0.5], 1, 2, v=1.0, beta_R=0.0, server_solver="lemma2")
