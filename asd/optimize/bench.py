"""The benchmark table of docs/optimize.md: each method on each problem, driven by asd's
subgradients and by torch autograd's gradients, every run ending with asd's certificate.

``python docs/make_optimize_table.py`` regenerates the table (a few minutes on 2 cores).
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass

import numpy as np

from asd.optimize.adapters import torch_fg
from asd.optimize.minimize import METHODS, minimize
from asd.optimize.problems import Problem, problems


@dataclass
class Row:
    problem: str
    n: int
    f_star: float
    method: str
    gradients: str
    gap: float
    certificate: float
    radius: float
    nit: int
    nfev: int
    seconds: float
    message: str

    @property
    def passed(self) -> bool:
        """The issue's bar: gap <= 1e-6 relative and certificate <= 1e-4."""
        return abs(self.gap) <= 1e-6 and self.certificate <= 1e-4


def run(problem: Problem, method: str, gradients: str, maxiter: int = 2000) -> Row:
    """One run of ``method`` on ``problem`` with ``gradients`` from ``"asd"`` or ``"torch"``."""
    fg = None
    if gradients == "torch":
        import torch

        fg = torch_fg(lambda t: problem.f(t, torch))
    start = time.perf_counter()
    res = minimize(problem.f, problem.x0, method=method, fg=fg, maxiter=maxiter, seed=0)
    seconds = time.perf_counter() - start
    return Row(problem.name, problem.n, problem.f_star, method, gradients,
               problem.gap(res.fun), res.stationarity.measure, res.stationarity.radius,
               res.nit, res.nfev, seconds, res.message)


def benchmark(gradients=("asd", "torch"), methods=METHODS, maxiter: int = 2000) -> list[Row]:
    """Every problem × method × gradient source."""
    return [run(p, m, g, maxiter) for p in problems() for m in methods for g in gradients]


def markdown(rows: list[Row]) -> str:
    """The rows as a markdown table, with the machine and date it was measured on."""
    head = ("| problem | n | f* | method | gradients | gap (f−f*)/max(1,|f*|) | "
            "certificate |z| (ε) | iterations | f evals | time | ok |\n"
            "|---|---:|---:|---|---|---:|---:|---:|---:|---:|:-:|\n")
    body = "".join(
        f"| {r.problem} | {r.n} | {r.f_star:.10g} | {r.method} | {r.gradients} | "
        f"{r.gap:.1e} | {r.certificate:.1e} ({r.radius:.0e}) | {r.nit} | {r.nfev} | "
        f"{r.seconds:.1f} s | {'✓' if r.passed else '✗'} |\n" for r in rows)
    machine = (f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} "
               f"({platform.processor() or 'cpu'}), Python {platform.python_version()}, "
               f"numpy {np.__version__}; maxiter 2000, seed 0.")
    return head + body + "\n" + machine + "\n"
