"""FedPCS's game-level figures (Figs. 4-8) from cached game plans, into results/fedpcs_figures.

A seed whose plan is not in the game cache is refused (a solve takes about 15 CPU minutes: run
the recipe first). The library does the work
(:func:`fedgame.experiments.fedpcs_figures.figures_from_recipes`).

    .venv/bin/python scripts/fedpcs_figures.py [--seeds 0 1] [--dest DIR] [--recipe R] [--random-recipe R] [--budget B0 B1]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from fedgame.experiments.fedpcs_figures import figures_from_recipes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--dest", type=Path, default=Path("results/fedpcs_figures"))
    ap.add_argument("--recipe", type=Path, default=Path("recipes/fedpcs/fmnist.yaml"))
    ap.add_argument("--random-recipe", type=Path, default=Path("recipes/fedpcs/random.yaml"))
    ap.add_argument("--budget", type=float, nargs=2, default=[700.0, 300.0], metavar=("B_START", "B_END"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    figures_from_recipes(
        args.dest, seeds=args.seeds, recipe=args.recipe, random_recipe=args.random_recipe, budget=(args.budget[0], args.budget[1])
    )


if __name__ == "__main__":
    main()
