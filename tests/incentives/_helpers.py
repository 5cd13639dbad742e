"""Shared helpers for the FedPCS game tests: random instances and reference optimisers that
do not use the library's own solver (finite differences, SciPy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from fedgame.incentives.fedpcs import client_utility


@dataclass(frozen=True)
class Instance:
    rho0: np.ndarray
    varphi: np.ndarray
    phi: np.ndarray
    R: np.ndarray
    N: int
    K: int

    @property
    def T(self) -> int:
        return self.phi.size - 1


def random_instance(rng: np.random.Generator, *, n: int, N: int, K: int, T: int) -> Instance:
    """ρ^0 ~ U(0.5, 10), φ ~ U(2, 8), R ~ U(0.5, 4), ϕ ~ U(0.1, 0.9) (spec A2's draws), with
    ρ^0 kept below N·min φ so that x = ρ/(Nφ) < 1 (P smooth)."""
    phi = rng.uniform(2.0, 8.0, T + 1)
    hi = min(10.0, 0.9 * N * phi.min())
    return Instance(rng.uniform(0.5, hi, n), rng.uniform(0.1, 0.9, n), phi, rng.uniform(0.5, 4.0, T + 1), N, K)


def fd_lbfgsb(inst: Instance, i: int, a0: np.ndarray) -> tuple[np.ndarray, float]:
    """Maximise U_i with L-BFGS-B on finite-difference gradients (no adjoint) from ``a0``."""

    def f(z: np.ndarray) -> float:
        return -float(client_utility(z, inst.rho0[i], inst.varphi[i], inst.phi, inst.R, inst.N, inst.K))

    res = minimize(f, a0, method="L-BFGS-B", bounds=[(0.0, 1.0)] * inst.T, options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 10000})
    return res.x, -float(res.fun)
