"""fedgame inside a user's own Flower app: FedgameSampling around Flower's FedAvg draws the nodes
fedgame's way and weights them by Eq. 4; privacy_mod noises a user's reply at its scale and
charges the node's ledger. The docs' example (docs/examples/flower/wrapped_app.py) is run as the
user would run it, and in process on a grid that calls its ClientApp directly."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from scipy import stats  # noqa: E402

from fedgame.deploy.flower.wrap import KEY_RHO, METRIC_EPSILON, METRIC_RHO_TOTAL, FedgameSampling, privacy_mod  # noqa: E402
from fedgame.privacy.analysis.zcdp import zcdp_to_eps  # noqa: E402
from fedgame.selection.base import Uniform  # noqa: E402
from fedgame.selection.privacy_aware import PrivacyAware  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "flower" / "wrapped_app.py"


@pytest.fixture(autouse=True)
def task_identity() -> Iterator[None]:
    """Messages are stamped with the process's Flower task identity, which a ServerApp run sets."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def example() -> object:
    spec = importlib.util.spec_from_file_location("wrapped_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def train_message(d: int, rho: float | None, rnd: int = 1) -> Message:
    cfg = ConfigRecord({"server-round": rnd, **({KEY_RHO: rho} if rho is not None else {})})
    return Message(
        content=RecordDict({"arrays": ArrayRecord({"w": Array(np.zeros(d, dtype=np.float32))}), "config": cfg}),
        dst_node_id=1,
        message_type=MessageType.TRAIN,
    )


def context() -> Context:
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})


def replying(update: np.ndarray) -> object:
    def call_next(msg: Message, ctx: Context) -> Message:
        return Message(
            RecordDict({"arrays": ArrayRecord({"w": Array(update.astype(np.float32))}), "metrics": MetricRecord({"num-examples": 10})}),
            reply_to=msg,
        )

    return call_next


def test_privacy_mod_noise_has_its_scale_and_the_ledger_composes() -> None:
    """A zero update of 10⁵ coordinates comes back as N(0, σ²) with σ = 2C/√(2ρ) (chi-square
    interval on the sample variance, two-sided 1e-6); a long update is clipped to C before it;
    two rounds charge ρ twice and report ε = zcdp_to_eps(2ρ, δ)."""
    d, clip, rho = 100_000, 0.5, 0.08
    mod, ctx = privacy_mod(clip=clip, seed=11), context()
    out = mod(train_message(d, rho), ctx, replying(np.zeros(d)))  # type: ignore[arg-type]
    noise = out.content["arrays"]["w"].numpy().astype(np.float64)
    sigma = 2 * clip / math.sqrt(2 * rho)
    lo, hi = stats.chi2.ppf([5e-7, 1 - 5e-7], d - 1) / (d - 1)
    assert lo < noise.var(ddof=1) / sigma**2 < hi and abs(noise.mean()) < 6 * sigma / math.sqrt(d)
    m = out.content["metrics"]
    assert m[METRIC_RHO_TOTAL] == pytest.approx(rho) and m[METRIC_EPSILON] == pytest.approx(float(zcdp_to_eps(rho, 1e-5)))
    big = np.full(d, 10.0)  # norm 3162: clipped to 0.5, then noised
    out = mod(train_message(d, rho, rnd=2), ctx, replying(big))  # type: ignore[arg-type]
    got = out.content["arrays"]["w"].numpy().astype(np.float64)
    assert got.mean() == pytest.approx(clip / math.sqrt(d), abs=6 * sigma / math.sqrt(d))
    m = out.content["metrics"]
    assert m[METRIC_RHO_TOTAL] == pytest.approx(2 * rho) and m[METRIC_EPSILON] == pytest.approx(float(zcdp_to_eps(2 * rho, 1e-5)))


def test_privacy_mod_refuses_a_release_without_rho_and_passes_other_messages() -> None:
    out = privacy_mod(clip=1.0)(train_message(4, None), context(), replying(np.ones(4)))  # type: ignore[arg-type]
    assert out.has_error() and "no ρ for this round" in out.error.reason
    out = privacy_mod(clip=1.0, rho=2.0)(train_message(4, None), context(), replying(np.zeros(4)))  # type: ignore[arg-type]
    assert not out.has_error() and out.content["metrics"][METRIC_RHO_TOTAL] == pytest.approx(2.0)
    ev = Message(content=RecordDict({"config": ConfigRecord({})}), dst_node_id=1, message_type=MessageType.EVALUATE)
    sentinel = Message(RecordDict({"metrics": MetricRecord({"acc": 0.5})}), reply_to=ev)
    assert privacy_mod(clip=1.0)(ev, context(), lambda m, c: sentinel) is sentinel
    for bad, field in (({"clip": 0.0}, "clip"), ({"clip": 1.0, "rho": -1.0}, "rho"), ({"clip": 1.0, "delta": 1.0}, "delta")):
        with pytest.raises(ValueError, match=f"^{field}: "):
            privacy_mod(**bad)  # type: ignore[arg-type]


class LocalGrid:
    """Flower's Grid in this process: nodes 100 + i run the example's ClientApp (with its mod)
    on partition i, each with its own Context kept across messages, as a SuperNode keeps it."""

    def __init__(self, app: object, n: int) -> None:
        self.app, self.n = app, n
        self.contexts = {
            100 + i: Context(run_id=1, node_id=100 + i, node_config={"partition-id": i}, state=RecordDict(), run_config={})
            for i in range(n)
        }
        self.replies: list[Message] = []

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        replies = [self.app(m, self.contexts[m.metadata.dst_node_id]) for m in messages]  # type: ignore[operator]
        if replies:  # the last training round's replies (evaluation sends none here)
            self.replies = replies
        return list(replies)


def test_wrapped_fedavg_draws_by_rho_weights_by_eq4_and_pays_r_rho() -> None:
    """The example's ServerApp strategy on a local grid, 300 rounds: draw frequencies match
    x ∝ ρ (chi-square, p > 1e-4); each reply's weight is n_i m_i/(K x_i); the aggregate is
    FedAvg's average under those weights (self-normalised Eq. 4); each payment is R_t ρ_i; each
    node's reported ε is zcdp_to_eps of the ρ it was drawn for."""
    ex = example()
    rho, k, rounds = ex.RHO, 2, 300  # type: ignore[attr-defined]
    reward = np.linspace(1.0, 0.5, rounds)
    grid = LocalGrid(ex.client_app, 3)  # type: ignore[attr-defined]
    s = FedgameSampling(
        FedAvg(fraction_train=1.0, fraction_evaluate=0.0), PrivacyAware(rho=rho), clients_per_round=k, rho=rho, reward=reward, seed=1
    )
    result = s.start(
        grid=grid,
        initial_arrays=ArrayRecord({"w": Array(np.zeros(ex.FEATURES))}),  # type: ignore[arg-type,attr-defined]
        num_rounds=rounds,
    )
    x = rho / rho.sum()
    draws = np.array([d - 100 for r in s.records for d in r.draws])
    counts = np.bincount(draws, minlength=3)
    assert counts.sum() == k * rounds and stats.chisquare(counts, k * rounds * x).pvalue > 1e-4
    spent = np.zeros(3)
    for t, r in enumerate(s.records):
        drawn = np.array(r.draws) - 100
        for node, w in r.weights.items():
            i = node - 100
            m = int(np.sum(drawn == i))
            assert w == pytest.approx(ex.NODE_SIZES[i] * m / (k * x[i]), rel=1e-12)  # type: ignore[attr-defined]
            assert r.payments[node] == pytest.approx(reward[t] * rho[i], rel=1e-12)
            spent[i] += rho[i]
            assert r.epsilon[node] == pytest.approx(float(zcdp_to_eps(spent[i], 1e-5)), rel=1e-9)
        assert r.missing == [] and sorted(r.replied) == sorted(r.weights)
    # the last round's aggregate: the replies averaged with the recorded weights
    last = s.records[-1]
    arrays = {m.metadata.src_node_id: m.content["arrays"]["w"].numpy() for m in grid.replies}
    want = sum(last.weights[n] * arrays[n] for n in last.weights) / sum(last.weights.values())
    np.testing.assert_allclose(result.arrays["w"].numpy(), want, rtol=1e-6)


def test_the_wrapper_refuses_what_it_cannot_honour() -> None:
    fa = FedAvg()
    with pytest.raises(TypeError, match="^strategy: "):
        FedgameSampling(object(), Uniform(), clients_per_round=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^clients_per_round: "):
        FedgameSampling(fa, Uniform(), clients_per_round=0)
    with pytest.raises(ValueError, match="^rho: "):
        FedgameSampling(fa, Uniform(), clients_per_round=1, rho=[1.0, -2.0])
    with pytest.raises(ValueError, match="^reward: payments"):
        FedgameSampling(fa, Uniform(), clients_per_round=1, reward=[1.0])
    with pytest.raises(ValueError, match="^aggregation: "):
        FedgameSampling(fa, Uniform(), clients_per_round=1, aggregation="median")  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_docs_example_runs_in_flower_simulation(tmp_path: Path) -> None:
    """``python docs/examples/flower/wrapped_app.py`` as the user runs it (Flower's simulation,
    three nodes): three rounds, each drawn node sent its ρ, paid R_t ρ_i, and its ε reported."""
    out, log = tmp_path / "out.json", tmp_path / "rounds.jsonl"
    env = {**os.environ, "FEDGAME_WRAP_OUT": str(out), "FEDGAME_WRAP_LOG": str(log)}
    r = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(out.read_text())
    ex = example()
    assert len(got["nodes"]) == 3 and len(got["rounds"]) == ex.ROUNDS  # type: ignore[attr-defined]
    assert [json.loads(ln) for ln in log.read_text().splitlines()] == got["rounds"]
    spent: dict[str, float] = {}
    for t, rec in enumerate(got["rounds"]):
        assert len(rec["draws"]) == 2 and set(rec["draws"]) <= set(got["nodes"])
        for node, paid in rec["payments"].items():
            rho = ex.RHO[got["nodes"].index(int(node))]  # type: ignore[attr-defined]
            assert paid == pytest.approx(ex.REWARD[t] * rho)  # type: ignore[attr-defined]
            spent[node] = spent.get(node, 0.0) + rho
            assert rec["epsilon"][node] == pytest.approx(float(zcdp_to_eps(spent[node], 1e-5)))
    assert np.all(np.isfinite(got["w"])) and len(got["w"]) == ex.FEATURES  # type: ignore[attr-defined]


def test_fedgame_draws_under_flowers_central_dp_wrapper_and_its_accountant() -> None:
    """Flower's DifferentialPrivacyServerSideFixedClipping (with its dp-accounting RDP
    accountant, no amplification) inside FedgameSampling: 3 rounds of 2 distinct nodes drawn
    without replacement, unweighted mean; the ε Flower reports equals fedgame's own
    central_dp_epsilon for the same releases (q = 1, the plain Gaussian at multiplier z); the
    wrapper refuses weighted aggregation and draws with repeats, which would break the noise's
    calibration."""
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
    from flwr.supercore.privacy_accounting import NeighboringRelation, PrivacyConfig, SamplingMethod
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    from fedgame.privacy.central import central_dp_epsilon

    ex = example()
    z, clip, k, rounds = 1.2, 1.0, 2, 3
    acc = RdpAccountant(
        PrivacyConfig(
            target_delta=1e-5,
            population_size=3,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
        )
    )
    # the inner FedAvg configures k nodes (the wrapper checks it against num_sampled_clients); fedgame redraws them
    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=0.67, fraction_evaluate=0.0), z, clip, k, accountant=acc)
    from flwr.clientapp import ClientApp

    plain = ClientApp()  # the example's training without fedgame's mod: the server adds the noise here
    plain.train()(ex.train)  # type: ignore[attr-defined]
    grid = LocalGrid(plain, 3)
    s = FedgameSampling(dp, Uniform(replace=False), clients_per_round=k, aggregation="mean", seed=0)
    s.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros(ex.FEATURES))}), num_rounds=rounds)  # type: ignore[arg-type,attr-defined]
    assert all(len(set(r.draws)) == k and set(r.weights.values()) == {1.0} for r in s.records)
    spent = dp.privacy_spent()
    assert spent is not None and spent.num_releases == rounds
    want = central_dp_epsilon(z, population_size=3, sample_size=3, rounds=rounds, delta=1e-5, sampling="poisson")
    assert spent.epsilon == pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="^aggregation: Flower's DifferentialPrivacyServerSideFixedClipping"):
        FedgameSampling(dp, Uniform(replace=False), clients_per_round=k)
    rep = FedgameSampling(
        DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=0.67, fraction_evaluate=0.0), z, clip, k),
        PrivacyAware(rho=ex.RHO),
        clients_per_round=k,
        aggregation="mean",
        seed=0,
    )  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="^selection: Flower's .* needs exactly clients_per_round = 2 distinct"):
        for _ in range(50):  # x ∝ ρ with replacement repeats its heaviest node soon
            rep.configure_train(1, ArrayRecord({"w": Array(np.zeros(ex.FEATURES))}), ConfigRecord(), grid)  # type: ignore[arg-type,attr-defined]


def test_a_wrapper_restored_from_its_state_dict_draws_what_the_uninterrupted_one_draws() -> None:
    """A ServerApp that stops after round 3 and resumes with ``load_state_dict`` in a fresh
    wrapper (same strategy, selection and seed) draws rounds 4-6 exactly as a wrapper that never
    stopped, and keeps the earlier rounds' records; the state survives a JSON round trip."""
    ex = example()
    rho = ex.RHO  # type: ignore[attr-defined]

    def wrapper() -> FedgameSampling:
        return FedgameSampling(
            FedAvg(fraction_train=1.0, fraction_evaluate=0.0), PrivacyAware(rho=rho), clients_per_round=2, rho=rho, seed=7
        )

    def run(s: FedgameSampling, rounds: int) -> None:
        s.start(grid=LocalGrid(ex.client_app, 3), initial_arrays=ArrayRecord({"w": Array(np.zeros(ex.FEATURES))}), num_rounds=rounds)  # type: ignore[arg-type,attr-defined]

    whole = wrapper()
    run(whole, 6)
    first = wrapper()
    run(first, 3)
    saved = first.state_dict()
    text = json.dumps({**saved, "sizes": None}, default=lambda o: o.tolist())
    resumed = wrapper()
    resumed.load_state_dict({**json.loads(text), "sizes": saved["sizes"]})
    assert [r.to_json() for r in resumed.records] == [r.to_json() for r in whole.records[:3]]
    later = [
        resumed.configure_train(t, ArrayRecord({"w": Array(np.zeros(ex.FEATURES))}), ConfigRecord(), LocalGrid(ex.client_app, 3))
        for t in (4, 5, 6)
    ]  # type: ignore[attr-defined]
    assert [[m.metadata.dst_node_id for m in msgs] for msgs in later] == [
        sorted(set(r.draws), key=r.draws.index) for r in whole.records[3:]
    ]
    assert [r.draws for r in resumed.records[3:]] == [r.draws for r in whole.records[3:]]
