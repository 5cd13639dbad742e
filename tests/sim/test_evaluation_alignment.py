"""Evaluation does not depend on where the test set lies in memory.

The in-process run, its worker pool and Flower's server evaluated the same model on the same
examples and disagreed in the last bit on an Intel AMX host: the pool's workers got the test set
through shared memory (starting on a page), the server evaluated NumPy's array (starting 16 bytes
into a page, as glibc's ``mmap`` gives it), and the AVX-512 kernels sum differently when the input
does not start on a cache line. :func:`fedgame.sim.local.evaluate_batches` now hands the model
cache-line-aligned batches. The misalignment is forced here on any host: the model must see
aligned memory (fails on the old code everywhere), and the figures must be equal (fails on the
old code on AVX-512/AMX hosts)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from fedgame.models import build_model
from fedgame.sim.local import ALIGNMENT, aligned, evaluate, flat_params

FLOAT = 4  # bytes


def _placed(x: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of ``x`` whose first element lies ``offset`` floats past a 64-byte boundary."""
    base = torch.empty(x.numel() + ALIGNMENT)
    skip = (-base.data_ptr() % ALIGNMENT) // FLOAT + offset
    out = base[skip : skip + x.numel()].view(x.shape)
    out.copy_(x)
    assert out.data_ptr() % ALIGNMENT == offset * FLOAT
    return out


def test_aligned_keeps_an_aligned_tensor_and_copies_a_misaligned_one() -> None:
    x = _placed(torch.arange(40.0).reshape(4, 10), 0)
    assert aligned(x) is x
    y = _placed(torch.arange(40.0).reshape(4, 10), 4)  # 16 bytes in: NumPy's mmap'd arrays
    z = aligned(y)
    assert z is not y and z.data_ptr() % ALIGNMENT == 0 and torch.equal(z, y)
    t = torch.arange(40.0).reshape(10, 4).t()  # not contiguous
    assert aligned(t).is_contiguous() and torch.equal(aligned(t), t)


@pytest.mark.parametrize("name", ["logreg", "mcmahan_cnn"])
def test_evaluation_sees_aligned_memory_and_gives_one_figure_wherever_the_data_lie(name: str) -> None:
    """The same 300 examples at each of the 16 float offsets of a cache line (and a batch size
    whose slices start off the line): the model's every forward input starts on a 64-byte
    boundary, and accuracy and loss are the same bits at every offset."""
    model = build_model(name, in_shape=(1, 28, 28), num_classes=10, seed=3)
    params = flat_params(model)
    gen = torch.Generator().manual_seed(0)
    x0 = torch.rand(300, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (300,), generator=gen)
    seen: list[int] = []

    def record(_: nn.Module, args: tuple[Any, ...]) -> None:
        seen.append(args[0].data_ptr() % ALIGNMENT)

    handle = model.register_forward_pre_hook(record)
    try:
        figures = {(off, bs): evaluate(model, params, _placed(x0, off), y, batch_size=bs) for off in range(16) for bs in (300, 77)}
    finally:
        handle.remove()
    assert seen and set(seen) == {0}
    for bs in (300, 77):  # one figure per batch split, whatever the offset
        assert len({f for (_, b), f in figures.items() if b == bs}) == 1, figures
