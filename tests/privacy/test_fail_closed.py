"""Privacy fails closed: no run reports privacy it did not give.

The four ways a run used to (issue "Fail closed"): DP-SGD with zero noise reported "formal";
``privacy: none`` reported ε = 0 for every client; a zCDP upload accounted at δ = 0.99 reported
a small ε; a plug-in plan that adds no noise but records an event was labelled "formal"."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.core.plugins import PluginConfig
from fedgame.pipeline.config import RecipeError, parse_recipe
from fedgame.pipeline.runner import run_one
from fedgame.privacy.events import PrivacyEvent
from fedgame.privacy.plans import PRIVACY_PLANS, ClientPrivacy, accounting_label
from fedgame.testing import check_privacy_plan

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
needs_fmnist = pytest.mark.skipif(not FMNIST.exists(), reason="Debian's dataset-fashion-mnist is not installed")


def tiny(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "tiny",
        "seed": 0,
        "data": {"dataset": "fashion_mnist", "max_train": 600, "max_test": 100, "partition": {"kind": "iid", "n_clients": 4}},
        "model": {"name": "logreg"},
        "train": {"rounds": 1, "clients_per_round": 2, "workers": 1, "threads": 1, "local": {"epochs": 1, "batch_size": 50, "lr": 0.1}},
    }
    raw.update(over)
    return raw


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDGAME_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def clean_plans() -> Iterator[None]:
    saved = (dict(PRIVACY_PLANS._items), dict(PRIVACY_PLANS._docs))
    yield
    PRIVACY_PLANS._items, PRIVACY_PLANS._docs = saved


def test_dpsgd_with_zero_noise_is_refused() -> None:
    with pytest.raises(RecipeError, match=r"privacy.noise_multiplier: Input should be greater than 0, got 0"):
        parse_recipe(tiny(privacy={"kind": "dpsgd", "noise_multiplier": 0}))


@needs_fmnist
def test_no_privacy_reports_infinite_epsilon_never_zero(tmp_path: Path) -> None:
    summary = run_one(parse_recipe(tiny(privacy={"kind": "none"})), tmp_path / "run")
    assert summary["privacy_accounting"] == "none"
    assert summary["epsilon_max"] is None and summary["epsilon_mean"] is None and summary["epsilon_per_client"] is None
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["epsilon_max"] is None and on_disk["privacy_accounting"] == "none"
    rows = list(csv.DictReader((tmp_path / "run" / "privacy.csv").open()))
    assert rows and all(float(r["epsilon"]) == float("inf") for r in rows)
    r = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "report")])
    assert r.exit_code == 0, r.output
    assert "| ∞ (1e-05) | ∞ | none |" in (tmp_path / "report" / "report.md").read_text()


@needs_fmnist
def test_an_accountant_delta_of_one_over_n_or_more_is_refused_for_every_plan(tmp_path: Path) -> None:
    """δ ≥ 1/n lets a mechanism publish an example in the clear: refused at validate for the
    zCDP upload plan (which has no δ of its own to agree with), as for DP-SGD; 150 examples
    per client here, so δ = 0.99 and δ = 0.01 are refused and 1e-3 is accepted."""
    for delta in (0.99, 0.01):
        raw = tiny(privacy={"kind": "zcdp_upload", "rho": 0.5}, accountant={"kind": "zcdp", "delta": delta})
        path = tmp_path / "r.yaml"
        path.write_text(json.dumps(raw))
        r = CliRunner().invoke(app, ["validate", str(path)])
        assert r.exit_code == 2 and "accountant.delta: must be < 1/n = 0.00667 for the largest client's n = 150 examples" in r.stderr
        assert f"got {delta:g}" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    ok = tiny(privacy={"kind": "zcdp_upload", "rho": 0.5}, accountant={"kind": "zcdp", "delta": 1e-3})
    assert run_one(parse_recipe(ok), tmp_path / "ok")["epsilon_max"] > 0


def _silent_plan() -> type[ClientPrivacy]:
    @PRIVACY_PLANS.register("silent_zcdp")
    class SilentZCDP(ClientPrivacy):
        """Adds no noise, yet records a zCDP event: fails open."""

        class Config(PluginConfig):
            kind: Literal["silent_zcdp"] = "silent_zcdp"

        def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
            return [(PrivacyEvent.zcdp(1e-9), 1)]

    return SilentZCDP


@needs_fmnist
def test_a_plugin_plan_is_unverified_until_its_contract_passes(tmp_path: Path, clean_plans: None) -> None:
    cls = _silent_plan()
    assert accounting_label(cls()) == "unverified"
    with pytest.raises(AssertionError, match="records privacy events but adds no noise"):
        check_privacy_plan(cls, draws=1000)
    assert accounting_label(cls()) == "unverified"  # a failed contract verifies nothing
    summary = run_one(parse_recipe(tiny(privacy={"kind": "silent_zcdp"}, accountant={"kind": "zcdp"})), tmp_path / "run")
    assert summary["privacy_accounting"] == "unverified"


def test_a_passing_contract_verifies_the_plugin_for_its_source_only(clean_plans: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedgame.privacy import plans
    from fedgame.privacy.mechanisms import GaussianMechanism

    @PRIVACY_PLANS.register("honest_upload")
    class HonestUpload(ClientPrivacy):
        class Config(PluginConfig):
            kind: Literal["honest_upload"] = "honest_upload"

        def upload(self, client: int, t: int, n_examples: int) -> GaussianMechanism:
            return GaussianMechanism(clip=1.0, noise_std=2.0, sensitivity=1.0)

        def events(self, client: int, t: int, n_examples: int, steps: int) -> list[tuple[PrivacyEvent, int]]:
            return [(PrivacyEvent.gaussian(noise_multiplier=2.0), 1)]

    assert accounting_label(HonestUpload()) == "unverified"
    check_privacy_plan(HonestUpload, draws=20_000)
    assert accounting_label(HonestUpload()) == "formal"
    monkeypatch.setattr(plans, "plan_source_hash", lambda cls: "an edited file")
    assert accounting_label(HonestUpload()) == "unverified"
