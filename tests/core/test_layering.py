"""Imports flow one way: core ← leaves (data, models, privacy, selection, incentives, robust)
← sim ← pipeline ← deploy, testing ← experiments, solve ← cli (``testing.check_plugin`` builds a
plug-in through the pipeline, as a run does). A module may import its own layer
and those below it, never one above (read from the source with ``ast``, lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "fedgame"
LAYER = {
    "__init__": 0,
    "_lazy": 0,
    "core": 0,
    "data": 1,
    "models": 1,
    "privacy": 1,
    "selection": 1,
    "incentives": 1,
    "robust": 1,
    "testing": 4,
    "sim": 2,
    "pipeline": 3,
    "deploy": 4,
    "experiments": 5,
    "solve": 5,
    "cli": 6,
    "__main__": 6,
    "recipes": 0,
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_subpackage_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in PKG.iterdir() if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__")}
    assert tops <= set(LAYER), tops - set(LAYER)


def test_imports_flow_one_way() -> None:
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        own = _part(".".join(rel.parts))
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("fedgame.") and LAYER[_part(name)] > LAYER[own]:
                    bad.append(f"{rel}: imports {name}")
    assert not bad, "\n".join(bad)


def test_the_library_parses_no_command_line_but_the_cli() -> None:
    """Commands are ``fedgame`` subcommands (cli.py, Typer) or scripts under scripts/; no module of
    the package below the CLI builds an argparse parser (the experiment writers' ``main()``\\ s
    moved to scripts/fedpcs_kappa_sweep.py, scripts/fedpcs_figures.py, scripts/jdp_auction_figs.py)."""
    parsers = [
        str(p.relative_to(PKG.parent))
        for p in sorted(PKG.rglob("*.py"))
        if any(isinstance(n, ast.Import) and any(a.name == "argparse" for a in n.names) for n in ast.walk(ast.parse(p.read_text())))
    ]
    assert parsers == [], parsers


def test_constructors_of_more_than_five_parameters_take_keywords() -> None:
    """A class whose ``__init__`` takes more than five parameters takes them by keyword (a call
    with twelve positional numbers is a bug waiting for a swapped pair). Dataclasses and
    NamedTuples, whose constructors are generated, are not checked here."""
    long = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for f in node.body:
                    if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                        positional = [a.arg for a in f.args.posonlyargs + f.args.args][1:]
                        if len(positional) > 5:
                            long.append(f"{path.relative_to(PKG.parent)}: {node.name}({', '.join(positional)})")
    assert long == [], "\n".join(long)


LEAVES = {"data", "models", "privacy", "selection", "incentives", "robust"}
#: leaf → leaf imports allowed, each with why: the selections that draw from an incentive's plan
#: read its type in their ``from_config`` (a lazy import; the plan is handed in as ``ctx.plan``)
LEAF_TO_LEAF = {
    ("fedgame/selection/fixed", "incentives"): "participants/screened read QI-DPFL's plan and screening",
    ("fedgame/selection/privacy_aware", "incentives"): "privacy_aware draws from FedPCS's ρ schedule",
}


def test_leaf_packages_import_each_other_only_where_listed() -> None:
    """The leaf packages (data, models, privacy, selection, incentives, robust) sit on one floor;
    an import from one to another is allowed only where :data:`LEAF_TO_LEAF` lists it with why."""
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        own = _part(".".join(rel.parts))
        if own not in LEAVES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.startswith("fedgame.") and _part(name) in LEAVES and _part(name) != own:
                    found.add((rel.as_posix(), _part(name)))
    assert found == set(LEAF_TO_LEAF), sorted(found ^ set(LEAF_TO_LEAF))
