"""What a Flower ClientApp process imports. Flower 1.41 starts one per message, so every module
it imports is paid again for each message: reading a recipe must not import dp-accounting
(about a second of CPU, ``scipy.signal`` included) nor Numba (about 0.2 s), which only the
server's accounting and game solves use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")

CODE = """
import sys
import fedgame.deploy.flower.client_app as app
from fedgame.pipeline.config import load_recipe
for recipe in ("recipes/main/dp_fedavg.yaml", "recipes/main/fedpcs.yaml"):
    cfg = load_recipe(recipe, ["data.max_train=600", "data.max_test=200", "data.partition.n_clients=3", "data.partition.min_size=30", "train.clients_per_round=2"])
    app._side(cfg)  # what the ClientApp builds for its first train message
print(sorted(m for m in ("dp_accounting", "numba") if m in sys.modules))
from fedgame.privacy.accountants import make_accountant
from fedgame.privacy.events import PrivacyEvent
from fedgame.incentives.fedpcs import _kernels
acc = make_accountant("rdp", n_clients=1)
acc.record([0], PrivacyEvent.subsampled_gaussian(1.0, 0.1), 3)
acc.epsilon(0, 1e-5)
_kernels.riccati
print(sorted(m for m in ("dp_accounting", "numba") if m in sys.modules))
"""


@pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")
def test_a_client_app_reads_its_recipe_without_dp_accounting_or_numba() -> None:
    """A ClientApp's imports and its client side for a DP-SGD and a FedPCS recipe leave
    ``dp_accounting`` and ``numba`` unimported; an accountant's ε and the game kernels, which
    need them, then import them (so the check sees them when they are there)."""
    out = subprocess.run([sys.executable, "-c", CODE], check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "['dp_accounting', 'numba']"
