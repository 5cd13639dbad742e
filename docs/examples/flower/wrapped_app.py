"""A Flower user's own app with fedgame's mechanisms added by wrapping (docs/flower.md).

The user's parts are ordinary Flower: a ClientApp whose ``train`` fits a linear model by a few
steps of gradient descent on the node's own data, and a ServerApp that runs Flower's ``FedAvg``.
fedgame adds two wrappers and nothing else:

* the ServerApp wraps ``FedAvg`` in :class:`~fedgame.deploy.flower.wrap.FedgameSampling`: each
  round draws K = 2 nodes with privacy-aware sampling x_i ∝ ρ_i (FedPCS Sec. III-C), sends each
  drawn node its ρ_i, weights the replies by Eq. 4's n_i m_i/(K x_i) and records the payments
  R_t ρ_i and every node's ε;
* the ClientApp adds :func:`~fedgame.deploy.flower.wrap.privacy_mod`: the node's displacement is
  clipped to C = 1 and noised for ρ_i-zCDP, and its privacy ledger travels in its Context.

Run it in Flower's simulation (three nodes), from the repository root::

    python docs/examples/flower/wrapped_app.py

or deploy it like any Flower app (``flwr run``), with ``server_app`` and ``client_app`` as the
app's components. ``NODE_SIZES`` stands in for each silo's own data; on a real node ``load_data``
would read the silo's files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedgame.deploy.flower.wrap import FedgameSampling, privacy_mod
from fedgame.selection.privacy_aware import PrivacyAware

FEATURES = 5
NODE_SIZES = (40, 120, 300)  # examples per node: the silos differ in size
RHO = np.array([0.5, 2.0, 8.0])  # each node's zCDP budget per round (what FedPCS's game would set)
REWARD = np.array([1.0, 1.0, 0.5])  # R_t, the server's reward per unit of ρ in round t
ROUNDS = 3
TRUE_W = np.linspace(-1.0, 1.0, FEATURES)


def load_data(partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The node's own examples (here drawn from its id; on a real node, its files)."""
    rng = np.random.default_rng(partition_id)
    x = rng.normal(size=(NODE_SIZES[partition_id], FEATURES))
    return x, x @ TRUE_W + 0.1 * rng.normal(size=len(x))


# -- the user's ClientApp, with fedgame's mod added --------------------------------------------------
client_app = ClientApp(mods=[privacy_mod(clip=1.0)])


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    x, y = load_data(int(context.node_config["partition-id"]))
    w = msg.content["arrays"]["w"].numpy().astype(np.float64)
    for _ in range(10):  # full-batch gradient descent on the squared loss
        w -= 0.1 * x.T @ (x @ w - y) / len(y)
    loss = float(np.mean((x @ w - y) ** 2))
    return Message(
        RecordDict({"arrays": ArrayRecord({"w": Array(w)}), "metrics": MetricRecord({"num-examples": len(y), "train-loss": loss})}),
        reply_to=msg,
    )


# -- the user's ServerApp, FedAvg wrapped ------------------------------------------------------------
server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    strategy = FedgameSampling(
        FedAvg(fraction_train=1.0, fraction_evaluate=0.0),
        PrivacyAware(rho=RHO),
        clients_per_round=2,
        rho=RHO,
        reward=REWARD,
        seed=0,
        log_path=os.environ.get("FEDGAME_WRAP_LOG"),
    )
    result = strategy.start(
        grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros(FEATURES))}), num_rounds=ROUNDS, train_config=ConfigRecord({"lr": 0.1})
    )
    out = os.environ.get("FEDGAME_WRAP_OUT")
    if out:  # what the docs' test reads back
        Path(out).write_text(
            json.dumps(
                {"w": result.arrays["w"].numpy().tolist(), "nodes": strategy.nodes, "rounds": [r.to_json() for r in strategy.records]}
            )
        )
    for r in strategy.records:
        print(f"round {r.round}: drew {r.draws}, weights {r.weights}, paid {r.payments}, ε {r.epsilon}")


if __name__ == "__main__":
    from flwr.simulation import run_simulation

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=len(NODE_SIZES),
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
