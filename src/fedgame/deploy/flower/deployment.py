"""A deployable Flower app for a recipe: the folder ``flwr run DIR <connection>`` submits to a SuperLink.

:func:`write_app` writes ``DIR/pyproject.toml`` (and a ``README.md`` with the commands to start
the federation). The app holds no code: its components point at fedgame's modules, installed on
the SuperLink's machine and on every SuperNode's machine —

* ``serverapp = "fedgame.deploy.flower.server_app:app"``,
* ``clientapp = "fedgame.deploy.flower.client_app:app"`` —

and its run config (``[tool.flwr.app.config]``, see :class:`DeploymentConfig`) carries the
*resolved* recipe as one YAML string, so the ServerApp and every ClientApp build exactly the same
dataset, partition and model (the nodes' registration checks the partition fingerprint), plus
where the ServerApp writes the results folder and what it does about missing replies. Any key
can be overridden at submission: ``flwr run DIR conn --run-config "on-missing='fail'"``.

A *silo* app (``silo = true``, ``fedgame flower app --silo``) starts every SuperNode with its
own data folder instead of a partition id (``--node-config "data-dir='/srv/silo-a'"``): each node
reads its own files with the recipe's dataset plug-in, and the ServerApp builds the run from
what the nodes report, never opening their data (:mod:`fedgame.deploy.flower.silo`).

Which SuperLink ``flwr run`` talks to is *not* in the app: Flower 1.42 reads named connections
from ``$FLWR_HOME/config.toml`` (default ``~/.flwr/config.toml``); :func:`connection_toml` is
the section to add there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import fedgame
from fedgame.pipeline.config import RunConfig
from fedgame.sim.engine import OnMissing

__all__ = [
    "CLIENTAPP",
    "PUBLISHER",
    "SERVERAPP",
    "DeploymentConfig",
    "app_name",
    "connection_toml",
    "silo_node_config",
    "supernode_commands",
    "write_app",
]

SERVERAPP = "fedgame.deploy.flower.server_app:app"
CLIENTAPP = "fedgame.deploy.flower.client_app:app"
PUBLISHER = "fedgame"


@dataclass(frozen=True)
class DeploymentConfig:
    """What a deployed run needs besides the recipe, as the ServerApp reads it from the run config.

    Run-config keys (Flower's are flat, kebab-case; TOML has no null, so 0 means "none"):

    * ``recipe`` — the resolved recipe, YAML (what ``fedgame run`` writes as ``config.yaml``);
    * ``out`` — absolute path of the results folder, on the SuperLink's machine (the ServerApp
      runs there, in a subprocess of the SuperLink);
    * ``on-missing`` (optional) — overrides the recipe's ``train.on_missing``: ``continue`` (a
      round ends with the replies that arrived) or ``fail``;
    * ``round-timeout`` — seconds to wait for a round's replies; 0: until every reply or error
      arrives (a dead node's message errors after Flower's heartbeat patience, about 60 s);
    * ``register-timeout`` — seconds to wait for every SuperNode to connect and register;
    * ``resume`` — continue ``out``'s checkpoint (true) or start afresh (false, the default,
      like ``fedgame run`` without ``--resume``);
    * ``silo`` (optional, default false) — every SuperNode reads its own files from its
      ``data-dir`` node config, and the server never opens them;
    * ``server-data`` (optional, silo only) — absolute path of a data folder on the SuperLink's
      machine, laid out like a node's: the server evaluates on its test split; "" (the
      default): federated evaluation, each node on its own held-out split.
    """

    recipe: str
    out: str
    on_missing: OnMissing | None = None
    round_timeout: float = 0.0
    register_timeout: float = 300.0
    resume: bool = False
    silo: bool = False
    server_data: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.recipe, str) or not self.recipe.strip():
            raise ValueError("run config: 'recipe' must hold the resolved recipe (YAML); write the app with `fedgame flower app`")
        if not isinstance(self.out, str) or not Path(self.out).is_absolute():
            raise ValueError(
                f"run config: 'out' must be an absolute path (the results folder on the SuperLink's machine), got {self.out!r}"
            )
        if self.on_missing not in (None, "continue", "fail"):
            raise ValueError(f"run config: 'on-missing' must be 'continue' or 'fail', got {self.on_missing!r}")
        if isinstance(self.round_timeout, bool) or not isinstance(self.round_timeout, (int, float)) or self.round_timeout < 0:
            raise ValueError(
                f"run config: 'round-timeout' must be a number of seconds >= 0 (0: wait for every reply), got {self.round_timeout!r}"
            )
        if isinstance(self.register_timeout, bool) or not isinstance(self.register_timeout, (int, float)) or not self.register_timeout > 0:
            raise ValueError(f"run config: 'register-timeout' must be a number of seconds > 0, got {self.register_timeout!r}")
        if not isinstance(self.resume, bool):
            raise ValueError(f"run config: 'resume' must be true or false, got {self.resume!r}")
        if not isinstance(self.silo, bool):
            raise ValueError(f"run config: 'silo' must be true or false, got {self.silo!r}")
        if not isinstance(self.server_data, str) or (self.server_data and not Path(self.server_data).is_absolute()):
            raise ValueError(
                f"run config: 'server-data' must be an absolute path (a data folder on the SuperLink's machine) or \"\", got {self.server_data!r}"
            )
        if self.server_data and not self.silo:
            raise ValueError(
                "run config: 'server-data' is for silo deployments (silo = true); without silo the server evaluates on the recipe's test split"
            )

    @property
    def timeout(self) -> float | None:
        """The executor's round timeout (None: wait for every reply)."""
        return float(self.round_timeout) if self.round_timeout > 0 else None

    def to_run_config(self) -> dict[str, str | float | bool]:
        """The ``[tool.flwr.app.config]`` table."""
        return {
            "recipe": self.recipe,
            "out": self.out,
            **({} if self.on_missing is None else {"on-missing": self.on_missing}),
            "round-timeout": float(self.round_timeout),
            "register-timeout": float(self.register_timeout),
            "resume": self.resume,
            **({"silo": True, "server-data": self.server_data} if self.silo else {}),
        }

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> Self:
        """Read (and check) a run config; unknown keys are refused, so a typo is not ignored."""
        known = {"recipe", "out", "on-missing", "round-timeout", "register-timeout", "resume", "silo", "server-data"}
        extra = sorted(set(run_config) - known)
        if extra:
            raise ValueError(f"run config: unknown key(s) {extra}; allowed: {sorted(known)}")
        missing = sorted({"recipe", "out"} - set(run_config))
        if missing:
            raise ValueError(f"run config: missing key(s) {missing}; write the app with `fedgame flower app`")
        rt = run_config.get("round-timeout", 0.0)
        reg = run_config.get("register-timeout", 300.0)
        return cls(
            recipe=run_config["recipe"],
            out=run_config["out"],
            on_missing=run_config.get("on-missing"),
            round_timeout=float(rt) if isinstance(rt, int) and not isinstance(rt, bool) else rt,
            register_timeout=float(reg) if isinstance(reg, int) and not isinstance(reg, bool) else reg,
            resume=run_config.get("resume", False),
            silo=run_config.get("silo", False),
            server_data=run_config.get("server-data", ""),
        )


def _flwr_version() -> str:
    """The Flower release installed here, which the app's pyproject.toml pins (the SuperLink and
    SuperNodes run the same fedgame, hence the same Flower)."""
    from importlib.metadata import version

    return version("flwr")


def app_name(cfg: RunConfig) -> str:
    """The app's ``[project] name``: ``fedgame-<recipe name>`` in Flower's allowed characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", cfg.name.lower()).strip("-") or "run"
    return f"fedgame-{slug}"


def connection_toml(name: str, address: str, *, insecure: bool = True, root_certificates: str | None = None) -> str:
    """The ``$FLWR_HOME/config.toml`` section naming a SuperLink for ``flwr run DIR <name>``.

    ``address`` is the SuperLink's HTTP address (``host:port``, its ``--port``); ``insecure``
    only for loopback or a trusted network; otherwise ``root_certificates`` is the absolute path
    of the CA certificate that signed the SuperLink's ``--ssl-certfile``."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"connection: name must be letters, digits, '-' or '_', got {name!r}")
    lines = [f"[superlink.{name}]", f'address = "{address}"']
    if insecure:
        lines.append("insecure = true")
    elif root_certificates is not None:
        lines.append(f'root-certificates = "{root_certificates}"')
    return "\n".join(lines) + "\n"


def silo_node_config(data_dir: str | Path) -> str:
    """A silo SuperNode's ``--node-config`` value: ``data-dir='<folder>'`` (Flower reads node
    config values as TOML, so a path is quoted)."""
    d = str(data_dir)
    if "'" in d:
        raise ValueError(f"data-dir: a path with a single quote cannot be given as Flower node config, got {d!r}")
    return f"data-dir='{d}'"


def supernode_commands(n: int, superlink: str, *, first_port: int = 9094, insecure: bool = True, silo: bool = False) -> list[str]:
    """One ``flower-supernode`` command per partition: ``partition-id=i num-partitions=n``, each
    with its own local Runtime API port (``--port``), so several can share a machine. ``silo``:
    each with its own data folder instead (``data-dir='/srv/silo-<i>'``, to replace by the real one)."""
    if n < 1:
        raise ValueError(f"nodes: must be >= 1, got {n}")
    sec = "--insecure" if insecure else "--root-certificates ca.crt"
    return [
        f"flower-supernode {sec} --superlink {superlink} --port {first_port + i} "
        + (f'--node-config "{silo_node_config(f"/srv/silo-{i}")}"' if silo else f'--node-config "partition-id={i} num-partitions={n}"')
        for i in range(n)
    ]


def _toml_string(s: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, minus ``\\/``, which json never emits)."""
    import json

    return json.dumps(s, ensure_ascii=False)


def _pyproject(cfg: RunConfig, dep: DeploymentConfig) -> str:
    rc = dep.to_run_config()
    values = []
    for key, value in rc.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(value)
        else:
            text = _toml_string(str(value))
        values.append(f"{key} = {text}")
    return "\n".join(
        [
            "# Written by `fedgame flower app`; submit with `flwr run <this folder> <connection>`.",
            "# fedgame (with its flower extra) must be installed on the SuperLink's machine and on every",
            "# SuperNode's: the components below are its modules, and no dependency is installed at run time.",
            "[project]",
            f'name = "{app_name(cfg)}"',
            f'version = "{fedgame.__version__}"',
            f"description = {_toml_string(f'fedgame recipe {cfg.name} on Flower SuperNodes')}",
            'license = "Apache-2.0"',
            f'dependencies = ["flwr[simulation]=={_flwr_version()}"]',
            "",
            "[tool.flwr.app]",
            f'publisher = "{PUBLISHER}"',
            "",
            "[tool.flwr.app.components]",
            f'serverapp = "{SERVERAPP}"',
            f'clientapp = "{CLIENTAPP}"',
            "",
            "[tool.flwr.app.config]",
            *values,
            "",
        ]
    )


def _readme(cfg: RunConfig, dest: Path, superlink: str, silo: bool = False) -> str:
    n = cfg.data.n_clients
    host, _, port = superlink.rpartition(":")
    nodes = "\n".join(f"{c} &" for c in supernode_commands(n, superlink, silo=silo))
    who = (
        "one SuperNode per silo, each reading its own files from its `data-dir` (replace `/srv/silo-<i>` by "
        "the node's folder; relative paths in the recipe's `data.options` are taken from there)"
        if silo
        else "one SuperNode per partition"
    )
    return f"""# {cfg.name} on Flower

Written by `fedgame flower app`. The resolved recipe is the `recipe` key of `pyproject.toml`
({n} clients: {who}). On one machine, over loopback:

```bash
flower-superlink --insecure --host {host} --port {port} &
{nodes}
cat >> "${{FLWR_HOME:-$HOME/.flwr}}/config.toml" <<'EOF'
{connection_toml("fedgame", superlink).strip()}
EOF
flwr run {dest} fedgame --stream
```

Results: the `out` folder of the run config, on the SuperLink's machine{"; `queries.jsonl` there lists every answer a node sent" if silo else ""}.
"""


def write_app(
    cfg: RunConfig,
    dest: str | Path,
    *,
    out: str | Path,
    on_missing: OnMissing | None = None,
    round_timeout: float = 0.0,
    register_timeout: float = 300.0,
    resume: bool = False,
    superlink: str = "127.0.0.1:8000",
    silo: bool = False,
    server_data: str | Path | None = None,
) -> Path:
    """Write the Flower app of ``cfg`` into folder ``dest`` and return its ``pyproject.toml``.

    ``out`` is made absolute here (the ServerApp runs in another working directory).
    ``superlink`` only fills in the commands of the app's README. ``silo``: every node reads
    its own files (its ``data-dir``); ``server_data`` (silo only, made absolute): the server's
    own data folder, whose test split it evaluates on (None: federated evaluation) and whose
    training split holds a JDP-FL personal rule's validation set (such a recipe needs it)."""
    host, _, port = superlink.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"superlink: must be host:port with a port in [1, 65535], got {superlink!r}")
    if server_data is not None and not silo:
        raise ValueError("server-data: only with --silo (without it the server evaluates on the recipe's test split)")
    if silo:
        from fedgame.deploy.flower.silo import check_server_data
        from fedgame.pipeline.build import check_silo

        check_silo(cfg)
        check_server_data(cfg, server_data)
    from fedgame.deploy.flower.client_app import recipe_text

    dep = DeploymentConfig(
        recipe=recipe_text(cfg),
        out=str(Path(out).expanduser().resolve()),
        on_missing=on_missing if on_missing is not None else cfg.train.on_missing,  # a key --run-config can override
        round_timeout=float(round_timeout),
        register_timeout=float(register_timeout),
        resume=resume,
        silo=silo,
        server_data="" if server_data is None else str(Path(server_data).expanduser().resolve()),
    )
    d = Path(dest)
    if d.exists() and not d.is_dir():
        raise ValueError(f"dir: {d} exists and is not a folder")
    d.mkdir(parents=True, exist_ok=True)
    path = d / "pyproject.toml"
    path.write_text(_pyproject(cfg, dep))
    (d / "README.md").write_text(_readme(cfg, d.resolve(), superlink, silo))
    return path
