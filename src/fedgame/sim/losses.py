"""The training loss, one declaration per kind (``train.loss`` in a recipe).

A loss says how many outputs the model has for ``K`` classes, the per-example loss (what DP-SGD
clips the gradient of, and what power-of-choice ranks clients by), the batch mean plain SGD
descends, and how many predictions of a batch are right (the run's ``test_acc``).

* ``cross_entropy`` (default): softmax cross-entropy on ``K`` logits; the prediction is the
  largest logit. Exactly PyTorch's ``F.cross_entropy``, so every existing run is unchanged.
* ``bce_with_logits``: binary tasks (``K = 2``, labels 0/1) on *one* logit, the sigmoid's
  log-loss; the prediction is ``logit > 0``.
* ``mse``: regression (float targets, a dataset with ``classes == 0``) on one output; the run's
  ``test_loss`` is the test MSE and ``test_acc`` is NaN (there is nothing to count).

A plug-in loss is a class registered in :data:`LOSSES` with the same four methods.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from fedgame.core import Registry

__all__ = ["CROSS_ENTROPY", "LOSSES", "Loss", "CrossEntropy", "BCEWithLogits", "MSE", "make_loss"]

#: Name → loss class (``train.loss``).
LOSSES: Registry[Loss] = Registry("loss")


class Loss:
    """Softmax cross-entropy; subclasses change what they must."""

    name = "cross_entropy"

    def outputs(self, classes: int) -> int:
        """The model's output width for ``classes`` classes."""
        return classes

    def check(self, classes: int) -> None:
        """Refuse data this loss does not fit (one line naming ``train.loss``)."""
        if classes == 0:
            raise ValueError(f"train.loss: {self.name!r} fits class labels, and this dataset is a regression (float targets); allowed: mse")

    def per_example(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``(B,)`` losses of the outputs ``out`` for labels ``y``."""
        return F.cross_entropy(out, y, reduction="none")

    def mean(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch's mean loss (plain SGD's objective)."""
        return F.cross_entropy(out, y)

    def summed(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch's summed loss (evaluation)."""
        return F.cross_entropy(out, y, reduction="sum")

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """How many predictions of the batch are right."""
        return (out.argmax(1) == y).sum()


@LOSSES.register("cross_entropy")
class CrossEntropy(Loss):
    """Softmax cross-entropy on one logit per class (the default)."""


@LOSSES.register("bce_with_logits")
class BCEWithLogits(Loss):
    """Binary log-loss on one logit (labels 0/1; the prediction is logit > 0)."""

    def outputs(self, classes: int) -> int:
        return 1

    def check(self, classes: int) -> None:
        super().check(classes)
        if classes != 2:
            raise ValueError(
                f"train.loss: 'bce_with_logits' fits binary labels (2 classes), the data has {classes}; allowed: cross_entropy"
            )

    def per_example(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(out.reshape(-1), y.to(out.dtype), reduction="none")

    def mean(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(out.reshape(-1), y.to(out.dtype))

    def summed(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(out.reshape(-1), y.to(out.dtype), reduction="sum")

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((out.reshape(-1) > 0).long() == y).sum()


@LOSSES.register("mse")
class MSE(Loss):
    """Squared error on one output for regression targets (data with classes 0); no accuracy."""

    def outputs(self, classes: int) -> int:
        return 1

    def check(self, classes: int) -> None:
        if classes != 0:
            raise ValueError(
                f"train.loss: 'mse' fits regression targets (float labels), the data has {classes} classes; "
                "allowed: cross_entropy, bce_with_logits"
            )

    def per_example(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.reshape(-1), y.to(out.dtype), reduction="none")

    def mean(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.reshape(-1), y.to(out.dtype))

    def summed(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.reshape(-1), y.to(out.dtype), reduction="sum")

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tensor(float("nan"))  # no accuracy: test_acc is NaN, test_loss is the MSE


def make_loss(name: str = "cross_entropy") -> Loss:
    """The registered loss ``name``."""
    loss: Loss = LOSSES.create(name)
    return loss


#: The loss of a trainer or evaluation that names none.
CROSS_ENTROPY = CrossEntropy()
