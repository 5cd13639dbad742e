"""Client-side Gaussian mechanisms on flat parameter/update tensors.

A mechanism has a sensitivity half (:meth:`GaussianMechanism.constrain`: clip the whole flat
vector to L2 norm ``clip``) and a noise half (:meth:`GaussianMechanism.add_noise`: add i.i.d.
N(0, noise_std²) drawn from a caller-supplied ``torch.Generator``), plus classmethod calibrators
and the :class:`~fedgame.privacy.events.PrivacyEvent` the accountant records. :class:`NoPrivacy`
is the null object with the same interface.

The sensitivity Δ of the released quantity depends on what is clipped and how it is averaged
(FedPCS Eq. 46 / QI-DPFL Corollary 1: Δ = 2W/|D_i|; JDP-FL M3: Δ₂f = 2C/d_i or 2C), so the
calibrators and :meth:`GaussianMechanism.event` take it explicitly.
"""

from __future__ import annotations

import math
from typing import Literal, Self

import torch
from torch import Tensor

from fedgame.core.validate import check_positive
from fedgame.privacy.analysis.gaussian import analytic_gaussian_std, classic_gaussian_std
from fedgame.privacy.analysis.zcdp import gaussian_std_for_zcdp
from fedgame.privacy.events import PrivacyEvent

__all__ = ["GaussianMechanism", "NoPrivacy", "clip_by_l2", "per_example_clip_factors"]


def clip_by_l2(v: Tensor, max_norm: float) -> Tensor:
    """v · C / max(‖v‖₂, C): the L2 projection of the whole (flattened) tensor onto the ball of
    radius C (FedPCS / QI-DPFL clip_W, JDP-FL M3 line 1). A tensor with ‖v‖₂ ≤ C is returned
    bit-identical; a longer one has norm C up to rounding. The norm is computed in float64."""
    c = check_positive("max_norm", max_norm, allow_inf=True, show="str", not_a_number=None)
    if math.isinf(c):
        return v
    norm = float(torch.linalg.vector_norm(v, dtype=torch.float64))
    if not math.isfinite(norm):
        raise ValueError(f"v: must have a finite L2 norm, got {norm}")
    if norm <= c:
        return v
    return v * (c / norm)


def per_example_clip_factors(norms: Tensor, max_grad_norm: float) -> Tensor:
    """Per-example scale factors C / max(‖g_i‖, C) for DP-SGD clipping (Abadi et al. 2016;
    PHS Algorithm 1 line 15: g / max(1, ‖g‖/C)). Exactly 1 for ‖g_i‖ ≤ C (no ε-bias, so such
    gradients are untouched), and never divides by zero."""
    c = check_positive("max_grad_norm", max_grad_norm, say_finite=True, show="str", not_a_number=None)
    return c / torch.clamp(norms, min=c)


class GaussianMechanism:
    """Clip a flat vector to L2 norm ``clip``, add N(0, noise_std² I).

    For a released quantity of L2 sensitivity Δ the mechanism is Δ²/(2σ²)-zCDP (Bun & Steinke
    2016, Prop. 1.6) and its event is ``PrivacyEvent.gaussian(noise_multiplier=σ/Δ)``.
    ``clip = inf`` disables clipping; ``noise_std = 0`` disables noise.
    """

    def __init__(
        self, *, clip: float, noise_std: float, sensitivity: float | None = None, on: Literal["update", "params"] = "update"
    ) -> None:
        self.clip = check_positive("clip", clip, allow_inf=True, show="str", not_a_number=None)
        sd = float(noise_std)
        if not (sd >= 0 and math.isfinite(sd)):
            raise ValueError(f"noise_std: must be >= 0 and finite, got {noise_std}")
        if on not in ("update", "params"):
            raise ValueError(f"on: must be 'update' or 'params', got {on!r}")
        self.noise_std = sd
        self.sensitivity = (
            None if sensitivity is None else check_positive("sensitivity", sensitivity, say_finite=True, show="str", not_a_number=None)
        )
        #: what a client's upload applies the mechanism to: its displacement w_i − w(t)
        #: (``"update"``), or its local model's whole parameter vector w_i (``"params"``: NbAFL,
        #: FedPCS Prop. 1 read literally, ‖w_i(t)‖ ≤ W; the server still receives w̃_i − w(t))
        self.on = on

    # -- calibrators --------------------------------------------------------------------
    @classmethod
    def for_zcdp(cls, rho: float, *, clip: float, sensitivity: float, on: Literal["update", "params"] = "update") -> Self:
        """σ = Δ/sqrt(2ρ): ρ-zCDP for sensitivity Δ (FedPCS Prop. 1 / Eq. 46 with Δ = 2W/|D_i|;
        QI-DPFL Eq. 10)."""
        if not (rho > 0 and math.isfinite(rho)):
            raise ValueError(f"rho: must be > 0 and finite, got {rho}")
        std = float(gaussian_std_for_zcdp(rho, sensitivity))
        return cls(clip=clip, noise_std=std, sensitivity=sensitivity, on=on)

    @classmethod
    def for_epsilon_delta(
        cls,
        eps: float,
        delta: float,
        *,
        clip: float,
        sensitivity: float,
        calibrator: Literal["classic", "analytic"] = "classic",
    ) -> Self:
        """(ε, δ)-DP for sensitivity Δ. ``"classic"``: σ = sqrt(2 ln(1.25/δ)) Δ/ε (Dwork & Roth
        Thm A.1; JDP-FL Eq. 6; proven for ε < 1, a warning is logged otherwise). ``"analytic"``:
        the exact smallest σ (Balle & Wang 2018, Thm 8)."""
        if calibrator == "classic":
            std = float(classic_gaussian_std(eps, delta, sensitivity))
        elif calibrator == "analytic":
            std = float(analytic_gaussian_std(eps, delta, sensitivity))
        else:
            raise ValueError(f"calibrator: must be 'classic' or 'analytic', got {calibrator!r}")
        return cls(clip=clip, noise_std=std, sensitivity=sensitivity)

    # -- the two halves -----------------------------------------------------------------
    def constrain(self, v: Tensor) -> Tensor:
        """L2 clip of the whole flat vector: v · min(1, clip/‖v‖₂) (norm ≤ clip is untouched)."""
        return clip_by_l2(v, self.clip)

    def add_noise(self, v: Tensor, gen: torch.Generator) -> Tensor:
        """v + N(0, noise_std² I), i.i.d. per coordinate, drawn from ``gen`` in v's dtype and on
        v's device (the generator's device must match). ``noise_std = 0`` returns v unchanged."""
        if self.noise_std == 0.0:
            return v
        if not v.is_floating_point():
            raise TypeError(f"v: must be a floating-point tensor, got dtype {v.dtype}")
        noise = torch.randn(v.shape, generator=gen, dtype=v.dtype, device=v.device)
        return v + noise * self.noise_std

    def privatize(self, v: Tensor, gen: torch.Generator) -> Tensor:
        """``add_noise(constrain(v), gen)``."""
        return self.add_noise(self.constrain(v), gen)

    def event(self, sensitivity: float | None = None) -> PrivacyEvent:
        """The accountant's event for one release of a quantity of L2 sensitivity Δ (given, or
        remembered from the calibrator): ``PrivacyEvent.gaussian(noise_multiplier=σ/Δ)``."""
        if sensitivity is None:
            sensitivity = self.sensitivity
        if sensitivity is None:
            raise ValueError("sensitivity: required (this mechanism was not built by a calibrator)")
        s = check_positive("sensitivity", sensitivity, say_finite=True, show="str", not_a_number=None)
        return PrivacyEvent.gaussian(noise_multiplier=self.noise_std / s)

    def __repr__(self) -> str:
        on = "" if self.on == "update" else ", on='params'"
        return f"GaussianMechanism(clip={self.clip:g}, noise_std={self.noise_std:g}{on})"


class NoPrivacy:
    """Null mechanism with the :class:`GaussianMechanism` interface: no clipping, no noise,
    no event."""

    clip: float = math.inf
    noise_std: float = 0.0
    sensitivity: float | None = None

    def constrain(self, v: Tensor) -> Tensor:
        return v

    def add_noise(self, v: Tensor, gen: torch.Generator) -> Tensor:
        return v

    def privatize(self, v: Tensor, gen: torch.Generator) -> Tensor:
        return v

    def event(self, sensitivity: float | None = None) -> None:
        return None

    def __repr__(self) -> str:
        return "NoPrivacy()"
