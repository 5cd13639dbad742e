"""The games of ``fedgame solve``, posed as JSON and solved on their own, without training.

Each solver takes the parsed JSON problem (a dict), validates every field before any work
(:class:`ProblemError`, one line per bad field, naming the field, the value and the allowed range)
and returns the solution as a JSON-ready dict:

* :func:`solve_fedpcs`, :func:`solve_qidpfl`, :func:`solve_jdp` (:mod:`.problems`): FedPCS's
  reward game, QI-DPFL's screening and reward game, JDP-FL's recruitment auctions;
* :func:`solve_phs` (:mod:`.phs_json`): PHS Problem 1, the clients' sampling probabilities.

The maths is the library's (:mod:`fedgame.incentives`, :mod:`fedgame.selection.phs_problem`);
this package is only their input and output, beside the CLI.
"""

from fedgame.solve.phs_json import PHSProblem, parse_phs_problem, solve_phs
from fedgame.solve.problems import (
    FedPCSProblem,
    JDPProblem,
    ProblemError,
    QIDPFLProblem,
    parse_jdp_problem,
    parse_qidpfl_problem,
    solve_fedpcs,
    solve_jdp,
    solve_qidpfl,
)

__all__ = [
    "FedPCSProblem",
    "JDPProblem",
    "PHSProblem",
    "ProblemError",
    "QIDPFLProblem",
    "parse_jdp_problem",
    "parse_phs_problem",
    "parse_qidpfl_problem",
    "solve_fedpcs",
    "solve_jdp",
    "solve_phs",
    "solve_qidpfl",
]
