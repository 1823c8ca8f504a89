"""The reference the LP benchmark times HiGHS against: the interior-point solver the bound used before scipy.

Mehrotra's predictor-corrector for time-staged LPs: rows come in blocks of equal size, one block per time step,
and a column may only touch rows of one step or of two adjacent steps; the normal equations are then
block-tridiagonal and each Newton step costs O(steps). Not used by the simulator; benchmarks/lp.py only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.world.lp import LinearProgram, LPSolution


class _Normal:
    """A·D·Aᵀ as diagonal and sub-diagonal blocks, and its block Cholesky factorisation."""

    def __init__(self, lp: LinearProgram, block: int) -> None:
        self.block = block
        self.steps = len(lp.b) // block
        order = np.argsort(lp.cols, kind="stable")
        rows, cols, vals = lp.rows[order], lp.cols[order], lp.vals[order]
        bounds = np.searchsorted(cols, np.arange(len(lp.c) + 1))
        pair_col, pair_index, pair_coef = [], [], []
        k, diag_size = block, self.steps * block * block
        for j in range(len(lp.c)):
            lo, hi = bounds[j], bounds[j + 1]
            for a in range(lo, hi):
                for b in range(lo, hi):
                    ra, rb = int(rows[a]), int(rows[b])
                    sa, sb = ra // k, rb // k
                    if sa == sb:
                        index = sa * k * k + (ra % k) * k + (rb % k)
                    elif sa == sb + 1:  # block (sa, sa-1) of the lower band
                        index = diag_size + sb * k * k + (ra % k) * k + (rb % k)
                    elif sb == sa + 1:
                        continue  # the upper band is the transpose of the lower one
                    else:
                        raise ValueError(f"column {j} couples steps {sa} and {sb}: not a staged LP")
                    pair_col.append(j)
                    pair_index.append(index)
                    pair_coef.append(vals[a] * vals[b])
        self.pair_col = np.array(pair_col, dtype=np.int64)
        self.pair_index = np.array(pair_index, dtype=np.int64)
        self.pair_coef = np.array(pair_coef)
        self.size = diag_size + max(0, self.steps - 1) * k * k

    def factor(self, d: np.ndarray, regularisation: float) -> None:
        k, steps = self.block, self.steps
        flat = np.bincount(self.pair_index, weights=d[self.pair_col] * self.pair_coef, minlength=self.size)
        diag = flat[: steps * k * k].reshape(steps, k, k).astype(float)
        lower = flat[steps * k * k :].reshape(max(0, steps - 1), k, k)
        scale = max(1.0, float(np.max(np.abs(np.diagonal(diag, axis1=1, axis2=2)))))
        diag += np.eye(k) * regularisation * scale
        self.l_inv = np.empty((steps, k, k))
        self.x = np.empty((max(0, steps - 1), k, k))
        for s in range(steps):
            schur = diag[s]
            if s > 0:
                x = lower[s - 1] @ self.l_inv[s - 1].T
                self.x[s - 1] = x
                schur = schur - x @ x.T
            self.l_inv[s] = np.linalg.inv(np.linalg.cholesky(schur))

    def solve(self, r: np.ndarray) -> np.ndarray:
        k, steps = self.block, self.steps
        r = r.reshape(steps, k)
        z = np.empty((steps, k))
        z[0] = self.l_inv[0] @ r[0]
        for s in range(1, steps):
            z[s] = self.l_inv[s] @ (r[s] - self.x[s - 1] @ z[s - 1])
        y = np.empty((steps, k))
        y[-1] = self.l_inv[-1].T @ z[-1]
        for s in range(steps - 2, -1, -1):
            y[s] = self.l_inv[s].T @ (z[s] - self.x[s].T @ y[s + 1])
        return y.reshape(-1)


def _matvec(lp: LinearProgram, x: np.ndarray) -> np.ndarray:
    return np.bincount(lp.rows, weights=lp.vals * x[lp.cols], minlength=len(lp.b))


def _rmatvec(lp: LinearProgram, y: np.ndarray) -> np.ndarray:
    return np.bincount(lp.cols, weights=lp.vals * y[lp.rows], minlength=len(lp.c))


def _max_step(v: np.ndarray, dv: np.ndarray) -> float:
    shrinking = dv < 0
    return float(min(1.0, np.min(-v[shrinking] / dv[shrinking]))) if np.any(shrinking) else 1.0


@dataclass
class _Newton:
    """One iteration's linearisation: residuals, barrier scalings and the factorised normal equations."""

    lp: LinearProgram
    normal: _Normal
    free: np.ndarray
    bounded: np.ndarray
    rp: np.ndarray
    rd: np.ndarray
    inv_x: np.ndarray
    inv_v: np.ndarray
    d: np.ndarray
    z: np.ndarray
    w: np.ndarray

    def direction(self, r_xz: np.ndarray, r_vw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        t = np.where(self.free, self.rd - r_xz * self.inv_x + r_vw * self.inv_v, 0.0)
        dy = self.normal.solve(self.rp + _matvec(self.lp, self.d * t))
        dx = self.d * (_rmatvec(self.lp, dy) - t)
        dz = np.where(self.free, (r_xz - self.z * dx) * self.inv_x, 0.0)
        dw = np.where(self.bounded & self.free, (r_vw + self.w * dx) * self.inv_v, 0.0)
        return dx, dy, dz, dw


def solve(lp: LinearProgram, block: int, *, max_iterations: int = 80, tolerance: float = 1e-7) -> LPSolution:
    """`block`: rows per time step."""
    n = len(lp.c)
    bounded = np.isfinite(lp.ub)
    ub = np.where(bounded, lp.ub, 0.0)
    normal = _Normal(lp, block)
    fixed = bounded & (ub <= 1e-12)  # ub = 0: the variable is pinned, kept out of the barrier
    free = ~fixed
    x = np.where(bounded, np.maximum(ub / 2, 1e-6), 1.0)
    x[fixed] = 0.0
    v = np.where(bounded, ub - x, 1.0)
    z = np.ones(n)
    w = np.where(bounded, 1.0, 0.0)
    y = np.zeros(len(lp.b))
    norm_b, norm_c = 1.0 + float(np.linalg.norm(lp.b)), 1.0 + float(np.linalg.norm(lp.c))
    pairs = max(1, int(np.sum(free)) + int(np.sum(bounded & free)))
    done, converged, gap, infeasibility = 0, False, float("inf"), float("inf")
    for iteration in range(1, max_iterations + 1):
        done = iteration
        rp = lp.b - _matvec(lp, x)
        rd = lp.c - _rmatvec(lp, y) - z + w
        mu = (float(x[free] @ z[free]) + float(v[bounded & free] @ w[bounded & free])) / pairs
        gap = float(abs(mu * pairs) / (1.0 + abs(float(lp.c @ x))))
        infeasibility = float(np.linalg.norm(rp)) / norm_b
        if infeasibility < tolerance and np.linalg.norm(rd[free]) / norm_c < tolerance and gap < tolerance:
            converged = True
            break
        inv_x = np.where(free, 1.0 / np.maximum(x, 1e-300), 0.0)
        inv_v = np.where(bounded & free, 1.0 / np.maximum(v, 1e-300), 0.0)
        with np.errstate(divide="ignore"):
            d = np.where(free, 1.0 / (z * inv_x + w * inv_v), 0.0)
        regularisation = 1e-12
        while True:
            try:
                normal.factor(d, regularisation)
                break
            except np.linalg.LinAlgError:
                regularisation *= 100
                if regularisation > 1e-2:
                    raise
        newton = _Newton(lp, normal, free, bounded, rp, rd, inv_x, inv_v, d, z, w)
        # predictor: the pure Newton step; its progress sets how hard the corrector centres
        dx, dy, dz, dw = newton.direction(-x * z, -v * w * bounded)
        alpha_p = min(_max_step(x[free], dx[free]), _max_step(v[bounded], -dx[bounded]))
        alpha_d = min(_max_step(z[free], dz[free]), _max_step(w[bounded], dw[bounded]))
        mu_affine = (
            float((x + alpha_p * dx)[free] @ (z + alpha_d * dz)[free])
            + float((v - alpha_p * dx)[bounded & free] @ (w + alpha_d * dw)[bounded & free])
        ) / pairs
        sigma = (mu_affine / mu) ** 3 if mu > 0 else 0.0
        r_xz = sigma * mu - x * z - dx * dz
        r_vw = np.where(bounded, sigma * mu - v * w + dx * dw, 0.0)
        dx, dy, dz, dw = newton.direction(r_xz, r_vw)
        alpha_p = 0.99 * min(_max_step(x[free], dx[free]), _max_step(v[bounded], -dx[bounded]))
        alpha_d = 0.99 * min(_max_step(z[free], dz[free]), _max_step(w[bounded], dw[bounded]))
        x = x + alpha_p * dx
        x[fixed] = 0.0
        v = np.where(bounded, ub - x, 1.0)
        y = y + alpha_d * dy
        z = z + alpha_d * dz
        w = w + alpha_d * dw
    return LPSolution(x, y, done, float(lp.c @ x), converged)
