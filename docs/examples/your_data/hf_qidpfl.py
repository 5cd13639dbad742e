"""Example c of docs/your_data.md: a Hugging Face ``datasets.Dataset`` built in memory, split by
flwr-datasets' ``DirichletPartitioner``, run through ``fedgame.run_one`` with QI-DPFL's
quality screening and reward game (QI-DPFL Eqs. 8-10, Algorithm 1).

The images are Fashion-MNIST's, read from Debian's IDX files (``dataset-fashion-mnist``) into
arrays and wrapped as ``datasets.Dataset`` objects, as a Flower user holds their data; nothing is
downloaded. Needs the ``hf`` extra (``pip install 'fedgame[hf]'``)::

    .venv/bin/python docs/examples/your_data/hf_qidpfl.py runs/hf_qidpfl            # full: 20 clients, 30 rounds
    .venv/bin/python docs/examples/your_data/hf_qidpfl.py runs/hf_qidpfl --smoke    # 2,000 images, 3 rounds
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path
from typing import Any

import numpy as np

FMNIST = Path("/usr/share/datasets/fashion-mnist")
RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "qidpfl" / "fmnist.yaml"


def idx(path: Path) -> np.ndarray:
    """An IDX file (gzipped) as an array: the magic number's last byte is the rank."""
    raw = gzip.open(path).read()
    rank = raw[3]
    dims = np.frombuffer(raw[4 : 4 + 4 * rank], dtype=">u4")
    return np.frombuffer(raw[4 + 4 * rank :], dtype=np.uint8).reshape(tuple(int(d) for d in dims))


def hf_fashion_mnist(n_train: int | None, n_test: int | None) -> tuple[Any, Any]:
    """Fashion-MNIST as two in-memory ``datasets.Dataset``\\ s with columns ``x`` (1×28×28 uint8) and ``label``."""
    from datasets import Dataset

    def part(images: str, labels: str, n: int | None) -> Any:
        x = idx(FMNIST / images)[:n].reshape(-1, 1, 28, 28)
        y = idx(FMNIST / labels)[:n].astype(np.int64)
        return Dataset.from_dict({"x": x, "label": y})

    return (
        part("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", n_train),
        part("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", n_test),
    )


def run(out: str | Path, *, smoke: bool = False, seed: int = 0) -> dict[str, Any]:
    """Partition with flwr-datasets, then train with fedgame; returns the run's summary."""
    from flwr_datasets.partitioner import DirichletPartitioner

    from fedgame.data import from_hf
    from fedgame.pipeline.config import load_recipe
    from fedgame.pipeline.runner import run_one

    train, test = hf_fashion_mnist(2000 if smoke else None, 500 if smoke else None)
    n_clients = 20
    partitioner = DirichletPartitioner(num_partitions=n_clients, partition_by="label", alpha=1.0, seed=seed, min_partition_size=10)
    split = from_hf(train, test, x="x", label="label", partitioner=partitioner, name="fashion_mnist_hf")
    sets = ["data.partition={kind: natural, column: partition}", f"seed={seed}"]
    if smoke:
        sets += ["train.rounds=3", "train.eval_every=3"]
    cfg = load_recipe(RECIPE, sets)
    return run_one(cfg, out, data=split)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    summary = run(a.out, smoke=a.smoke, seed=a.seed)
    print(f"final accuracy {100 * summary['final_accuracy']:.2f} % into {a.out}")
