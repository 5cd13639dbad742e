"""The zoo on inputs that are not images: feature vectors ``(F,)`` for the dense models, token-id
sequences ``(L,)`` for ``embedding_bag``; shapes of the wrong kind or length refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedgame.models import build_model, count_params, list_models, model_options

F = 13
DENSE = ["logreg", "mlp"]
IMAGE_ONLY = sorted(set(list_models()) - {*DENSE, "embedding_bag"})


def _features(b: int = 5) -> torch.Tensor:
    return torch.randn(b, F, generator=torch.Generator().manual_seed(0))


# -- feature vectors (F,) ------------------------------------------------------------------
@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("classes", [2, 7])
def test_dense_models_run_on_feature_vectors(name: str, classes: int) -> None:
    model = build_model(name, in_shape=(F,), num_classes=classes, seed=0)
    with torch.no_grad():
        out = model(_features())
    assert out.shape == (5, classes)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("classes", [2, 7])
def test_parameter_counts_on_feature_vectors(classes: int) -> None:
    assert count_params(build_model("logreg", in_shape=(F,), num_classes=classes)) == F * classes + classes
    mlp = F * 200 + 200 + 200 * 200 + 200 + 200 * classes + classes
    assert count_params(build_model("mlp", in_shape=(F,), num_classes=classes)) == mlp


def test_feature_shape_given_as_numpy_integers_or_a_list() -> None:
    a = build_model("logreg", in_shape=(np.int64(F),), num_classes=3, seed=1)  # type: ignore[arg-type]
    b = build_model("logreg", in_shape=[F], num_classes=3, seed=1)  # type: ignore[arg-type]
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("name", IMAGE_ONLY)
def test_image_models_refuse_a_flat_input_naming_the_model(name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}: needs image inputs \(C, H, W\).*\(13,\)") as info:
        build_model(name, in_shape=(F,), num_classes=10)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("shape", [(0,), (-3,), (1, 2, 3, 4), ("a",), (28, 28), (), 13, "abc", (2.5,)])
def test_bad_in_shape_is_refused_in_one_line(shape: object) -> None:
    with pytest.raises(ValueError, match=r"^in_shape: must be one or three positive integers") as info:
        build_model("logreg", in_shape=shape, num_classes=10)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    assert "(F,)" in message and "(L,)" in message and "(C, H, W)" in message


@pytest.mark.parametrize(
    ("shape", "match"),
    [((1, 0, 28), "three positive integers"), ((1, 28.0, 28), "three integers"), ((1, "a", 2), "three integers")],
)
def test_image_shapes_keep_their_messages(shape: object, match: str) -> None:
    with pytest.raises(ValueError, match=rf"^in_shape: must be {match} \(C, H, W\)"):
        build_model("logreg", in_shape=shape, num_classes=10)  # type: ignore[arg-type]


# -- token ids (L,): embedding_bag ---------------------------------------------------------
VOCAB, DIM, L = 40, 6, 9


def _bag(classes: int = 3, **kw: object) -> nn.Module:
    options: dict[str, object] = {"vocab": VOCAB, "dim": DIM, **kw}
    model: nn.Module = build_model("embedding_bag", in_shape=(L,), num_classes=classes, seed=0, **options)
    return model


def _tokens(b: int = 4) -> torch.Tensor:
    x = torch.randint(1, VOCAB, (b, L), generator=torch.Generator().manual_seed(2))
    x[0, 5:] = 0  # padded
    x[-1] = 0  # padding only
    return x


def test_embedding_bag_options() -> None:
    assert model_options("embedding_bag") == ["dim", "vocab"]
    with pytest.raises(TypeError, match=r"'vocabulary'.*options: dim, vocab"):
        build_model("embedding_bag", in_shape=(L,), num_classes=2, vocab=VOCAB, vocabulary=3)
    with pytest.raises(ValueError, match="unknown model"):
        model_options("nope")


@pytest.mark.parametrize(("vocab", "dim", "classes"), [(VOCAB, DIM, 3), (2, 1, 1), (5000, 64, 2), (1000, 16, 20)])
def test_embedding_bag_parameter_count(vocab: int, dim: int, classes: int) -> None:
    model = build_model("embedding_bag", in_shape=(L,), num_classes=classes, vocab=vocab, dim=dim)
    assert count_params(model) == vocab * dim + dim * classes + classes


def test_embedding_bag_dim_defaults_to_64() -> None:
    model = build_model("embedding_bag", in_shape=(L,), num_classes=2, vocab=10)
    assert count_params(model) == 10 * 64 + 64 * 2 + 2


def test_embedding_bag_needs_vocab() -> None:
    with pytest.raises(ValueError) as info:
        build_model("embedding_bag", in_shape=(L,), num_classes=2)
    assert str(info.value) == "model 'embedding_bag': needs option vocab (the number of token ids, padding id 0 included)"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"vocab": 1}, "option vocab must be an integer >= 2, got 1"),
        ({"vocab": 0}, "option vocab must be an integer >= 2"),
        ({"vocab": True}, "option vocab must be an integer >= 2, got True"),
        ({"vocab": 50.0}, "option vocab must be an integer >= 2"),
        ({"vocab": 50, "dim": 0}, "option dim must be an integer >= 1, got 0"),
        ({"vocab": 50, "dim": "8"}, "option dim must be an integer >= 1"),
    ],
)
def test_embedding_bag_refuses_bad_options_in_one_line(options: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=rf"^model 'embedding_bag': {match}") as info:
        build_model("embedding_bag", in_shape=(L,), num_classes=2, **options)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_embedding_bag_accepts_numpy_integers() -> None:
    model = build_model("embedding_bag", in_shape=(L,), num_classes=2, vocab=np.int64(VOCAB), dim=np.int32(DIM))
    assert count_params(model) == VOCAB * DIM + DIM * 2 + 2


def test_embedding_bag_needs_token_inputs() -> None:
    with pytest.raises(ValueError, match=r"^model 'embedding_bag': needs token inputs \(L,\).*\(1, 28, 28\)"):
        build_model("embedding_bag", in_shape=(1, 28, 28), num_classes=2, vocab=VOCAB)


def test_embedding_bag_forward_on_token_ids() -> None:
    model = _bag(classes=3)
    with torch.no_grad():
        out = model(_tokens())
    assert out.shape == (4, 3)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_padding_only_row_gives_the_bias() -> None:
    model = _bag(classes=3)
    fc = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(fc) == 1
    with torch.no_grad():
        out = model(_tokens())
    torch.testing.assert_close(out[-1], fc[0].bias.detach(), rtol=0, atol=0)


def test_padding_is_left_out_of_the_mean() -> None:
    model = _bag()
    x = _tokens()
    with torch.no_grad():
        padded = model(x[:1])  # 5 tokens, then 4 padding ids
        unpadded = model(x[:1, :5])
        other_length = model(torch.cat([x[:1, :5], torch.zeros(1, 20, dtype=torch.long)], 1))
    torch.testing.assert_close(padded, unpadded)
    torch.testing.assert_close(other_length, unpadded)


def test_token_order_does_not_matter() -> None:
    model = _bag()
    x = _tokens()[1:2]
    with torch.no_grad():
        torch.testing.assert_close(model(x), model(x.flip(1)))


def test_embedding_bag_refuses_float_or_flat_inputs() -> None:
    model = _bag()
    with pytest.raises(ValueError, match=r"embedding_bag: input must be a \(B, L\) tensor of integer token ids"):
        model(torch.randn(2, L))
    with pytest.raises(ValueError, match=r"embedding_bag: input must be a \(B, L\) tensor"):
        model(torch.ones(L, dtype=torch.long))


def test_embedding_bag_seeding() -> None:
    a, b = _bag(), _bag()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    c = build_model("embedding_bag", in_shape=(L,), num_classes=3, seed=1, vocab=VOCAB, dim=DIM)
    assert not torch.equal(next(a.parameters()), next(c.parameters()))
