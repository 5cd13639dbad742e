"""JDP-FL Fig. 2 and the payments figure from the auctions alone, into DEST (results/jdp_auction).

Resumable: points already solved under DEST/runs are kept. The library does the work
(:func:`fedgame.experiments.jdp_auction_figs.solve_and_write`).

    .venv/bin/python scripts/jdp_auction_figs.py DEST [--seeds 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from fedgame.experiments.jdp_auction_figs import solve_and_write


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--seeds", type=int, default=100, help="instances per point (the reference means used 100)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.seeds < 1:
        ap.error(f"--seeds: must be >= 1 (instances per point), got {args.seeds}")
    logging.basicConfig(level=logging.INFO)
    solve_and_write(args.dest, seeds=args.seeds, seed=args.seed)


if __name__ == "__main__":
    main()
