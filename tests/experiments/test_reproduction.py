"""docs/reproduction.md from committed result tables: every cell with the paper's value beside
it, the claimed orderings decided from the numbers, missing cells named."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedgame.cli import app
from fedgame.experiments.claims import decide, holm, write_orderings
from fedgame.experiments.reproduction import write_reproduction

T2 = """dataset,tau,method,split,ours_mean,ours_std,seeds,paper_mean,paper_std,ours_minus_paper,rounds,local,budget
Fashion-MNIST,0.2,Random,IID,60.00,1.00,0 1 2,74.69,0.78,-14.69,10,{},reduced
Fashion-MNIST,0.2,AOCS,IID,70.00,1.00,0 1 2,78.62,0.26,-8.62,10,{},reduced
Fashion-MNIST,0.2,FedPCS,IID,61.00,3.00,0 1 2,84.43,0.18,-23.43,10,{},reduced
"""
T4 = """dataset,mechanism,mechanism_name,s,n_seeds,seeds,ours_mean,ours_std,paper_table,paper,ours_minus_paper,eps_pld_over_budget_mean,rounds,local,budget
fashion_mnist,P,Privacy-aware,30,2,0 1,50.00,1.00,Table IV,54.80,-4.80,0.21,30,{},reduced
fashion_mnist,U,Unbiased,30,2,0 1,20.00,1.00,Table IV,16.27,3.73,0.25,30,{},reduced
fashion_mnist,B,Biased,30,2,0 1,55.00,1.00,Table IV,15.39,39.61,0.22,30,{},reduced
"""


def _results(tmp_path: Path) -> Path:
    (tmp_path / "r" / "fedpcs_table2_reduced").mkdir(parents=True)
    (tmp_path / "r" / "fedpcs_table2_reduced" / "table2.csv").write_text(T2)
    (tmp_path / "r" / "phs_table4_reduced").mkdir(parents=True)
    (tmp_path / "r" / "phs_table4_reduced" / "table4.csv").write_text(T4)
    # the orderings each table's page decided (the page's generator writes them; here, by hand)
    fed, rnd, aocs = {0: 61.0, 1: 58.0, 2: 64.0}, {0: 59.0, 1: 60.0, 2: 61.0}, {0: 70.0, 1: 69.0, 2: 71.0}
    write_orderings(
        tmp_path / "r" / "fedpcs_table2_reduced" / "orderings.csv",
        list(
            zip(
                [{"tau": "0.2", "split": "IID", "a": "FedPCS", "b": b, "family": "paper", "what": "Table II"} for b in ("Random", "AOCS")]
                + [{"tau": "0.2", "split": "IID", "a": "FedPCS", "b": "ablation", "family": "decomposition", "what": "x"}],
                holm([decide(fed, rnd), decide(fed, aocs)]) + [decide(fed, rnd)],
                strict=True,
            )
        ),
    )
    p, u = {0: 50.0, 1: 51.0}, {0: 20.0, 1: 21.5}
    write_orderings(tmp_path / "r" / "phs_table4_reduced" / "orderings.csv", [({"s": "30", "a": "P", "b": "U"}, decide(p, u))])
    return tmp_path / "r"


def test_page_lists_cells_quotes_the_pages_orderings_and_names_missing_cells(tmp_path: Path) -> None:
    page = write_reproduction(_results(tmp_path), tmp_path / "docs" / "reproduction.md").read_text()
    assert "| 0.2 | IID | AOCS | 70.00 ± 1.00 (0 1 2) | 78.62 ± 0.26 | -8.62 |" in page
    # the paper family quoted as its page decided it, the decomposition left to that page
    assert "| 0.2 | IID | FedPCS | Random | Table II | +1.00 |" in page and "| FedPCS | ablation |" not in page
    assert "| 0.2 | IID | FedPCS | AOCS | Table II | -9.00 |" in page and "| fails |" in page
    assert "Of these 2 orderings: 1 fails, 1 not decided" in page
    assert "Fed-CBS (τ = 0.2, IID)" in page and "DELTA (τ = 0.2, IID)" in page
    assert "| 30 | Privacy-aware | 50.00 ± 1.00 (0 1) | 54.80 | -4.80 | 0.210 |" in page
    assert "| 30 | P | U | +29.75 |" in page and "two standard errors" not in page
    assert "Our Random ends -14.69 points from the paper's (its one cell)." in page


def test_cli_writes_the_page_and_refuses_an_empty_folder(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(_results(tmp_path)), "--reproduction", "--out", str(tmp_path / "page.md")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "page.md").read_text().startswith("# Reproduction")
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["report", str(tmp_path / "empty"), "--reproduction", "--out", str(tmp_path / "x.md")])
    assert res.exit_code != 0 and "no table2.csv, table4.csv or figure page (QI-DPFL, JDP-FL, PHS)" in " ".join(res.output.split())
    with pytest.raises(FileNotFoundError, match="results: not a folder"):
        write_reproduction(tmp_path / "missing", tmp_path / "y.md")


def test_jdp_figures_are_included_with_their_claims_and_images(tmp_path: Path) -> None:
    r = tmp_path / "r" / "jdp_fig5_reduced"
    r.mkdir(parents=True)
    (r / "fig5.md").write_text(
        "# JDP-FL Fig. 5 on Fashion-MNIST (reduced budget)\n\n| rule | s |\n\n- rises with s: **holds**\n\n![Fig. 5](fig5.png)\n"
    )
    page = write_reproduction(tmp_path / "r", tmp_path / "docs" / "reproduction.md").read_text()
    assert "## JDP-FL Fig. 5 on Fashion-MNIST (reduced budget) (`" in page
    assert "- rises with s: **holds**" in page and "![Fig. 5](../r/jdp_fig5_reduced/fig5.png)" in page


def test_every_figure_page_is_embedded_under_its_own_title(tmp_path: Path) -> None:
    root = _results(tmp_path)
    pages = {
        "qidpfl_fmnist/comparison.md": "QI-DPFL comparison, fashion_mnist (budget: paper)",
        "phs_fig5_reduced/fig5.md": "PHS Fig. 5, FashionMNIST (budget: reduced)",
        "phs_tight_reduced/tight_vs_paper.md": "PHS tight calibration (reduced budget: 30 rounds)",
        "jdp_auction/fig2.md": "JDP-FL Fig. 2 from the auctions alone",
        "jdp_fig3_reduced/fig3.md": "JDP-FL Fig. 3 (budget: reduced; lr 0.01, 2,000 test examples)",
    }
    for rel, title in pages.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {title}\n\n## part\n\n| a |\n|---|\n| 1 |\n\n![f](f.png)\n")
    page = write_reproduction(root, tmp_path / "docs" / "reproduction.md").read_text()
    for rel, title in pages.items():
        folder = (root / rel).parent.as_posix()
        assert f"## {title} (`{folder}`)" in page
        assert f"](../r/{Path(rel).parent.as_posix()}/f.png)" in page
    assert "\n### part\n" in page and "\n## part\n" not in page
