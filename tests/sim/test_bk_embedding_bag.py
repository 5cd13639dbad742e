"""Book-keeping clipping of token embeddings: the clipped sum and per-example norms of
:class:`BookKeepingClipper` on ``embedding_bag`` (and ``nn.EmbeddingBag`` in mode "sum" or
without a padding id, and ``nn.Embedding``) equal those of per-example gradients computed
independently with ``torch.func.vmap(grad(...))``; padding gets no gradient; ``supports`` says
which embedding layers are covered; the local trainer picks book-keeping for embedding_bag."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from fedgame.models import build_model
from fedgame.privacy.plans import DPSGD
from fedgame.sim.clipping import BookKeepingClipper, supports
from fedgame.sim.local import LocalSpec, LocalTrainer

pytestmark = pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")  # vmap over embedding_bag

VOCAB, DIM, L, B, CLASSES = 50, 8, 12, 16, 3


def _tokens() -> tuple[torch.Tensor, torch.Tensor]:
    """B×L token ids with padding at the ends of rows, repeated tokens, one padding-only row."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, VOCAB, (B, L), generator=g)
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    x[torch.arange(L)[None, :] >= lengths[:, None]] = 0
    x[0] = 0  # padding only: n_j = 0
    x[1, :6] = 7  # one token six times
    x[2] = torch.randint(1, 4, (L,), generator=g)  # a full row of a few repeated tokens
    x[3, 3:9] = 0  # padding in the middle
    y = torch.randint(0, CLASSES, (B,), generator=g)
    return x, y


def _embedding_bag() -> nn.Module:
    model: nn.Module = build_model("embedding_bag", in_shape=(L,), num_classes=CLASSES, seed=0, vocab=VOCAB, dim=DIM)
    return model


class _Bag(nn.Module):
    def __init__(self, **kw: object) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, DIM, **kw)  # type: ignore[arg-type]
        self.fc = nn.Linear(DIM, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(self.bag(x))
        return out


class _Embed(nn.Module):
    """nn.Embedding → mean over the sequence → Linear (``pool``) or Linear per token → mean."""

    def __init__(self, *, pool_first: bool, padding_idx: int | None = 0) -> None:
        super().__init__()
        self.pool_first = pool_first
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=padding_idx)
        self.fc = nn.Linear(DIM, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.embed(x)
        out: torch.Tensor = self.fc(e.mean(1)) if self.pool_first else self.fc(e).mean(1)
        return out


def _seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return make()

    return build


MODELS: dict[str, Callable[[], nn.Module]] = {
    "embedding_bag": _embedding_bag,
    "bag_sum": _seeded(lambda: _Bag(mode="sum", padding_idx=0)),
    "bag_mean_no_padding_id": _seeded(lambda: _Bag(mode="mean")),
    "embedding_pool_first": _seeded(lambda: _Embed(pool_first=True)),
    "embedding_linear_per_token": _seeded(lambda: _Embed(pool_first=False)),
    "embedding_no_padding_id": _seeded(lambda: _Embed(pool_first=True, padding_idx=None)),
}


def _per_example_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-example gradients of the trainable parameters by ``vmap(grad)`` (B × parameter shape)."""
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    frozen = {k: v.detach() for k, v in model.named_parameters() if not v.requires_grad}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, {**p, **frozen}, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    result: dict[str, torch.Tensor] = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return result


def _reference(model: nn.Module, x: torch.Tensor, y: torch.Tensor, c: float | None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(Σ_j min(1, c/‖∇_j‖) ∇_j per parameter, ‖∇_j‖) from the vmap per-example gradients;
    ``c=None``: the median norm, so the clip binds for half the examples."""
    per = _per_example_grads(model, x, y)
    norms = torch.cat([g.reshape(B, -1) for g in per.values()], 1).norm(dim=1)
    c = float(norms.median()) if c is None else c
    coef = c / norms.clamp(min=c)
    return {k: torch.einsum("b,b...->...", coef, g) for k, g in per.items()}, norms


def _assert_matches(model: nn.Module, x: torch.Tensor, y: torch.Tensor, c: float) -> torch.Tensor:
    expect, norms = _reference(model, x, y, c)
    loss_sum, got_norms = BookKeepingClipper(model).clipped_sum(x, y, c, autocast=None)
    torch.testing.assert_close(got_norms, norms, rtol=1e-5, atol=1e-7)
    for k, p in model.named_parameters():
        if not p.requires_grad:
            assert p.grad is None, k
            continue
        assert p.grad is not None, k
        scale = float(expect[k].abs().max())
        torch.testing.assert_close(p.grad, expect[k], rtol=1e-5, atol=1e-5 * scale, msg=k)
    with torch.no_grad():
        torch.testing.assert_close(loss_sum, F.cross_entropy(model(x), y, reduction="sum"))
    return norms


@pytest.mark.parametrize("name", sorted(MODELS))
def test_clipped_sum_and_norms_match_vmap_per_example_gradients(name: str) -> None:
    model = MODELS[name]()
    x, y = _tokens()
    _, norms = _reference(model, x, y, None)
    c = float(norms.median())
    assert (norms > c * 1.01).sum() >= 3 and (norms < c * 0.99).sum() >= 3  # the clip binds for some only
    _assert_matches(model, x, y, c)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_clipping_gives_the_plain_batch_gradient(name: str) -> None:
    model = MODELS[name]()
    x, y = _tokens()
    BookKeepingClipper(model).clipped_sum(x, y, 1e6)
    got = {k: p.grad for k, p in model.named_parameters()}
    model.zero_grad()
    F.cross_entropy(model(x), y, reduction="sum").backward()  # type: ignore[no-untyped-call]
    for k, p in model.named_parameters():
        assert p.grad is not None and got[k] is not None
        torch.testing.assert_close(got[k], p.grad, rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("name", ["embedding_bag", "bag_sum", "embedding_pool_first"])
def test_padding_gets_no_gradient_and_a_padding_only_row_no_norm(name: str) -> None:
    """With the classifier frozen, every gradient is the embedding's: the padding-only example
    has norm 0, and the padding row of the clipped sum is exactly zero."""
    model = MODELS[name]()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.requires_grad_(False)
    x, y = _tokens()
    _, norms = _reference(model, x, y, None)
    norms = _assert_matches(model, x, y, float(norms.median()))
    assert float(norms[0]) == 0.0
    weight = next(p for p in model.parameters() if p.requires_grad)
    assert weight.grad is not None
    assert torch.equal(weight.grad[0], torch.zeros(DIM))
    assert supports(model)


def test_a_batch_of_padding_only() -> None:
    model = _embedding_bag()
    x = torch.zeros(4, L, dtype=torch.long)
    y = torch.tensor([0, 1, 2, 0])
    _, norms = BookKeepingClipper(model).clipped_sum(x, y, 0.5)
    weight = next(p for p in model.parameters() if p.dim() == 2 and p.shape[0] == VOCAB)  # the embeddings
    assert weight.grad is not None and torch.equal(weight.grad, torch.zeros_like(weight))
    _, ref_norms = _reference(model, torch.cat([x] * 4), torch.cat([y] * 4), 0.5)  # vmap wants B rows
    torch.testing.assert_close(norms, ref_norms[:4], rtol=1e-5, atol=1e-7)


def test_bf16_autocast_keeps_token_ids_and_computes_in_float32() -> None:
    model = _embedding_bag()
    x, y = _tokens()
    bk = BookKeepingClipper(model)
    _, n32 = bk.clipped_sum(x, y, 1.0)
    g32 = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    _, n16 = bk.clipped_sum(x, y, 1.0, autocast=torch.bfloat16)
    g16 = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    assert n16.dtype == torch.float32 and g16.dtype == torch.float32
    torch.testing.assert_close(n16, n32, rtol=3e-2, atol=1e-3)
    assert float((g16 - g32).norm() / g32.norm()) < 0.1


@pytest.mark.parametrize("name", ["embedding_bag", "embedding_linear_per_token"])
def test_same_bits_whatever_the_thread_count(name: str) -> None:
    """The indexed sums of the embedding rows do not depend on how many threads run them. Only the
    embedding's gradient is compared bit for bit: the classifier head's comes from torch's own
    matrix products and sums over the batch, whose blocking follows the thread count on some CPUs
    (AVX-512 hosts split the batch reduction over two threads), so there it is compared to float
    round-off."""
    model = MODELS[name]()
    embedding = next(m.weight for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag))
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 4, (1024, 128), generator=g)  # few distinct ids: long runs, many collisions
    y = torch.randint(0, CLASSES, (1024,), generator=g)
    bk = BookKeepingClipper(model)
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2, 1, 2):
            torch.set_num_threads(threads)
            _, norms = bk.clipped_sum(x, y, 0.1)
            runs.append((norms, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    finally:
        torch.set_num_threads(before)
    position = next(i for i, p in enumerate(p for p in model.parameters() if p.grad is not None) if p is embedding)
    for norms, grads in runs[1:]:
        assert torch.equal(norms, runs[0][0])
        assert torch.equal(grads[position], runs[0][1][position])
        for a, b in zip(grads, runs[0][1], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# -- what is covered -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_supports_the_covered_embedding_layers(name: str) -> None:
    assert supports(MODELS[name]())


@pytest.mark.parametrize(
    "layer",
    [
        nn.EmbeddingBag(VOCAB, DIM, mode="max", padding_idx=0),
        nn.EmbeddingBag(VOCAB, DIM, mode="mean", padding_idx=0, max_norm=1.0),
        nn.EmbeddingBag(VOCAB, DIM, mode="mean", padding_idx=0, scale_grad_by_freq=True),
        nn.Embedding(VOCAB, DIM, padding_idx=0, max_norm=1.0),
        nn.Embedding(VOCAB, DIM, scale_grad_by_freq=True),
    ],
)
def test_uncovered_embedding_configurations_are_not_supported(layer: nn.Module) -> None:
    model = nn.Sequential(layer, nn.Linear(DIM, CLASSES))
    assert not supports(model)
    with pytest.raises(ValueError, match="book-keeping clipping"):
        BookKeepingClipper(model)


def test_a_layer_norm_is_not_supported() -> None:
    model = nn.Sequential(nn.EmbeddingBag(VOCAB, DIM, mode="mean", padding_idx=0), nn.LayerNorm(DIM), nn.Linear(DIM, CLASSES))
    assert not supports(model)
    model[1].requires_grad_(False)  # a frozen LayerNorm has no gradient to clip
    assert supports(model)


class _Offsets(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, DIM, mode="mean", padding_idx=0)
        self.fc = nn.Linear(DIM, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offsets = torch.arange(0, x.numel(), x.shape[1])
        out: torch.Tensor = self.fc(self.bag(x.reshape(-1), offsets))
        return out


def test_offsets_are_refused() -> None:
    model = _Offsets()
    x, y = _tokens()
    with pytest.raises(ValueError, match=r"EmbeddingBag must get a \(B, L\) tensor of token ids, without offsets"):
        BookKeepingClipper(model).clipped_sum(x, y, 1.0)


# -- the local trainer -----------------------------------------------------------------------
def test_local_trainer_picks_book_keeping_and_steps_with_the_clipped_sum() -> None:
    model = _embedding_bag()
    x, y = _tokens()
    start = nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    expect, norms = _reference(model, x, y, None)
    c = float(norms.median())
    tr = LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=B, lr=1.0, epochs=None, steps=1))
    assert tr.per_example == "bk" and tr.memory_format == "contiguous"
    res = tr.train(
        start, torch.arange(B), torch.Generator().manual_seed(0), DPSGD(max_grad_norm=c, noise_multiplier=0.0, sampling="shuffle")
    )
    got = (start - res.params) * B  # one step of lr 1 on (clipped sum)/B
    flat = torch.cat([expect[k].reshape(-1) for k, _ in model.named_parameters()])
    torch.testing.assert_close(got, flat, rtol=1e-4, atol=1e-5 * float(flat.abs().max()))
    assert res.clipped_fraction == pytest.approx(float((norms > c).float().mean()), abs=1.5 / B)
