"""Models for token-id sequences: a bag of embeddings and a linear classifier.

A text example is a sequence of ``L`` integer token ids (``int64``), padded with id 0, so the
per-example input shape is ``(L,)`` and a batch is a ``LongTensor`` of shape ``(B, L)``.

``embedding_bag`` is the fastText-style classifier (Joulin, Grave, Bojanowski & Mikolov, "Bag of
Tricks for Efficient Text Classification", EACL 2017): the mean of the example's token
embeddings, then one linear layer. Padding (id 0) is left out of the mean and its embedding row
never gets a gradient. A row of padding only has no tokens to average: ``nn.EmbeddingBag``
gives it the zero vector, so its logits are the classifier's bias.

No layer mixes the examples of a batch, so per-example gradients are well defined: fedgame's
book-keeping clipper (:mod:`fedgame.sim.clipping`) covers ``nn.EmbeddingBag`` and
``torch.func.vmap(grad)`` works (through PyTorch's slow fallback for ``embedding_bag``).
"""

from __future__ import annotations

import operator

import torch
from torch import nn

from fedgame.models._layers import InShape

__all__ = ["EmbeddingBagClassifier", "embedding_bag"]

#: The token id that pads a sequence to length L; never a word, never averaged.
PADDING_ID = 0


class EmbeddingBagClassifier(nn.Module):
    """``nn.EmbeddingBag(vocab, dim, mode="mean", padding_idx=0)`` → ``nn.Linear(dim, classes)``.

    ``forward`` takes a ``LongTensor`` (B, L) of token ids (0 = padding) and returns (B, classes)
    logits. Token ids must lie in ``[0, vocab)``."""

    def __init__(self, *, vocab: int, dim: int, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab, dim, mode="mean", padding_idx=PADDING_ID)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"embedding_bag: input must be a (B, L) tensor of integer token ids, got shape {tuple(x.shape)} of {x.dtype}")
        logits: torch.Tensor = self.fc(self.embedding(x))
        return logits


def _option(name: str, value: object, *, minimum: int) -> int:
    """``value`` as a Python int >= ``minimum`` (NumPy integers accepted; bools, floats refused)."""
    bad = ValueError(f"model 'embedding_bag': option {name} must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, bool):
        raise bad
    try:
        n = operator.index(value)  # type: ignore[arg-type]  # any object may be tried; a non-integer raises TypeError, caught below
    except TypeError:
        raise bad from None
    if n < minimum:
        raise bad
    return n


def embedding_bag(*, in_shape: InShape, num_classes: int, vocab: int | None = None, dim: int = 64) -> nn.Module:
    """Bag-of-embeddings classifier for token sequences ``in_shape = (L,)``: the mean of the
    non-padding token embeddings (``nn.EmbeddingBag``, mode "mean", padding id 0) → Linear.

    ``vocab``: the number of token ids, padding id 0 included (required, >= 2); ``dim``: the
    embedding width (default 64). Parameters: vocab·dim + dim·classes + classes (the padding row
    included, though it never gets a gradient) — 320,130 for vocab 5000, dim 64, 2 classes. The
    sequence length L does not size any layer: any L runs. A row of padding only averages
    nothing and gets the zero embedding (``nn.EmbeddingBag``'s behaviour), hence the Linear's
    bias as logits. Embeddings start as PyTorch initialises them, N(0, 1) with the padding row
    zero.
    """
    if len(in_shape) != 1:
        raise ValueError(f"model 'embedding_bag': needs token inputs (L,) (a sequence of token ids), got in_shape {tuple(in_shape)!r}")
    if vocab is None:
        raise ValueError("model 'embedding_bag': needs option vocab (the number of token ids, padding id 0 included)")
    v = _option("vocab", vocab, minimum=2)
    d = _option("dim", dim, minimum=1)
    return EmbeddingBagClassifier(vocab=v, dim=d, num_classes=num_classes)
