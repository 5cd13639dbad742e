"""Local training: the hot loop, in one place.

A client starts from the global parameters, runs SGD on its own examples and returns its new
parameters. With :class:`DPSGD` every step clips each example's gradient to ``max_grad_norm``
and adds Gaussian noise of std ``noise_multiplier · max_grad_norm`` to the clipped sum (Abadi et
al. 2016; PHS Algorithm 1 lines 12-17), the noise drawn from the client's own generator.

Per-example clipping backends (measured side by side in ``bench/``):

* ``"bk"`` — book-keeping (:mod:`fedgame.sim.clipping`): per-example norms and the clipped sum
  from one forward and one backward pass, for models made of Linear and Conv2d layers.
  ``"auto"`` (the default) uses it when the model allows and ghost clipping otherwise.

* ``"ghost"`` — Opacus' ``GradSampleModuleFastGradientClipping`` with ghost clipping: per-example
  gradient *norms* from hooks without materialising per-example gradients, then a second backward
  pass of the re-weighted loss. The fastest on CPU for conv nets with wide linear layers.
* ``"functorch"`` — ``torch.func.vmap(grad(...))`` per-example gradients, clipped and summed.
* ``"hooks"`` — Opacus' ``GradSampleModule``: per-example gradients materialised by hooks in one
  backward pass, then clipped and summed. Cheapest when the model is small (the PHS MNIST CNN,
  26k parameters), where materialising B × d gradients costs less than a second backward pass.

Data live in one tensor per split; a client is an index tensor into it, so nothing is copied
per round except the mini-batches themselves.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from fedgame.core.allocator import keep_freed_memory
from fedgame.privacy.plans import DPSGD
from fedgame.sim.losses import CROSS_ENTROPY, Loss

# Opacus hooks warn on every step that inputs do not require grad; that is expected here.
warnings.filterwarnings("ignore", message="Full backward hook is firing")

__all__ = [
    "LocalSpec",
    "LocalResult",
    "LocalTrainer",
    "Precision",
    "MemoryFormat",
    "client_losses",
    "evaluate",
    "flat_params",
    "resolve_device",
    "device_label",
    "set_flat_params",
]

PerExample = Literal["auto", "bk", "ghost", "functorch", "hooks"]
Precision = Literal["fp32", "bf16"]
MemoryFormat = Literal["auto", "channels_last", "contiguous"]


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def flat_params(model_or_params: nn.Module | Sequence[torch.Tensor]) -> torch.Tensor:
    """The trainable parameters as one flat float32 CPU vector, each tensor in its logical
    (row-major, NCHW) order whatever its memory format, so a vector means the same model on
    any device and in channels_last or contiguous layout."""
    params = trainable(model_or_params) if isinstance(model_or_params, nn.Module) else list(model_or_params)
    return torch.cat([p.detach().reshape(-1).to("cpu") for p in params])


@torch.no_grad()
def set_flat_params(model_or_params: nn.Module | Sequence[torch.Tensor], vec: torch.Tensor) -> None:
    """Copy flat ``vec`` (logical order, any device) into the parameters in place, keeping each
    parameter's own storage, device and memory format (``vector_to_parameters`` would replace
    them with contiguous views of ``vec``)."""
    params = trainable(model_or_params) if isinstance(model_or_params, nn.Module) else list(model_or_params)
    offset = 0
    for p in params:
        n = p.numel()
        p.copy_(vec[offset : offset + n].view(p.shape))
        offset += n
    if offset != vec.numel():
        raise ValueError(f"parameters: the model has {offset} trainable values, the vector {vec.numel()}")


def resolve_device(device: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without CUDA is refused."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device: 'cuda' but no CUDA device is available here; allowed: auto, cpu, cuda (with a CUDA GPU)")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"train.device: must be one of auto, cpu, cuda; got {device!r}")
    return torch.device(device)


def device_label(device: torch.device) -> str:
    """``cpu``, or ``cuda (<the GPU's name>)``: how ``summary.json`` and ``fedgame validate`` name a device."""
    return f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)


@functools.cache
def cpu_bf16_units(cpuinfo: Path = Path("/proc/cpuinfo")) -> Literal["amx", "avx512_bf16", "none"] | None:
    """What this x86 CPU's bf16 matrix products run on, from ``/proc/cpuinfo``'s flags: ``"amx"``
    (AMX tiles), ``"avx512_bf16"`` (AVX-512 BF16 dot products) or ``"none"``; ``None`` where the
    flags cannot be read (not Linux on x86), so the caller falls back to oneDNN's own answer.
    Read once per process and file (the flags do not change; :func:`bf16_supported` asks at
    every recipe validation and trainer construction)."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return None
    flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), None)
    if flags is None:
        return None
    if "amx_bf16" in flags:
        return "amx"
    return "avx512_bf16" if "avx512_bf16" in flags else "none"


def bf16_supported(device: torch.device) -> bool:
    """Whether bfloat16 autocast runs natively: on CUDA, a GPU that reports bf16 support; on an
    x86 CPU, AMX or AVX-512 BF16 (:func:`cpu_bf16_units`); elsewhere oneDNN's bf16 kernels
    (``_is_mkldnn_bf16_supported``). oneDNN's check alone says yes on every AVX-512 CPU, where it
    emulates bf16 with AVX-512 integer shuffles: measured on an Intel Xeon whose virtual machine
    exposes AVX-512 but neither AMX nor AVX-512 BF16, a McMahan CNN step at batch 32 took 76 ms in
    bf16 against 20 ms in fp32 (docs/speed.md), so bf16 is refused there as on AVX2-only CPUs."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    units = cpu_bf16_units()
    if units is not None:
        return units != "none"
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _device_of(model: nn.Module) -> torch.device:
    return next(iter(model.parameters())).device


def _has_conv(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def _channels_last_grad(grad: torch.Tensor) -> torch.Tensor:
    return grad.contiguous(memory_format=torch.channels_last)


def _grad_in_input_layout(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
    """A ``Flatten``'s forward pre-hook: where its input is a channels_last feature map that
    needs a gradient, that gradient is handed back in channels_last too.

    Why: flattening a channels_last map copies it into NCHW order (what the linear layer after it
    reads), so its backward returns an NCHW-contiguous gradient; the max-pool backward before it
    then copied its channels_last input into NCHW to match, and the convolution backward before
    that reordered the gradient back into channels_last, every step. The values are the same either
    way (a re-layout, and a max-pool backward adds the same terms in the same order in both
    layouts), so the numbers are the same bit for bit (tests/sim/test_precision.py); a McMahan CNN
    step in fp32 on one thread took 19.4 ms instead of 19.9 on the Intel AVX-512 host."""
    x = args[0] if args else None
    if isinstance(x, torch.Tensor) and x.requires_grad and x.dim() == 4 and not x.is_contiguous():
        if x.is_contiguous(memory_format=torch.channels_last):
            x.register_hook(_channels_last_grad)  # type: ignore[no-untyped-call]  # torch leaves Tensor.register_hook unannotated


@dataclass(frozen=True)
class LocalSpec:
    """How every client trains: ``epochs`` (passes over its data) or a fixed number of
    ``steps``; mini-batches of ``batch_size``; SGD with ``lr``, ``momentum``, ``weight_decay``
    (a fresh optimiser state each round)."""

    batch_size: int
    lr: float
    epochs: int | None = 1
    steps: int | None = None
    momentum: float = 0.0
    weight_decay: float = 0.0

    def n_steps(self, n_examples: int) -> int:
        if self.steps is not None:
            return self.steps
        assert self.epochs is not None
        return self.epochs * max(1, math.ceil(n_examples / self.batch_size))


@dataclass(frozen=True)
class LocalResult:
    params: torch.Tensor
    train_loss: float
    steps: int
    n_examples: int
    clipped_fraction: float = 0.0
    grad_variance: float | None = None
    """σ_L² of the local mini-batch gradients when asked for (:class:`_GradMoments`), else None."""


class _GradMoments:
    """Running Σ g_b and Σ ‖g_b‖² of the mini-batch gradients a client steps with.

    σ_L² = mean_b ‖g_b − ∇F_i‖² (DELTA's local variance, Wang et al. 2023) is estimated with the
    mean of the g_b standing in for ∇F_i, (S/(S−1)) (mean ‖g_b‖² − ‖mean g_b‖²), unbiased when
    the g_b are i.i.d. around ∇F_i (the model moves by S small steps meanwhile). One step gives
    no estimate (None). Under DP-SGD the g_b are the privatised gradients (post-processing)."""

    def __init__(self) -> None:
        self.total: torch.Tensor | None = None
        self.sq = 0.0
        self.count = 0

    def add(self, params: list[nn.Parameter]) -> None:
        g = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None]).double()
        self.total = g if self.total is None else self.total + g
        self.sq += float(g @ g)
        self.count += 1

    def variance(self) -> float | None:
        if self.count < 2 or self.total is None:
            return None
        s = self.count
        mean_sq = float(self.total @ self.total) / (s * s)
        return max(0.0, (self.sq / s - mean_sq) * s / (s - 1))


class _SGD:
    """``torch.optim.SGD(params, lr, momentum, weight_decay, foreach=True)`` for one local
    training: ``step`` calls PyTorch's own functional SGD (``torch.optim.sgd.sgd``, the function
    ``SGD.step`` calls, with the same arguments), so the update is the same bit for bit
    (tests/sim/test_local.py). Not ``torch.optim.SGD`` itself because constructing any
    ``torch.optim.Optimizer`` imports ``torch._dynamo`` (its methods are wrapped to disable
    ``torch.compile`` inside them): about 2 s of CPU in every fresh process that trains once, i.e.
    every Flower ClientApp process (one per message in Flower 1.42), every spawned pool worker."""

    def __init__(self, params: list[nn.Parameter], *, lr: float, momentum: float, weight_decay: float) -> None:
        self.params, self.lr, self.momentum, self.weight_decay = params, lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(params)

    def zero_grad(self) -> None:
        """``zero_grad(set_to_none=True)``: every gradient to None."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        from torch.optim.sgd import sgd

        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params: list[torch.Tensor] = [self.params[i] for i in live]
        grads: list[torch.Tensor] = [g for g in (p.grad for p in params) if g is not None]
        buffers = [self.buffers[i] for i in live] if self.momentum != 0 else []
        sgd(
            params,
            grads,
            buffers,
            weight_decay=self.weight_decay,
            momentum=self.momentum,
            lr=self.lr,
            dampening=0,
            nesterov=False,
            maximize=False,
            has_sparse_grad=False,
            foreach=True,
            fused=False,
            grad_scale=None,
            found_inf=None,
        )
        if self.momentum != 0:
            for i, b in zip(live, buffers, strict=True):
                self.buffers[i] = b


class LocalTrainer:
    """Trains any client of one federated dataset with one reusable model instance.

    ``device`` is where the model, the training data and the DP-SGD noise live (``auto``: CUDA
    when available); flat parameters go in and come out on the CPU, so the server side never
    needs the device. ``precision="bf16"`` runs forward passes under bfloat16 autocast; the
    per-example gradients, their norms, clipping, noise and the SGD step stay float32.
    ``memory_format="auto"`` trains conv nets in channels_last on the CPU (oneDNN's fastest
    layout here: ``bench/results/speed_amd_avx512.json``), which changes only float round-off.
    ``cuda_graphs``: on a GPU, each full mini-batch step of plain SGD replays one captured
    CUDA graph (:class:`_StepGraph`) instead of launching its kernels one by one from Python."""

    #: whether a channels_last model's ``Flatten`` layers hand their gradient back in channels_last
    #: on the CPU (:func:`_grad_in_input_layout`); a class switch so a test or benchmark can compare
    keep_grad_layout = True

    def __init__(
        self,
        *,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        spec: LocalSpec,
        per_example: PerExample = "auto",
        precision: Precision = "fp32",
        memory_format: MemoryFormat = "auto",
        device: str | torch.device = "cpu",
        cuda_graphs: bool = True,
        loss: Loss = CROSS_ENTROPY,
    ) -> None:
        keep_freed_memory()  # a step's large blocks stay in the heap between steps (fedgame.core.allocator)
        self.device = resolve_device(device) if isinstance(device, str) else device
        if not isinstance(cuda_graphs, bool):
            raise ValueError(f"train.cuda_graphs: must be true or false, got {cuda_graphs!r}")
        self.cuda_graphs = cuda_graphs
        self._graphs: dict[tuple[int, float, float], _StepGraph] = {}
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"train.precision: must be 'fp32' or 'bf16', got {precision!r}")
        if precision == "bf16" and not bf16_supported(self.device):
            raise ValueError(f"train.precision: 'bf16' is not supported on this {self.device.type} device; allowed here: fp32")
        if memory_format not in ("auto", "channels_last", "contiguous"):
            raise ValueError(f"train.memory_format: must be one of auto, channels_last, contiguous; got {memory_format!r}")
        self.precision: Precision = precision
        if per_example == "auto":
            from fedgame.sim.clipping import supports

            per_example = "bk" if supports(model) else "ghost"
        if precision == "bf16" and per_example != "bk":
            raise ValueError(
                "train.precision: 'bf16' needs book-keeping clipping, whose per-example gradients are taken in float32 "
                f"(train.per_example 'auto' or 'bk' on a Linear/Conv2d model), got per_example {per_example!r}"
            )
        if memory_format == "auto":
            # Opacus' hooks unfold convolutions assuming contiguous weights: channels_last only
            # with our book-keeping clipper (the default whenever the model allows it)
            fast = self.device.type == "cpu" or precision == "bf16"
            memory_format = "channels_last" if _has_conv(model) and fast and per_example == "bk" else "contiguous"
        elif memory_format == "channels_last" and per_example != "bk":
            raise ValueError(
                f"train.memory_format: 'channels_last' needs train.per_example 'auto' or 'bk' (Opacus' {per_example!r} "
                "assumes contiguous conv weights); allowed here: auto, contiguous"
            )
        self.memory_format: MemoryFormat = memory_format
        model.to(self.device)
        if memory_format == "channels_last":
            model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's Module.to stubs omit memory_format
            if self.device.type == "cpu" and self.keep_grad_layout:  # on a GPU the graphs' captured steps stay as they were
                for m in model.modules():
                    if isinstance(m, nn.Flatten) and _grad_in_input_layout not in m._forward_pre_hooks.values():
                        m.register_forward_pre_hook(_grad_in_input_layout)
        self.model = model
        x = x.to(self.device)
        if memory_format == "channels_last" and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        self.x, self.y = x, y.to(self.device)
        self.spec = spec
        self.per_example = per_example
        self._bk: object | None = None
        self._dp_module: nn.Module | None = None
        self.loss = loss  # train.loss (fedgame.sim.losses): what every step and evaluation computes
        self._stochastic = any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())

    # -- public -------------------------------------------------------------------------
    def train(
        self,
        start: torch.Tensor,
        indices: torch.Tensor,
        gen: torch.Generator,
        dp: DPSGD | None = None,
        *,
        grad_variance: bool = False,
    ) -> LocalResult:
        """Train from flat parameters ``start`` on examples ``indices``; return new flat params.

        ``grad_variance`` also measures the local mini-batch gradient variance σ_L² (one
        concatenation and dot product per step; off unless a strategy needs it)."""
        n = int(indices.numel())
        if n == 0:
            raise ValueError("local training: client has no examples")
        steps = self.spec.n_steps(n)
        moments = _GradMoments() if grad_variance else None
        with self._kernels():
            if not self._stochastic:
                return self._train(start, indices, gen, steps, dp, moments)
            # Dropout draws its masks from torch's global generator: seed it from the client's own
            # generator (its seed, not its state, so the mini-batch stream is unchanged) so the same
            # (seed, round, client) gives the same masks in any order, on resume and in any process.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(gen.initial_seed() ^ 0x5DEECE66D)
                return self._train(start, indices, gen, steps, dp, moments)

    def _kernels(self) -> contextlib.AbstractContextManager[object]:
        """On a GPU, cuDNN restricted to deterministic algorithms with TF32 off while a client
        trains: cuDNN's fastest convolution backward kernels sum with atomics in a varying order,
        so the same seed would not give the same numbers, and TF32 convolutions keep 10 mantissa
        bits, which ``precision: fp32`` does not promise (bf16 is the fast mode). The previous
        flags are restored afterwards; on the CPU nothing changes."""
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        return torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True, allow_tf32=False)

    def _train(
        self, start: torch.Tensor, indices: torch.Tensor, gen: torch.Generator, steps: int, dp: DPSGD | None, moments: _GradMoments | None
    ) -> LocalResult:
        if dp is None:
            return self._train_plain(start, indices, gen, steps, moments)
        return self._train_dp(start, indices, gen, steps, dp, moments)

    def _amp(self, *, graph: bool = False) -> contextlib.AbstractContextManager[object]:
        """bfloat16 autocast for a forward pass when ``precision="bf16"``, else nothing. ``graph``:
        without autocast's cache of cast weights, which a CUDA graph capture must not use (the
        same casts, computed in the step instead of kept between steps of one autocast region)."""
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, cache_enabled=not graph)
        return contextlib.nullcontext()

    def _device_gen(self, gen: torch.Generator) -> torch.Generator:
        """The generator DP-SGD noise is drawn from: ``gen`` itself on the CPU; on a GPU a
        device generator seeded from ``gen``, after the batches are drawn from it, so a GPU
        trains on the CPU's batches and only the noise stream differs (it did not before
        2026-11-27: the seed was drawn first and shifted every batch; tests/sim/test_cuda.py)."""
        if self.device.type == "cpu":
            return gen
        seed = int(torch.randint(0, 2**62, (1,), generator=gen))
        return torch.Generator(device=self.device).manual_seed(seed)

    def _on_device(self, batches: list[torch.Tensor]) -> list[torch.Tensor]:
        """The steps' example indices on the training device: on a GPU every step's indices go
        over in one copy, sliced per step. A copy from pageable memory per step would wait for the
        GPU each time; a loop that never waits lets Python queue the next step's kernels while the
        GPU runs this one's (and a captured graph reads its indices from the device anyway)."""
        if self.device.type == "cpu" or not batches:
            return batches
        on_device = torch.cat(batches).to(self.device)
        out, at = [], 0
        for batch in batches:
            n = int(batch.numel())
            out.append(on_device[at : at + n])
            at += n
        return out

    # -- plain SGD ----------------------------------------------------------------------
    def graphed(self, moments: object | None = None) -> bool:
        """Whether plain local training replays CUDA graphs: on a GPU with ``cuda_graphs`` true,
        when a step is the same kernels every time: no momentum (its buffer is created at the
        first step), no dropout (its masks come from the global generator), no σ_L² probe (a host
        read per step). DP-SGD steps run eagerly (their noise generators are per client)."""
        return self.device.type == "cuda" and self.cuda_graphs and not self._stochastic and moments is None and self.spec.momentum == 0

    def _optimizer(self, params: list[nn.Parameter]) -> _SGD:
        s = self.spec
        return _SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)

    def _batches(self, indices: torch.Tensor, gen: torch.Generator, steps: int) -> list[torch.Tensor]:
        """Shuffled fixed-size mini-batches, reshuffled every pass, ``steps`` of them."""
        n, b = int(indices.numel()), self.spec.batch_size
        out: list[torch.Tensor] = []
        while len(out) < steps:
            perm = indices[torch.randperm(n, generator=gen)]
            out.extend(perm[i : i + b] for i in range(0, n, b))
        return out[:steps]

    def _train_plain(
        self, start: torch.Tensor, indices: torch.Tensor, gen: torch.Generator, steps: int, moments: _GradMoments | None = None
    ) -> LocalResult:
        """Plain SGD. On a GPU (:meth:`graphed`) every full mini-batch step is replayed from a
        CUDA graph and a pass's short last batch runs eagerly: the same batches (drawn on the
        CPU), the same kernels in the same order on the same tensors, so the same numbers as
        ``cuda_graphs=False`` (tests/sim/test_cuda.py), at one launch per step."""
        model = self.model
        params = trainable(model)
        model.train()
        graph = self._step_graph(params) if self.graphed(moments) else None
        set_flat_params(params, start)  # after a capture, which stepped the parameters
        opt = self._optimizer(params)
        batches = self._on_device(self._batches(indices, gen, steps))
        if graph is None:
            total = torch.zeros((), device=self.device)
            for idx in batches:
                self._step(opt, idx, total, moments=moments)
        else:
            total = graph.total
            total.zero_()
            for idx in batches:
                if idx.numel() == graph.idx.numel():
                    graph.idx.copy_(idx)
                    graph.graph.replay()
                else:
                    self._step(opt, idx, total, graph=True)
        var = None if moments is None else moments.variance()
        return LocalResult(flat_params(params), float(total) / steps, steps, int(indices.numel()), grad_variance=var)

    def _step(self, opt: _SGD, idx: torch.Tensor, total: torch.Tensor, *, moments: _GradMoments | None = None, graph: bool = False) -> None:
        """One plain SGD step on the examples ``idx`` (on the device); adds its loss to ``total``.
        ``graph``: as captured in (or run beside) a CUDA graph (:meth:`_amp`)."""
        opt.zero_grad()
        with self._amp(graph=graph):
            loss = self.loss.mean(self.model(self.x[idx]), self.y[idx])
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        if moments is not None:
            moments.add(opt.params)
        opt.step()
        total += loss.detach()

    def _step_graph(self, params: list[nn.Parameter]) -> _StepGraph | None:
        """The captured step for this trainer's batch size and SGD settings (captured at first
        use); None, with a warning, where the step cannot be captured, and eager from then on."""
        s = self.spec
        key = (s.batch_size, s.lr, s.weight_decay)
        if key not in self._graphs:
            try:
                self._graphs[key] = _StepGraph(self, params, s.batch_size)
            except RuntimeError as e:  # a model or PyTorch build whose step cannot be captured
                warnings.warn(
                    f"train.cuda_graphs: capturing the training step failed ({e}); training without CUDA graphs",
                    RuntimeWarning,
                    stacklevel=3,
                )
                self.cuda_graphs = False
                return None
        return self._graphs[key]

    # -- DP-SGD -------------------------------------------------------------------------
    def _dp_model(self) -> nn.Module:
        if self._dp_module is None:
            base = copy.deepcopy(self.model)
            if self.per_example == "ghost":
                from opacus.grad_sample import GradSampleModuleFastGradientClipping

                self._dp_module = GradSampleModuleFastGradientClipping(
                    base, max_grad_norm=1.0, use_ghost_clipping=True, loss_reduction="sum"
                )
            elif self.per_example == "hooks":
                from opacus import GradSampleModule

                self._dp_module = GradSampleModule(base, loss_reduction="sum")
            elif self.per_example == "bk":
                from fedgame.sim.clipping import BookKeepingClipper

                self._bk = BookKeepingClipper(base)
                self._dp_module = base
            else:
                self._dp_module = base
        return self._dp_module

    def _dp_batches(self, indices: torch.Tensor, gen: torch.Generator, steps: int, dp: DPSGD) -> list[torch.Tensor]:
        if dp.sampling == "shuffle":
            return self._batches(indices, gen, steps)
        n = int(indices.numel())
        if dp.sampling == "fixed":  # an independent b-of-n subset per step (PHS fixed_batch)
            b = min(self.spec.batch_size, n)
            return [indices[torch.randperm(n, generator=gen)[:b]] for _ in range(steps)]
        q = min(1.0, self.spec.batch_size / n)
        mask = torch.rand((steps, n), generator=gen) < q
        return [indices[m] for m in mask]

    def _clipped_sum_ghost(self, module: nn.Module, xb: torch.Tensor, yb: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Set ``p.grad`` to Σ_j clip_c(∇ℓ_j) with Opacus ghost clipping; return (loss sum, norms)."""
        module.max_grad_norm = c  # type: ignore[assignment]  # Opacus GradSampleModule attribute; Module.__setattr__ wants Tensor | Module
        per_sample = self.loss.per_example(module(xb), yb)
        per_sample.sum().backward(retain_graph=True)  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        for p in module.parameters():
            p.grad = None
        norms = module.get_norm_sample()  # type: ignore[operator]  # an Opacus GradSampleModule method; typed here as nn.Module
        coef = (c / norms.clamp(min=c)).detach()  # min(1, c/‖g‖), exact for ‖g‖ <= c
        module.disable_hooks()  # type: ignore[operator]  # an Opacus GradSampleModule method; typed here as nn.Module
        (coef * per_sample).sum().backward()
        module.enable_hooks()  # type: ignore[operator]  # an Opacus GradSampleModule method; typed here as nn.Module
        return per_sample.detach().sum(), norms.detach()

    def _clipped_sum_hooks(
        self, module: nn.Module, params: list[nn.Parameter], xb: torch.Tensor, yb: torch.Tensor, c: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Set ``p.grad`` to Σ_j clip_c(∇ℓ_j) from Opacus' materialised ``grad_sample``."""
        per_sample = self.loss.per_example(module(xb), yb)
        per_sample.sum().backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        b = xb.shape[0]
        gs = [p.grad_sample for p in params]  # type: ignore[attr-defined]  # grad_sample is set by Opacus' hooks
        norms = torch.sqrt(sum((g.reshape(b, -1) ** 2).sum(1) for g in gs))
        coef = c / norms.clamp(min=c)
        for p, g in zip(params, gs, strict=True):
            p.grad = torch.einsum("b,b...->...", coef, g)
            p.grad_sample = None  # type: ignore[attr-defined]  # grad_sample is set by Opacus' hooks
        return per_sample.detach().sum(), norms.detach()

    def _clipped_sum_functorch(
        self, module: nn.Module, params: list[nn.Parameter], xb: torch.Tensor, yb: torch.Tensor, c: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        names = [n for n, p in module.named_parameters() if p.requires_grad]
        detached = {n: p.detach() for n, p in zip(names, params, strict=True)}

        def loss_one(pd: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = functional_call(module, pd, (x.unsqueeze(0),))
            return self.loss.mean(out, y.unsqueeze(0))

        def loss_and_grad(pd: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            g = grad(loss_one)(pd, x, y)
            return loss_one(pd, x, y), g

        losses, grads = vmap(loss_and_grad, in_dims=(None, 0, 0))(detached, xb, yb)
        flat = [grads[n].reshape(xb.shape[0], -1) for n in names]
        norms = torch.sqrt(sum((f * f).sum(1) for f in flat))  # type: ignore[arg-type]  # sum() of Tensors; mypy adds its start value 0
        coef = c / norms.clamp(min=c)
        for n, p in zip(names, params, strict=True):
            p.grad = torch.einsum("b,b...->...", coef, grads[n])
        return losses.sum(), norms

    def _train_dp(
        self,
        start: torch.Tensor,
        indices: torch.Tensor,
        gen: torch.Generator,
        steps: int,
        dp: DPSGD,
        moments: _GradMoments | None = None,
    ) -> LocalResult:
        module = self._dp_model()
        params = trainable(module)
        set_flat_params(params, start)
        module.train()
        # the batches first, then (on a GPU) the noise generator's seed from the same stream: a
        # GPU trains on the CPU's batches, and only the noise comes from another stream
        batches = self._on_device(self._dp_batches(indices, gen, steps, dp))
        noise_gen = self._device_gen(gen)
        opt = self._optimizer(params)
        c = dp.max_grad_norm
        # fixed denominator B_k = r_k |M_k| = min(B, |M_k|) under Poisson sampling (PHS Eq. 7's
        # sensitivity C/B_k; dividing by the random batch size would break it)
        denom = float(min(self.spec.batch_size, int(indices.numel()))) if dp.sampling == "poisson" else None
        std = dp.noise_multiplier * c
        # the clipped count stays on the device until the end (a host read per step would wait
        # for the GPU each time: :meth:`_on_device`)
        total, clipped = torch.zeros((), device=self.device), torch.zeros((), dtype=torch.long, device=self.device)
        seen = 0
        for on in batches:
            opt.zero_grad()
            b = int(on.numel())
            if b > 0:
                xb, yb = self.x[on], self.y[on]
                if self._bk is not None:
                    bf16 = torch.bfloat16 if self.precision == "bf16" else None
                    loss_sum, norms = self._bk.clipped_sum(xb, yb, c, autocast=bf16, loss=self.loss)  # type: ignore[attr-defined]  # a BookKeepingClipper here (typed object: lazy import)
                elif self.per_example == "ghost":
                    loss_sum, norms = self._clipped_sum_ghost(module, xb, yb, c)
                elif self.per_example == "hooks":
                    loss_sum, norms = self._clipped_sum_hooks(module, params, xb, yb, c)
                else:
                    loss_sum, norms = self._clipped_sum_functorch(module, params, xb, yb, c)
                total += loss_sum
                seen += b
                clipped += (norms > c).sum()
            d = denom if denom is not None else float(max(b, 1))
            for p in params:
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                if std > 0:
                    g = g + torch.normal(0.0, std, size=p.shape, generator=noise_gen, device=p.device)
                p.grad = g / d
            if moments is not None:
                moments.add(params)
            opt.step()
        return LocalResult(
            flat_params(params),
            float(total) / max(seen, 1),
            steps,
            int(indices.numel()),
            int(clipped) / max(seen, 1),
            None if moments is None else moments.variance(),
        )


class _StepGraph:
    """One plain SGD step of a full mini-batch (:meth:`LocalTrainer._step` on the indices in
    ``idx``, its loss added to ``total``), captured once as a CUDA graph for a trainer and batch
    size (PyTorch's whole-network capture: warm-up on a side stream, gradients allocated inside
    the capture from the graph's private pool). A small CNN at batch 32 is launch-bound on a
    GPU: eagerly each step is some forty kernels queued one by one by Python and the autograd
    engine; replayed, one launch. Replays read ``idx`` and write the parameters, their gradients
    and ``total`` in place. The warm-up steps the parameters: the caller sets them afterwards."""

    def __init__(self, trainer: LocalTrainer, params: list[nn.Parameter], batch: int) -> None:
        dev = trainer.device
        self.idx = torch.zeros(batch, dtype=torch.long, device=dev)
        self.total = torch.zeros((), device=dev)
        opt = trainer._optimizer(params)
        side = torch.cuda.Stream(dev)  # type: ignore[no-untyped-call]  # torch leaves cuda.Stream unannotated
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(3):
                trainer._step(opt, self.idx, self.total, graph=True)
        torch.cuda.current_stream(dev).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            trainer._step(opt, self.idx, self.total, graph=True)


#: Bytes to which an evaluation batch's first element is aligned (a cache line; c10's CPU
#: allocator aligns every new tensor to 64 bytes).
ALIGNMENT = 64


def aligned(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself where it is contiguous and starts on a :data:`ALIGNMENT`-byte boundary,
    else a fresh contiguous copy (which does).

    Why: on AVX-512 and AMX hosts oneDNN's and MKL's float32 kernels take a different path for
    an input that does not start on a cache line, and the sums come out different in the last
    bit. A slice ``x[i : i + b]`` of a loaded dataset starts wherever the array did: NumPy's
    arrays from glibc's ``mmap`` start 16 bytes into a page, the same data passed to a worker
    process through shared memory starts on the page. So the same model evaluated on the same
    examples gave one figure in process and another in a worker or through Flower (found on an
    Intel AMX host: 1.622535196940104 against 1.6225350952148438; the same pair came back later
    from a second cause, Flower's server thread computing on more threads than set:
    :func:`fedgame.core.processes.pin_threads_here`). Evaluating aligned memory
    makes the figure depend on the values only. On the AVX2-only hosts the kernels are
    alignment-blind and this copy changes no bit."""
    if x.device.type != "cpu":
        return x
    if not x.is_contiguous():
        x = x.contiguous()
    return x if x.data_ptr() % ALIGNMENT == 0 else x.clone()


def batch_starts(n: int, batch_size: int) -> list[int]:
    """Where the fixed-size evaluation batches of ``n`` examples start (the last may be short)."""
    return list(range(0, int(n), int(batch_size)))


@torch.inference_mode()
def evaluate_batches(
    model: nn.Module,
    params: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    starts: Sequence[int],
    *,
    batch_size: int = 500,
    loss: Loss = CROSS_ENTROPY,
) -> list[tuple[float, float]]:
    """(correct predictions, NaN for a loss without accuracy; summed ``loss``) of flat ``params`` on each batch
    ``x[s : s + batch_size]`` for ``s`` in ``starts``: the half of :func:`evaluate` a worker
    process runs on its share of the batches (:mod:`fedgame.sim.pool`). Each batch goes
    through the model from cache-line-aligned memory (:func:`aligned`), so where the test set
    lies in memory (this process's array, a worker's shared-memory copy) changes no bit."""
    set_flat_params(model, params)
    model.eval()
    dev = _device_of(model)
    out_: list[tuple[float, float]] = []
    for i in starts:
        xb = x[i : i + batch_size]
        out = model(aligned(xb) if dev.type == "cpu" else xb.to(dev))
        yb = y[i : i + batch_size].to(dev)
        out_.append((float(loss.correct(out, yb)), float(loss.summed(out, yb))))
    return out_


def combine_evaluation(parts: Sequence[tuple[float, float]], n: int) -> tuple[float, float]:
    """Accuracy and mean loss from per-batch (correct, loss sum), summed in batch order, so the
    figures are the same bit for bit however the batches were shared out."""
    correct, loss = 0.0, 0.0
    for c, l in parts:
        correct += c
        loss += l
    return correct / n, loss / n


def evaluate(
    model: nn.Module, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 500, loss: Loss = CROSS_ENTROPY
) -> tuple[float, float]:
    """Accuracy and mean ``loss`` (cross-entropy by default) of flat ``params`` on ``(x, y)``.

    Batches of 500 keep the convolution activations in cache (2000 was 2.7× slower on the
    McMahan CNN on 2 cores)."""
    n = int(x.shape[0])
    return combine_evaluation(evaluate_batches(model, params, x, y, batch_starts(n, batch_size), batch_size=batch_size, loss=loss), n)


def loss_batches(parts: Sequence[torch.Tensor], *, batch_size: int = 500) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The batches of :func:`client_losses`: every client's examples concatenated and cut into
    batches of ``batch_size`` (one pass, not one per client), and each example's owner."""
    idx = torch.cat(list(parts)) if parts else torch.zeros(0, dtype=torch.long)
    owner = torch.repeat_interleave(torch.arange(len(parts)), torch.tensor([int(p.numel()) for p in parts], dtype=torch.long))
    return [idx[i : i + batch_size] for i in range(0, int(idx.numel()), batch_size)], owner


@torch.inference_mode()
def example_losses(
    model: nn.Module, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, batches: Sequence[torch.Tensor], *, loss: Loss = CROSS_ENTROPY
) -> list[torch.Tensor]:
    """Per-example ``loss`` (float64) of flat ``params`` on each batch of indices."""
    set_flat_params(model, params)
    model.eval()
    dev = _device_of(model)
    return [loss.per_example(model(x[b].to(dev)), y[b].to(dev)).double().cpu() for b in batches]


def combine_losses(
    per_batch: Sequence[torch.Tensor], owner: torch.Tensor, parts: Sequence[torch.Tensor], *, batch_size: int = 500
) -> np.ndarray:
    """Per-client mean loss from the per-example losses of :func:`loss_batches`' batches,
    summed back per client in batch order (the same bits however the batches were shared out)."""
    sums = torch.zeros(len(parts), dtype=torch.float64)
    for k, per in enumerate(per_batch):
        sums.index_add_(0, owner[k * batch_size : k * batch_size + per.numel()], per)
    counts = np.array([max(int(p.numel()), 1) for p in parts], dtype=np.float64)
    return sums.numpy() / counts


def client_losses(
    model: nn.Module,
    params: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    parts: list[torch.Tensor],
    *,
    batch_size: int = 500,
    loss: Loss = CROSS_ENTROPY,
) -> np.ndarray:
    """Mean ``loss`` of flat ``params`` on each client's whole local data ``x[part]``.

    All clients' examples go through the model together in batches of ``batch_size`` (one
    pass, not one per client); per-example losses are summed back per client."""
    batches, owner = loss_batches(parts, batch_size=batch_size)
    return combine_losses(example_losses(model, params, x, y, batches, loss=loss), owner, parts, batch_size=batch_size)
