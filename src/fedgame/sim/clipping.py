"""Per-example gradient clipping in a single backward pass ("book-keeping").

For ``Linear`` and ``Conv2d`` layers the gradient of example j is a product of what the layer
saw and what came back: ∇W_j = g_jᵀ a_j (a: the layer's input, unfolded for convolutions; g: the
gradient of the loss of example j with respect to the layer's output). So one forward pass that
keeps each layer's input and output, and *one* backward pass to the layer outputs
(``torch.autograd.grad``, which computes no weight gradients at all), give everything needed:

* per-example norms: ghost norms ‖a_j‖·‖g_j‖ for plain linear layers (Li et al. 2022), explicit
  per-example gradients for convolutions (small: C_out × C_in·k² per example), all B of them from
  one grouped backward-weight convolution with the batch folded into the channels;
* the clipped sum Σ_j c_j ∇W_j, formed directly from the book-kept a and g with the clip factors
  c_j = min(1, C/‖∇_j‖) (Bu et al., "Differentially private optimization on large model at small
  cost", ICML 2023).

Token embeddings (``nn.EmbeddingBag`` in mode "mean" or "sum", ``nn.Embedding``) are book-kept
the same way, from the token ids the layer saw and the gradient at its output. For a bag of
example j with n_j non-padding tokens, c_{j,v} of them token v, and g_j the gradient at the bag's
output, ∇W_j has row v = s_{j,v}·g_j with s_{j,v} = c_{j,v}/n_j (mean) or c_{j,v} (sum) and
nothing in the padding row, so ‖∇W_j‖² = ‖g_j‖²·Σ_v s_{j,v}²; a bag of padding only (n_j = 0)
has a zero gradient. For ``nn.Embedding`` row v is Σ_{t: x_{j,t} = v} g_{j,t}. The counts come
from sorting each example's token ids (equal ids become runs); the clipped sum
Σ_j c_j ∇W_j is one indexed accumulation over the batch's tokens. Both are vectorised, free of
host synchronisation and give the same bits for any thread count and on every GPU run
(:func:`_accumulate`).

This avoids the second backward pass of ghost clipping (Opacus ``grad_sample_mode="ghost"``) and
the per-example weight gradients of wide linear layers. ``bench/run.py`` measures it against
Opacus; :func:`supports` tells whether a model has only layers this covers (else the local
trainer falls back to Opacus).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from fedgame.sim.losses import CROSS_ENTROPY, Loss

__all__ = ["BookKeepingClipper", "supports"]

_LAYERS = (nn.Linear, nn.Conv2d, nn.EmbeddingBag, nn.Embedding)
_Layer = nn.Linear | nn.Conv2d | nn.EmbeddingBag | nn.Embedding
_Tokens = nn.EmbeddingBag | nn.Embedding


def _unsupported(m: nn.Module) -> bool:
    """A layer of a covered kind in a configuration the clipper does not cover."""
    if isinstance(m, nn.Conv2d):
        return m.groups != 1 or isinstance(m.padding, str) or m.padding_mode != "zeros"
    if isinstance(m, _Tokens):
        # max_norm renormalises rows in the forward pass; scale_grad_by_freq scales by counts over
        # the whole batch (mixing examples); mode "max" routes the gradient to one token per dim
        if m.max_norm is not None or m.scale_grad_by_freq:
            return True
        return isinstance(m, nn.EmbeddingBag) and m.mode not in ("mean", "sum")
    return False


def supports(model: nn.Module) -> bool:
    """True when every trainable parameter belongs to a Linear, an (ungrouped, zero-padded)
    Conv2d, an ``nn.EmbeddingBag`` of mode "mean" or "sum" or an ``nn.Embedding`` (neither with
    ``max_norm`` or ``scale_grad_by_freq``; any ``padding_idx``)."""
    covered: set[int] = set()
    for m in model.modules():
        if _unsupported(m):
            return False
        if isinstance(m, _LAYERS):
            covered.update(id(p) for p in m.parameters(recurse=False))
    return all(id(p) in covered for p in model.parameters() if p.requires_grad)


def _sq_norms(v: torch.Tensor) -> torch.Tensor:
    """Row-wise squared L2 norms of a B×n matrix in one pass (no B×n temporary)."""
    sq: torch.Tensor = torch.linalg.vector_norm(v, dim=1).square()
    return sq


def _per_example_conv_grads(m: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """B×O×(C·k²) per-example weight gradients of conv ``m`` from its input ``a`` (B×C×H×W)
    and the gradient ``g`` of the loss at its output (B×O×H'×W').

    The batch is folded into the channels of one grouped convolution (groups = B), whose weight
    gradient *is* the stack of per-example gradients: one oneDNN backward-weight call, 2.5×
    faster on this CPU than unfolding the input (im2col) and a batched matmul, and without the
    B×C·k²×H'W' unfolded copy (``bench/results/speed_amd_avx512.json``)."""
    b, c = a.shape[0], a.shape[1]
    o = g.shape[1]
    kh, kw = m.kernel_size
    ai = a.contiguous().reshape(1, b * c, a.shape[2], a.shape[3])
    gi = g.contiguous().reshape(1, b * o, g.shape[2], g.shape[3])
    shape_only = torch.empty((b * o, c, kh, kw), dtype=ai.dtype, device=ai.device)  # read for its shape only
    padding = m.padding if isinstance(m.padding, tuple) else (m.padding, m.padding)
    _, gw, _ = torch.ops.aten.convolution_backward(
        gi, ai, shape_only, None, m.stride, padding, m.dilation, False, (0, 0), b, (False, True, False)
    )
    per: torch.Tensor = gw.reshape(b, o, c * kh * kw)
    return per


def _token_runs(tok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each example's token ids (B×T) sorted, so equal ids form runs: the sort permutation
    (B×T), the run of each sorted position (B·T ids in [0, B·T), runs of different examples
    distinct) and whether a position starts its run (B×T). Fixed shapes: no host sync."""
    srt, perm = tok.sort(dim=1, stable=True)
    start = torch.ones_like(srt, dtype=torch.bool)
    start[:, 1:] = srt[:, 1:] != srt[:, :-1]
    run = start.reshape(-1).cumsum(0) - 1
    return perm, run, start


def _accumulate(out: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``out[index[i]] += values[i]`` for every i, in place, with the same bits however many
    threads run it: ``index_add_`` on the CPU (serial over the index; ``index_put_`` with
    ``accumulate=True`` splits it over threads, and its sums changed with the thread count),
    ``index_put_(accumulate=True)`` on a GPU (sort-based; ``index_add_`` there adds atomically,
    in a varying order)."""
    if out.device.type == "cpu":
        return out.index_add_(0, index, values)
    return out.index_put_((index,), values, accumulate=True)


def _per_run_sum(run: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Sums of ``values`` (N or N×D, in sorted-position order) over each run (N or N×D; runs
    beyond the last hold zero)."""
    return _accumulate(torch.zeros_like(values), run, values)


def _token_sq_norms(m: _Tokens, tok: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example squared norms (B) of the weight gradient of embedding layer ``m`` from the
    token ids ``tok`` it saw (B×T) and the gradient ``g`` at its output (B×dim for a bag,
    B×T×dim for ``nn.Embedding``); and the per-token weights (B×T) that scale ``g`` into the
    gradient rows of the tokens (0 for padding)."""
    keep = (tok != m.padding_idx) if m.padding_idx is not None else torch.ones_like(tok, dtype=torch.bool)
    w = keep.to(g.dtype)
    if isinstance(m, nn.EmbeddingBag) and m.mode == "mean":
        w = w / w.sum(1, keepdim=True).clamp(min=1.0)  # 1/n_j; a padding-only bag keeps weight 0
    b, t = tok.shape
    perm, run, start = _token_runs(tok)
    if isinstance(m, nn.EmbeddingBag):  # ‖g_j‖² Σ_v s_{j,v}², s_{j,v} = Σ_{t: x_{j,t} = v} w_{j,t}
        s = _per_run_sum(run, w.gather(1, perm).reshape(-1))
        sumsq = (s[run].reshape(b, t).square() * start).sum(1)
        return _sq_norms(g) * sumsq, w
    gs = (g * w[..., None]).gather(1, perm[..., None].expand(-1, -1, g.shape[-1]))  # Embedding
    rows = _per_run_sum(run, gs.reshape(b * t, -1))
    per_run = _sq_norms(rows)
    return (per_run[run].reshape(b, t) * start).sum(1), w


class BookKeepingClipper:
    """Computes Σ_j clip_C(∇ℓ_j) into ``p.grad`` for a supported model (see module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        if not supports(model):
            raise ValueError(
                "book-keeping clipping: the model has parameters outside Linear, Conv2d, EmbeddingBag (mean/sum) "
                "and Embedding layers, or such a layer in a configuration it does not cover"
            )
        self.model = model
        self.layers = [m for m in model.modules() if isinstance(m, _LAYERS) and any(p.requires_grad for p in m.parameters(recurse=False))]
        self._records: list[tuple[_Layer, torch.Tensor, torch.Tensor]] = []
        self._active = False
        for m in self.layers:
            if isinstance(m, _Tokens):
                m.register_forward_hook(self._token_hook, with_kwargs=True)
            else:
                m.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        if self._active:
            # the hook is registered on self.layers only: Linear and Conv2d modules
            self._records.append((cast("nn.Linear | nn.Conv2d", module), inputs[0].detach(), output))

    def _token_hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: torch.Tensor) -> None:
        if not self._active:
            return
        m = cast("nn.EmbeddingBag | nn.Embedding", module)
        tok = args[0] if args else kwargs["input"]
        if isinstance(m, nn.EmbeddingBag):
            extra = [*args[1:], kwargs.get("offsets"), kwargs.get("per_sample_weights")]
            if tok.dim() != 2 or any(e is not None for e in extra):
                raise ValueError(
                    "book-keeping clipping: an EmbeddingBag must get a (B, L) tensor of token ids, "
                    f"without offsets or per_sample_weights (got shape {tuple(tok.shape)})"
                )
        self._records.append((m, tok.detach().reshape(tok.shape[0], -1), output))

    def clipped_sum(
        self, x: torch.Tensor, y: torch.Tensor, max_grad_norm: float, *, autocast: torch.dtype | None = None, loss: Loss = CROSS_ENTROPY
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Set ``p.grad`` to the sum of per-example gradients clipped to ``max_grad_norm``;
        return (sum of losses, per-example gradient norms).

        ``autocast=torch.bfloat16`` runs the forward pass (and so the backward to the layer
        outputs) under bfloat16 autocast; the book-kept activations and output gradients are
        cast back to float32 before the per-example gradients, their norms, the clip factors
        and the clipped sum, so every privacy-relevant quantity is computed in float32."""
        self._records = []
        self._active = True
        try:
            if autocast is None:
                losses = loss.per_example(self.model(x), y)
            else:
                with torch.autocast(device_type=x.device.type, dtype=autocast):
                    losses = loss.per_example(self.model(x), y).float()
        finally:
            self._active = False
        records = self._records
        self._records = []
        if len({id(m) for m, _, _ in records}) != len(records):
            raise ValueError("book-keeping clipping: a layer is used twice in one forward pass")
        outs = [o for _, _, o in records]
        grads = torch.autograd.grad(losses.sum(), outs)
        b = x.shape[0]
        if autocast is not None:
            dtype = torch.float32
        elif x.is_floating_point():
            dtype = x.dtype
        else:  # token ids: the dtype of the gradients at the layer outputs
            dtype = grads[0].dtype if grads else torch.get_default_dtype()
        sq = torch.zeros(b, dtype=dtype, device=x.device)
        kept: list[tuple[_Layer, torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = []
        for (m, a, _), g in zip(records, grads, strict=True):
            if autocast is not None:  # per-example gradients, norms and clipping in float32
                a = a if isinstance(m, _Tokens) else a.float()  # token ids stay integers
                g = g.float()
            if isinstance(m, _Tokens):  # a: token ids B×T; g: B×dim (bag) or B×T×dim
                if a.shape[0] != b:
                    raise ValueError(f"book-keeping clipping: an embedding saw {a.shape[0]} rows of tokens for a batch of {b}")
                g = g.reshape(b, -1) if isinstance(m, nn.EmbeddingBag) else g.reshape(b, a.shape[1], -1)
                sq_tok, w = _token_sq_norms(m, a, g)
                sq += sq_tok
                kept.append((m, a, g, w))
            elif isinstance(m, nn.Conv2d):
                per = _per_example_conv_grads(m, a, g)  # B×O×K: per-example weight gradients
                sq += _sq_norms(per.reshape(b, -1))
                gb = g.sum((2, 3)) if m.bias is not None and m.bias.requires_grad else None
                if gb is not None:
                    sq += _sq_norms(gb)
                kept.append((m, per, g, gb))
            else:  # Linear
                if a.dim() == 2:
                    sq += _sq_norms(a) * _sq_norms(g)  # ghost norm ‖a_j‖²‖g_j‖²
                    gb = g if m.bias is not None and m.bias.requires_grad else None
                    if gb is not None:
                        sq += _sq_norms(gb)
                    kept.append((m, a, g, gb))
                else:  # sequence input: B×T×I, B×T×O
                    per = torch.einsum("bto,bti->boi", g, a)
                    sq += per.reshape(b, -1).pow(2).sum(1)
                    gb = g.sum(1) if m.bias is not None and m.bias.requires_grad else None
                    if gb is not None:
                        sq += gb.pow(2).sum(1)
                    kept.append((m, per, None, gb))
        norms = sq.sqrt()
        coef = max_grad_norm / norms.clamp(min=max_grad_norm)  # min(1, C/‖∇_j‖), exact below C
        for m, t1, t2, gb in kept:
            w = m.weight
            if isinstance(m, _Tokens):  # t1: token ids, t2: output gradient, gb: token weights
                assert t2 is not None and gb is not None
                scale = coef[:, None].to(gb.dtype) * gb  # B×T: c_j · w_{j,t}
                rows = scale[..., None] * (t2[:, None, :] if isinstance(m, nn.EmbeddingBag) else t2)
                w.grad = _accumulate(torch.zeros_like(w), t1.reshape(-1), rows.reshape(-1, w.shape[1]).to(w.dtype))
                continue
            if isinstance(m, nn.Conv2d):
                w.grad = torch.einsum("b,bok->ok", coef, t1).reshape(w.shape)
            elif t2 is not None:  # Linear, 2-D: (c ⊙ g)ᵀ a
                w.grad = (t2 * coef[:, None]).t().mm(t1)
            else:
                w.grad = torch.einsum("b,boi->oi", coef, t1)
            if gb is not None:
                bias = m.bias
                assert bias is not None  # gb is kept only for a layer with a trainable bias
                bias.grad = coef @ gb
        return losses.detach().sum(), norms.detach()
