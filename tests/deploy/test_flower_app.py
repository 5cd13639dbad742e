"""`fedgame flower app` without a federation: the folder is a valid Flower app (Flower's own
validator and run-config reader accept it), the recipe survives the TOML round trip exactly,
`--run-config` overrides reach the ServerApp, and bad input is refused naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from flwr.cli.config_utils import load_and_validate  # noqa: E402
from flwr.common.config import get_fused_config_from_dir, parse_config_args  # noqa: E402

from fedgame.cli import app as cli  # noqa: E402
from fedgame.deploy.flower.deployment import DeploymentConfig, connection_toml, supernode_commands, write_app  # noqa: E402
from fedgame.pipeline.config import load_recipe, parse_recipe  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "main" / "dp_fedavg.yaml"


def test_the_app_is_a_flower_app_carrying_the_resolved_recipe(tmp_path: Path) -> None:
    cfg = load_recipe(RECIPE, ['name=dp "quoted" \\ ünïcode', "data.partition.n_clients=4", "train.clients_per_round=2"])
    path = write_app(cfg, tmp_path / "app", out=tmp_path / "out", round_timeout=30, on_missing="fail")
    config, _ = load_and_validate(path)  # Flower's checks, components importable included
    assert config["project"]["name"] == "fedgame-dp-quoted-n-code"
    assert config["tool"]["flwr"]["app"]["components"] == {
        "serverapp": "fedgame.deploy.flower.server_app:app",
        "clientapp": "fedgame.deploy.flower.client_app:app",
    }
    run_config: dict[str, Any] = get_fused_config_from_dir(tmp_path / "app", {})  # what the ServerApp receives
    dep = DeploymentConfig.from_run_config(run_config)
    assert parse_recipe(yaml.safe_load(dep.recipe)) == cfg
    assert (dep.out, dep.on_missing, dep.timeout, dep.register_timeout, dep.resume) == (str(tmp_path / "out"), "fail", 30.0, 300.0, False)
    over = get_fused_config_from_dir(tmp_path / "app", parse_config_args(["on-missing='continue' round-timeout=0"]))
    assert DeploymentConfig.from_run_config(over).on_missing == "continue" and DeploymentConfig.from_run_config(over).timeout is None
    readme = (tmp_path / "app" / "README.md").read_text()
    assert "partition-id=3 num-partitions=4" in readme and "flwr run" in readme


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"on-missing": "skip"}, "'on-missing' must be 'continue' or 'fail', got 'skip'"),
        ({"round-timeout": -1.0}, "'round-timeout' must be a number of seconds >= 0"),
        ({"register-timeout": 0.0}, "'register-timeout' must be a number of seconds > 0, got 0.0"),
        ({"out": "relative/dir"}, "'out' must be an absolute path"),
        ({"resume": "yes"}, "'resume' must be true or false, got 'yes'"),
        ({"rounds": 3}, "unknown key(s) ['rounds']"),
    ],
)
def test_bad_run_config_names_the_key(change: dict[str, Any], message: str) -> None:
    good: dict[str, Any] = {"recipe": "name: x\n", "out": "/tmp/x"}
    with pytest.raises(ValueError) as e:
        DeploymentConfig.from_run_config({**good, **change})
    assert message in str(e.value)


def test_commands_and_connection() -> None:
    cmds = supernode_commands(2, "10.0.0.1:8000", first_port=9100)
    assert cmds[1] == 'flower-supernode --insecure --superlink 10.0.0.1:8000 --port 9101 --node-config "partition-id=1 num-partitions=2"'
    assert connection_toml("lab", "10.0.0.1:8000", insecure=False, root_certificates="/ca.crt") == (
        '[superlink.lab]\naddress = "10.0.0.1:8000"\nroot-certificates = "/ca.crt"\n'
    )
    with pytest.raises(ValueError, match="nodes: must be >= 1, got 0"):
        supernode_commands(0, "x:1")


def test_cli_flower_app(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["flower", "app", str(RECIPE), str(tmp_path / "a"), "--nodes", "3", "--set", "train.clients_per_round=2"])
    assert r.exit_code == 0, r.output
    assert "3 clients" in r.output and "partition-id=2 num-partitions=3" in r.output
    bad = CliRunner().invoke(cli, ["flower", "app", str(RECIPE), str(tmp_path / "b"), "--nodes", "3"])
    assert bad.exit_code == 2 and "train.clients_per_round: must be <= data.partition.n_clients (3)" in bad.output
    clash = CliRunner().invoke(
        cli, ["flower", "app", str(RECIPE), str(tmp_path / "c"), "--nodes", "3", "--set", "data.partition.n_clients=4"]
    )
    assert clash.exit_code == 2 and "--nodes 3 contradicts" in clash.output
    jdp = Path(__file__).resolve().parents[2] / "recipes" / "jdp" / "fig3.yaml"
    if jdp.exists():
        r = CliRunner().invoke(cli, ["flower", "app", str(jdp), str(tmp_path / "d")])  # JDP-FL deploys too
        assert r.exit_code == 0 and "20 clients" in r.output, r.output
