"""Batched numerical engines for the client problem (FedPCS Eqs. 14-21, Theorem 1).

All engines work on m independent problems at once, in the time-major layout of
:func:`fedgame.incentives.fedpcs._dynamics.evaluate`: decisions ``a`` of shape (T, m), one
column per problem (a problem is one client type started from one initial point).

* :func:`newton` — projected Newton (Bertsekas 1982) with the *exact* Hessian, whose step is
  computed in O(T) per problem by a Riccati (stagewise Newton, Pantoja 1988) recursion: the
  state ρ and the control α are scalars, so the Newton system of the reduced objective is an
  LQ problem whose backward pass is a scalar recursion. Indefinite pivots are replaced by their
  absolute value (a modified factorisation: the step solves (H + E) d = −g with H + E ≻ 0), and
  an Armijo search along the projection arc keeps every iteration an ascent step. Converged
  problems leave the batch, so the cost follows the hard problems only.
* :func:`lbfgsb` — ``scipy.optimize.minimize(method="L-BFGS-B")`` with the adjoint gradient on
  the summed, block-separable objective of a chunk of problems (``chunk=1``: one call per
  problem), options ftol 1e-15, gtol 1e-10, maxiter 10000.
* :func:`damped_sweep` — the forward-backward sweep of Eq. (21), α ← (1−ω)α + ω·clip(Eq. 21),
  used only to generate a starting point: iterated as it stands (undamped) it need not
  converge and can cycle, so it is never the solver.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import minimize

from fedgame.incentives.fedpcs._dynamics import Evaluation, Inclusion, Workspace, evaluate

__all__ = ["damped_sweep", "lbfgsb", "newton"]

FloatArray = NDArray[np.float64]

_ARMIJO = 1e-4
_MAX_HALVINGS = 50


def _kkt(a: FloatArray, grad: FloatArray) -> FloatArray:
    kkt: FloatArray = np.abs(np.clip(a + grad, 0.0, 1.0) - a).max(axis=0)
    return kkt


def _newton_direction(
    a: FloatArray, ev: Evaluation, phi: FloatArray, varphi: FloatArray, gJ: FloatArray, free: NDArray[np.bool_], ws: Workspace
) -> FloatArray:
    """Newton step for J = −U on the free variables (bound ones fixed at δα = 0).

    LQ model per stage t (x = ρ, u = α, x' = φ + u (x − φ)): ℓ = −P g,
    Q_u = ℓ_u + B v', Q_uu = ℓ_uu + B² V', Q_ux = ℓ_xu + p_{t+1} + A B V',
    A = α^t, B = ρ^t − φ(t), p = −λ the costate of J. Backward: k = −Q_u/Q_uu,
    K = −Q_ux/Q_uu, v = Q_x − Q_ux Q_u/Q_uu, V = Q_xx − Q_ux²/Q_uu; forward: δα = k + K δρ.
    A non-positive pivot Q_uu is replaced by max(|Q_uu|, floor) — the factorisation of
    H + E, E ⪰ 0 diagonal — so the step is always an ascent direction for U."""
    rho, P, dP, S, lam, f2 = ev.rho, ev.P, ev.dP, ev.S, ev.lam, ev.f2
    assert f2 is not None
    T, m = a.shape
    c2 = 2.0 * (1.0 - varphi)
    V = -f2[T]
    v = -S[T]
    k = ws.get("k", T, m)
    Kg = ws.get("Kg", T, m)
    curv = ws.get("curv", T, m)
    B_all = np.subtract(rho[:T], phi[:T, None], out=ws.get("B", T, m))
    for t in range(T - 1, -1, -1):
        A = a[t]
        B = B_all[t]
        cP = c2 * P[t]
        BV = B * V
        Quu = cP + B * BV
        floor = cP + B * np.abs(BV)
        floor *= 1e-10
        floor += 1e-300
        Qm = np.maximum(np.abs(Quu), floor, out=curv[t])
        fr = free[t]
        Qu = cP * A + B * v
        Qux = c2 * dP[t] * A - lam[t + 1] + A * BV
        kt = np.divide(Qu, Qm, out=k[t])
        np.negative(kt, out=kt)
        kt[~fr] = 0.0
        Kt = np.divide(Qux, Qm, out=Kg[t])
        np.negative(Kt, out=Kt)
        Kt[~fr] = 0.0
        v = A * v - S[t] + Kt * Qu  # Q_x − Q_ux Q_u / Q_m on free stages, Q_x on fixed ones
        V = A * A * V - f2[t] + Kt * Qux  # Q_xx − Q_ux² / Q_m, resp. Q_xx
    d = ws.get("d", T, m)
    dx = np.zeros(m)
    for t in range(T):
        du = np.multiply(Kg[t], dx, out=d[t])
        du += k[t]
        dx *= a[t]
        dx += B_all[t] * du
    # ε-active (bound) variables: projected-gradient move scaled by the stage curvature
    # |Q_uu| (they go to, or stay on, their bound)
    bound = ~free
    if bound.any():
        scale = np.maximum(np.maximum(curv, c2 * P[:T]), 1e-12)
        d[bound] = -(gJ / scale)[bound]
    return d


def _take(ev: Evaluation, keep: NDArray[np.bool_]) -> Evaluation:
    """The columns ``keep`` of an evaluation (copies, detached from the workspace)."""
    f2 = None if ev.f2 is None else ev.f2[:, keep]
    return Evaluation(
        ev.rho[:, keep], ev.P[:, keep], ev.dP[:, keep], ev.g[:, keep], ev.S[:, keep], ev.lam[:, keep], ev.U[keep], ev.grad[:, keep], f2
    )


def newton(
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    tol: float = 1e-11,
    max_iter: int = 200,
    inclusion: Inclusion = "privacy",
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Projected Newton from ``a0`` (T, m) for m problems. Returns (α, U, kkt residual).

    Bertsekas' ε-active set (ε = min(1e-3, r_KKT, 1e3 r_KKT²)): variables within ε of a bound
    whose gradient pushes outward move by a projected-gradient step scaled by the stage
    curvature, the others by the Newton step of the reduced problem, capped so that no
    variable moves by more than 1; Armijo backtracking along the projection arc. When U can
    no longer resolve the decrease (rounding), a full step is accepted if it lowers the KKT
    residual. A problem stops when r_KKT ≤ ``tol`` or when no step is accepted. ``inclusion``:
    the sampling rule of P (:data:`~._dynamics.Inclusion`), handed to every evaluation."""
    a = np.array(a0, dtype=float, copy=True)
    T, m = a.shape
    U = np.full(m, -np.inf)
    kkt = np.full(m, np.inf)
    ws_main, ws_ls, ws_dir = Workspace(), Workspace(), Workspace()
    act = np.arange(m)
    A = a.copy()
    r0, vp = rho0, varphi
    for _ in range(max_iter + 1):
        ev = evaluate(A, r0, vp, phi, R, N, K, second=True, ws=ws_main, inclusion=inclusion)
        U[act] = ev.U
        r = _kkt(A, ev.grad)
        kkt[act] = r
        go = r > tol
        n_go = int(go.sum())
        if n_go == 0:
            break
        if n_go < 0.9 * act.size:  # compact the batch: converged problems leave
            a[:, act] = A
            act, r0, vp = act[go], r0[go], vp[go]
            A = A[:, go]
            ev = _take(ev, go)
            r = r[go]
            go = np.ones(act.size, dtype=bool)
        gJ = -ev.grad
        # ε-active tolerance (Bertsekas: ε = min(ε0, r)); squared near the solution so that a
        # variable resting just inside a bound with a vanishing gradient stays free
        eps = np.minimum(np.minimum(1e-3, r), 1e3 * r * r)
        bound = ((A <= eps) & (gJ > 0)) | ((A >= 1.0 - eps) & (gJ < 0))
        free = ~bound
        d = _newton_direction(A, ev, phi, vp, gJ, free, ws_dir)
        d[:, ~go] = 0.0
        predF = np.where(free, -gJ * d, 0.0).sum(axis=0)
        J0 = -ev.U.copy()
        noise = 1e-13 * (1.0 + np.abs(J0))
        # first trial: Newton step, but never moving a free variable by more than 1
        s = np.minimum(1.0, 1.0 / np.maximum(np.where(free, np.abs(d), 0.0).max(axis=0), 1e-300))
        searching = np.arange(act.size)
        accepted = ~go
        for _h in range(_MAX_HALVINGS):
            first = _h == 0
            if searching.size == 0:
                break
            As = A[:, searching] if searching.size < act.size else A
            ds = d[:, searching] if searching.size < act.size else d
            trial = np.clip(As + s[searching] * ds, 0.0, 1.0)
            Jt = -evaluate(trial, r0[searching], vp[searching], phi, R, N, K, need_grad=False, ws=ws_ls, inclusion=inclusion).U
            dec = J0[searching] - Jt
            bnd = np.where(bound[:, searching], gJ[:, searching] * (As - trial), 0.0).sum(0)
            req = _ARMIJO * (s[searching] * predF[searching] + bnd)
            ok = dec >= req
            if first:
                # at the rounding floor of U, function values cannot rank the trial: accept
                # it if it does not increase −U beyond rounding and lowers the KKT residual
                floor = ~ok & (req <= 1e3 * noise[searching]) & (dec >= -noise[searching])
                if floor.any():
                    fl = searching[floor]
                    evt = evaluate(trial[:, floor], r0[fl], vp[fl], phi, R, N, K, ws=ws_ls, inclusion=inclusion)
                    ok[floor] = _kkt(trial[:, floor], evt.grad) < r[fl]
            idx = searching[ok]
            A[:, idx] = trial[:, ok]
            accepted[idx] = True
            searching = searching[~ok]
            s[searching] *= 0.5
        if not accepted.all():
            # no ascent beyond rounding: these problems are done
            keep = accepted
            a[:, act] = A
            stop = act[~keep]
            evd = evaluate(a[:, stop], rho0[stop], varphi[stop], phi, R, N, K, inclusion=inclusion)
            U[stop] = evd.U
            kkt[stop] = _kkt(a[:, stop], evd.grad)
            act, r0, vp, A = act[keep], r0[keep], vp[keep], A[:, keep]
            if act.size == 0:
                break
    a[:, act] = A
    ev = evaluate(A, r0, vp, phi, R, N, K, inclusion=inclusion)
    U[act] = ev.U
    kkt[act] = _kkt(A, ev.grad)
    return a, U, kkt


def damped_sweep(
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    damping: float = 0.05,
    iters: int = 2000,
    tol: float = 1e-10,
    stall_window: int | None = 250,
    inclusion: Inclusion = "privacy",
) -> FloatArray:
    """α ← (1−ω)α + ω clip(λ(t+1)(ρ^t − φ(t)) / (2(1−ϕ)P^t), 0, 1) (projected Eq. 21),
    at most ``iters`` sweeps; a problem stops once max_t |Δα| ≤ ``tol`` (its result only
    seeds a Newton / L-BFGS-B solve, so it need not be polished). With ``stall_window`` = w
    a problem also stops, after 2w sweeps, when its step has not halved over the last w
    sweeps (a cycling sweep: any point of the cycle is as good a seed). ``inclusion``: the
    sampling rule of P."""
    a = np.array(a0, dtype=float, copy=True)
    T, m = a.shape
    act = np.arange(m)
    A = a.copy()
    r0, vp = rho0, varphi
    c2 = 2.0 * (1.0 - varphi)
    ws = Workspace()
    w = stall_window or 0
    ref = np.full(m, np.inf)  # step size w sweeps ago (checked every w sweeps)
    for it in range(iters):
        mm = A.shape[1]
        ev = evaluate(A, r0, vp, phi, R, N, K, costate_only=True, ws=ws, inclusion=inclusion)
        new = ws.get("new", T, mm)
        den = ws.get("den", T, mm)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.subtract(ev.rho[:T], phi[:T, None], out=new)
            new *= ev.lam[1:]
            np.multiply(ev.P[:T], c2, out=den)
            new /= den
        np.nan_to_num(new, copy=False, nan=0.0)
        np.clip(new, 0.0, 1.0, out=new)
        new -= A
        new *= damping
        A += new
        np.abs(new, out=new)
        step = new.max(axis=0)
        moving = step > tol
        if w and (it + 1) % w == 0:
            if it + 1 >= 2 * w:
                moving &= step < 0.5 * ref
            ref = step
        n_mov = int(moving.sum())
        if n_mov == 0:
            break
        if n_mov < 0.9 * act.size:
            a[:, act] = A
            act, r0, vp, c2, A = act[moving], r0[moving], vp[moving], c2[moving], A[:, moving]
            ref = ref[moving]
    a[:, act] = A
    return a


def lbfgsb(
    a0: FloatArray,
    rho0: FloatArray,
    varphi: FloatArray,
    phi: FloatArray,
    R: FloatArray,
    N: int,
    K: int,
    *,
    chunk: int = 1,
    inclusion: Inclusion = "privacy",
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """L-BFGS-B (adjoint gradient, bounds [0, 1], ftol 1e-15, gtol 1e-10, maxiter 10000) on
    the summed objective −Σ U of ``chunk`` problems at a time, under the sampling rule
    ``inclusion``."""
    a = np.array(a0, dtype=float, copy=True)
    T, m = a.shape
    for lo in range(0, m, max(1, chunk)):
        sl = slice(lo, min(m, lo + max(1, chunk)))
        r0, vp = rho0[sl], varphi[sl]
        mc = r0.size

        def fun(z: FloatArray, r0: FloatArray = r0, vp: FloatArray = vp, mc: int = mc) -> tuple[float, FloatArray]:
            ev = evaluate(z.reshape(T, mc), r0, vp, phi, R, N, K, inclusion=inclusion)
            return -float(ev.U.sum()), -ev.grad.ravel()

        res = minimize(
            fun,
            a[:, sl].ravel(),
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, 1.0)] * (T * mc),
            options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 10000},
        )
        a[:, sl] = np.clip(res.x.reshape(T, mc), 0.0, 1.0)
    ev = evaluate(a, rho0, varphi, phi, R, N, K, inclusion=inclusion)
    return a, ev.U, _kkt(a, ev.grad)
