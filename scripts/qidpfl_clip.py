"""QI-DPFL's clipping threshold C for ``privacy.mode: paper_params`` (docs/qidpfl.md, "The paper's
regime"), chosen before any private run: Corollary 1 assumes every uploaded local model has
‖w_i(t)‖ ≤ C. The paper gives no C, and its figures (the only place its accuracy levels appear)
cannot be read as numbers, so C cannot be calibrated on FedAvg-DP's level as FedPCS's W was on
Random's. Instead C is the smallest bound (rounded up to 0.1) under which that assumption holds
on the non-private trajectory: the largest parameter norm the non-private FedAvg model
(recipes/qidpfl/fedavg.yaml, seed 0) reaches in any round, over the IID and Dirichlet(1.0)
splits. The clip then never binds on a model the noise has not moved, and no private method's
accuracy enters the choice.

    .venv/bin/python scripts/qidpfl_clip.py [OUT]   (default results/qidpfl_fmnist_paper_params/clip.json)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from fedgame.pipeline.build import build_engine
from fedgame.pipeline.config import load_recipe
from fedgame.pipeline.runner import code_version, cpu_model

ROOT = Path(__file__).resolve().parents[1]
SPLITS = {"iid": "{kind: iid, n_clients: 20}", "dirichlet": "{kind: dirichlet, n_clients: 20, alpha: 1.0}"}


def norms(split: str) -> list[float]:
    """‖w(t)‖ of the non-private FedAvg model before round 1 and after every round."""
    cfg = load_recipe(ROOT / "recipes/qidpfl/fedavg.yaml", [f"data.partition={SPLITS[split]}"])
    built = build_engine(cfg)
    engine = built.engine
    out = [float(torch.linalg.vector_norm(engine.params))]

    def record(_row: object) -> None:
        out.append(float(torch.linalg.vector_norm(engine.params)))
        print(f"{split} round {len(out) - 1}: norm {out[-1]:.4f}", flush=True)

    engine.run(cfg.train.rounds, on_round=record)
    built.close()
    return out


def main() -> None:
    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "results/qidpfl_fmnist_paper_params/clip.json"
    per_split = {split: norms(split) for split in SPLITS}
    largest = max(max(v) for v in per_split.values())
    clip = math.ceil(largest * 10.0) / 10.0
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(
        json.dumps(
            {
                "rule": "C = the largest parameter norm of the non-private FedAvg model (seed 0) over rounds and splits, rounded up to 0.1",
                "recipe": "recipes/qidpfl/fedavg.yaml",
                "seed": 0,
                "norms": per_split,
                "largest_norm": largest,
                "clip": clip,
                "cpu": cpu_model(),
                "code_version": code_version(ROOT),
            },
            indent=1,
        )
        + "\n"
    )
    print(f"C = {clip} (largest non-private model norm {largest:.4f}) -> {dest}")


if __name__ == "__main__":
    main()
