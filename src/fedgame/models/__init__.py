"""Model zoo of fedgame: the architectures of the reproduced papers, all DP-compatible.

``build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)`` builds a named
model for per-example inputs ``in_shape``: ``(C, H, W)`` images, ``(F,)`` feature vectors
(``logreg``, ``mlp``) or ``(L,)`` token ids (``embedding_bag``, with option ``vocab``);
:func:`list_models` lists the names; :func:`model_options` a model's keyword options;
:func:`count_params` gives the dimension ``d`` of the parameter vector. No model contains
BatchNorm (GroupNorm where normalisation is needed), so per-example gradients —
``torch.func.vmap(grad)``, Opacus, book-keeping — are well defined. See
:mod:`fedgame.models.zoo` for the table of architectures and parameter counts.
"""

from __future__ import annotations

from fedgame.models.zoo import (
    MODELS,
    InShape,
    build_model,
    count_params,
    list_models,
    model_options,
)

__all__ = ["MODELS", "InShape", "build_model", "count_params", "list_models", "model_options"]
