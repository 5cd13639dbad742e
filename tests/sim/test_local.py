"""The local trainer's SGD: PyTorch's own update without ``torch.optim.Optimizer``, whose first
construction in a process imports ``torch._dynamo`` (about 2 s of CPU per fresh process)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from fedgame.sim.local import _SGD


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.Flatten(), nn.Linear(3 * 4 * 4, 4))


@pytest.mark.parametrize(("momentum", "weight_decay"), [(0.0, 0.0), (0.9, 0.0), (0.5, 1e-3)])
def test_sgd_steps_equal_torch_optim_sgd_bit_for_bit(momentum: float, weight_decay: float) -> None:
    """Six steps of random gradients (one parameter without a gradient at step 3, as a frozen
    or unused parameter would be): the parameters equal ``torch.optim.SGD(foreach=True)``'s,
    momentum buffers included, to the last bit."""
    ours, ref = _model(), _model()
    p_ours, p_ref = list(ours.parameters()), list(ref.parameters())
    opt_ours = _SGD(p_ours, lr=0.05, momentum=momentum, weight_decay=weight_decay)
    opt_ref = torch.optim.SGD(p_ref, lr=0.05, momentum=momentum, weight_decay=weight_decay, foreach=True)
    gen = torch.Generator().manual_seed(1)
    for step in range(6):
        opt_ours.zero_grad()
        opt_ref.zero_grad(set_to_none=True)
        for k, (a, b) in enumerate(zip(p_ours, p_ref, strict=True)):
            if step == 3 and k == 1:
                continue
            g = torch.randn(a.shape, generator=gen)
            a.grad, b.grad = g.clone(), g.clone()
        opt_ours.step()
        opt_ref.step()
        for a, b in zip(p_ours, p_ref, strict=True):
            assert torch.equal(a, b), step
    moved = [not torch.equal(a, b) for a, b in zip(p_ours, _model().parameters(), strict=True)]
    assert all(moved)


def test_a_fresh_process_trains_without_importing_dynamo() -> None:
    """A DP-SGD and a plain local training in a new interpreter (what a Flower ClientApp process
    or a spawned pool worker does once) leave ``torch._dynamo`` unimported."""
    code = """
import sys, torch
from torch import nn
from fedgame.privacy.plans import DPSGD
from fedgame.sim.local import LocalSpec, LocalTrainer
torch.manual_seed(0)
x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
t = LocalTrainer(model=nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)), x=x, y=y,
                 spec=LocalSpec(batch_size=16, lr=0.1, momentum=0.9, epochs=None, steps=3))
start = nn.utils.parameters_to_vector(t.model.parameters()).detach().clone()
a = t.train(start, torch.arange(64), torch.Generator().manual_seed(0))
b = t.train(start, torch.arange(64), torch.Generator().manual_seed(0), dp=DPSGD(max_grad_norm=1.0, noise_multiplier=1.0))
assert not torch.equal(a.params, start) and not torch.equal(b.params, start)
print('torch._dynamo' in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", out.stdout


@pytest.mark.parametrize("sampling", ["poisson", "shuffle", "fixed"])
def test_dp_sgd_draws_its_batches_before_the_noise_generator(sampling: str) -> None:
    # On a GPU the noise generator is seeded with a draw from the client's stream; that draw comes
    # after the batches, so a GPU client trains on the CPU's batches (tests/sim/test_cuda.py
    # compares the two). Checked here on the CPU: the stream _device_gen sees has already given
    # exactly the batches.
    from fedgame.models import build_model
    from fedgame.privacy.plans import DPSGD
    from fedgame.sim.local import LocalSpec, LocalTrainer, flat_params

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(20, 1, 28, 28, generator=g), torch.randint(0, 10, (20,), generator=g)
    model = build_model("mcmahan_cnn", in_shape=(1, 28, 28), num_classes=10, seed=0)
    trainer = LocalTrainer(model=model, x=x, y=y, spec=LocalSpec(batch_size=5, lr=0.05, epochs=None, steps=6))
    seen: list[torch.Tensor] = []
    device_gen = trainer._device_gen

    def recording(gen: torch.Generator) -> torch.Generator:
        seen.append(gen.get_state())
        return device_gen(gen)

    trainer._device_gen = recording  # type: ignore[method-assign]
    dp = DPSGD(max_grad_norm=1.0, noise_multiplier=1.0, sampling=sampling)  # type: ignore[arg-type]
    trainer.train(flat_params(model), torch.arange(20), torch.Generator().manual_seed(9), dp)
    after_batches = torch.Generator().manual_seed(9)
    trainer._dp_batches(torch.arange(20), after_batches, 6, dp)
    assert len(seen) == 1 and torch.equal(seen[0], after_batches.get_state())
    assert not torch.equal(seen[0], torch.Generator().manual_seed(9).get_state())
