"""An independent, deliberately plain reference implementation of JDP-FL's M1 and M2 (spec
§3.2-3.3), written from the pseudocode with Python lists and loops — no NumPy, no shared code
with ``fedgame.incentives.auctions`` — for the cross-check of spec check 11.

M2's critical bids use the spec's breakpoint scan (O(n² log n) per winner), not the library's
interval algorithm."""

from __future__ import annotations

import math


def m1(c: list[float], d: list[float], B: float) -> tuple[list[int], list[float]]:
    n = len(c)
    q = [c[i] / d[i] for i in range(n)]
    order = sorted(range(n), key=lambda i: (q[i], i))
    m, D = 0, 0.0
    for k in range(n):
        D += d[order[k]]
        if q[order[k]] <= B / D:
            m = k + 1
        else:
            break
    pay = [0.0] * n
    if m == 0:
        return [], pay
    D_W = sum(d[order[k]] for k in range(m))
    q_next = q[order[m]] if m < n else math.inf
    rho = min(B / D_W, q_next)
    for k in range(m):
        pay[order[k]] = rho * d[order[k]]
    return sorted(order[:m]), pay


def m2_alloc(c: list[float], d: list[float], B: float) -> list[int]:
    E = [i for i in range(len(c)) if c[i] <= B]
    if not E:
        return []
    order = sorted(E, key=lambda i: (-(d[i] / c[i]), i))
    Q: list[int] = []
    paid = 0.0
    for i in order:
        if paid + c[i] <= B:
            Q.append(i)
            paid += c[i]
        else:
            break
    i_star = E[0]
    for i in E:
        if d[i] > d[i_star]:
            i_star = i
    if sum(d[j] for j in Q) >= d[i_star]:
        return sorted(Q)
    return [i_star]


def wins_m2(i: int, z: float, c: list[float], d: list[float], B: float) -> bool:
    x = list(c)
    x[i] = z
    return i in m2_alloc(x, d, B)


def critical_bid_scan(i: int, c: list[float], d: list[float], B: float) -> float:
    """Spec §3.3: breakpoints d_i b_j/d_j (eligible j ≠ i), B − S_k, B in (b_i, B]; walk up
    while i wins at the midpoint of each gap."""
    others = [j for j in range(len(c)) if j != i and c[j] <= B]
    pts = {d[i] * c[j] / d[j] for j in others} | {B}
    ordered = sorted(others, key=lambda j: (-(d[j] / c[j]), j))
    S = 0.0
    pts.add(B - S)
    for j in ordered:
        S += c[j]
        pts.add(B - S)
    a = tau = c[i]
    for beta in sorted(p for p in pts if c[i] < p <= B):
        if wins_m2(i, (a + beta) / 2, c, d, B):
            tau = a = beta
        else:
            break
    return tau


def m2(c: list[float], d: list[float], B: float) -> tuple[list[int], list[float]]:
    T = m2_alloc(c, d, B)
    pay = [0.0] * len(c)
    for i in T:
        pay[i] = critical_bid_scan(i, c, d, B)
    return T, pay
