"""Pure privacy maths (NumPy/SciPy only, no torch): zCDP, Gaussian calibration, the PHS paper's
calibration, tight DP-SGD accounting through dp-accounting, and JDP-FL's ledger."""

from __future__ import annotations

from fedgame.privacy.analysis.gaussian import analytic_gaussian_std, classic_gaussian_std, gaussian_delta
from fedgame.privacy.analysis.jdp import (
    JDPTotals,
    exponential_epsilon,
    gaussian_rdp_epsilon,
    jdp_paper_total,
    jdp_rdp_total,
    jdp_round_guarantee,
    jdp_totals,
    m3_noise_std,
    m3_sensitivity,
)
from fedgame.privacy.analysis.phs import (
    phs_epsilon_prime,
    phs_epsilon_spent,
    phs_noise_multiplier,
    phs_sigma,
    phs_V,
)
from fedgame.privacy.analysis.subsampled import dpsgd_epsilon, dpsgd_noise_multiplier, dpsgd_noise_multipliers
from fedgame.privacy.analysis.zcdp import (
    eps_to_zcdp,
    fedpcs_noise_std,
    fedpcs_sensitivity,
    gaussian_std_for_zcdp,
    zcdp_of_gaussian,
    zcdp_to_eps,
)

__all__ = [
    "gaussian_std_for_zcdp",
    "zcdp_of_gaussian",
    "zcdp_to_eps",
    "eps_to_zcdp",
    "fedpcs_sensitivity",
    "fedpcs_noise_std",
    "classic_gaussian_std",
    "analytic_gaussian_std",
    "gaussian_delta",
    "phs_epsilon_prime",
    "phs_V",
    "phs_sigma",
    "phs_noise_multiplier",
    "phs_epsilon_spent",
    "dpsgd_epsilon",
    "dpsgd_noise_multiplier",
    "dpsgd_noise_multipliers",
    "JDPTotals",
    "m3_sensitivity",
    "m3_noise_std",
    "exponential_epsilon",
    "jdp_round_guarantee",
    "jdp_paper_total",
    "gaussian_rdp_epsilon",
    "jdp_rdp_total",
    "jdp_totals",
]
