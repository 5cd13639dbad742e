"""Solve FedPCS's game over the accuracy scale κ and write results/fedpcs_kappa_sweep/.

Resumable: a κ already solved under ``--out``/runs is skipped. The library does the work
(:func:`fedgame.experiments.kappa_sweep.run_sweep`); ``fedgame report <out>/runs --kind
kappa-sweep`` regenerates the tables from the per-κ files alone.

    .venv/bin/python scripts/fedpcs_kappa_sweep.py [--out DIR] [--kappa K ...] [--seed S]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from fedgame.experiments.kappa_sweep import KAPPA_GRID, run_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=Path("results/fedpcs_kappa_sweep"))
    ap.add_argument("--kappa", type=float, nargs="+", default=list(KAPPA_GRID))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_sweep(args.out, args.kappa, seed=args.seed)


if __name__ == "__main__":
    main()
