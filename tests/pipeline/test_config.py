"""Recipes: every shipped recipe validates; bad values are refused naming field, value and range."""

from pathlib import Path

import pytest

from fedgame.pipeline.config import RecipeError, apply_overrides, load_recipe, parse_recipe

RECIPES = sorted(Path(__file__).resolve().parents[2].joinpath("recipes").rglob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_shipped_recipes_validate(path: Path) -> None:
    cfg = load_recipe(path)
    assert cfg.train.rounds >= 1 and cfg.name


def test_recipes_exist() -> None:
    assert len(RECIPES) >= 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.partition.alpha=-1"], "data.partition.alpha: Input should be greater than 0, got -1"),
        (["train.local.lr=0"], "train.local.lr: Input should be greater than 0, got 0"),
        (["train.rounds=0"], "train.rounds: Input should be greater than or equal to 1, got 0"),
        (["privacy.kind=dpsgd"], "give exactly one of privacy.noise_multiplier and privacy.target_epsilon"),
        (["privacy={kind: dpsgd, noise_multiplier: 1, delta: 2}"], "privacy.delta: Input should be less than 1, got 2"),
        (["train.clients_per_round=101"], "train.clients_per_round: must be <= data.partition.n_clients (100)"),
        (["selection.kind=bogus"], "selection.kind: unknown kind 'bogus'; choose from 'uniform'"),
        (["trian.rounds=3"], "trian: Extra inputs are not permitted; did you mean 'train'?"),
        (["train.round=3"], "train.round: Extra inputs are not permitted; did you mean 'rounds'?"),
        (["train.local.steps=5"], "give exactly one of train.local.epochs and train.local.steps"),
    ],
)
def test_bad_values_name_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError) as e:
        parse_recipe(apply_overrides({}, overrides))
    assert message in str(e.value)


def test_overrides_are_applied_and_typed() -> None:
    cfg = parse_recipe(
        apply_overrides(
            {"train": {"rounds": 3}}, ["train.local.lr=0.2", "data.partition={kind: iid, n_clients: 7}", "train.clients_per_round=7"]
        )
    )
    assert cfg.train.rounds == 3 and cfg.train.local.lr == 0.2
    assert cfg.data.partition.kind == "iid" and cfg.data.partition.n_clients == 7


def test_config_is_frozen() -> None:
    cfg = parse_recipe({})
    with pytest.raises(Exception):
        cfg.seed = 3  # type: ignore[misc]


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="file not found"):
        load_recipe(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(bad)
    with pytest.raises(RecipeError, match="expected key.path=value"):
        apply_overrides({}, ["novalue"])


def test_switching_a_kind_drops_the_old_kinds_fields() -> None:
    """``--set data.partition.kind=iid`` on a Dirichlet split forgets ``alpha`` and ``min_size``
    (fields IID has not) and keeps ``n_clients`` (a field both have); also when the old kind was
    the section's default (no ``kind`` written)."""
    for raw in (
        {"data": {"partition": {"kind": "dirichlet", "alpha": 0.3, "n_clients": 7}}},
        {"data": {"partition": {"alpha": 0.3, "n_clients": 7}}},
    ):
        out = apply_overrides(raw, ["data.partition.kind=iid", "train.clients_per_round=3"])
        assert out["data"]["partition"] == {"kind": "iid", "n_clients": 7}
        assert parse_recipe(out).data.partition.n_clients == 7
    same = apply_overrides({"data": {"partition": {"kind": "dirichlet", "alpha": 0.3}}}, ["data.partition.kind=dirichlet"])
    assert same["data"]["partition"]["alpha"] == 0.3


def test_tilde_deletes_a_field() -> None:
    out = apply_overrides({"train": {"rounds": 3, "eval_every": 2}}, ["~train.eval_every"])
    assert out == {"train": {"rounds": 3}}
    with pytest.raises(RecipeError, match=r"--set ~train.bogus: the recipe has no field train.bogus"):
        apply_overrides({"train": {"rounds": 3}}, ["~train.bogus"])


def test_calibrated_delta_must_match_the_accountants() -> None:
    """DP-SGD and PHS calibrate noise to a budget (ε, δ): an accountant reporting at another δ
    would misreport it, so the recipe is refused, naming both fields."""
    base = {"privacy": {"kind": "dpsgd", "target_epsilon": 2.0, "delta": 1e-5}}
    parse_recipe(base)
    with pytest.raises(RecipeError, match=r"privacy.delta \(1e-05\) and accountant.delta \(1e-06\) differ"):
        parse_recipe({**base, "accountant": {"delta": 1e-6}})
