"""The long fuzz campaign, outside pytest: many programs, every failure kept and shrunk.

    python tests/fuzz/campaign.py --programs 100000 --seed 1 --jobs 2 --out report.json
    python tests/fuzz/campaign.py --programs 5000 --framework torch --out torch.json

Programs come from the same hypothesis strategies as the CI tests (`harness.cases`,
`frameworks.framework_cases`), drawn in batches (one hypothesis run of ``--batch`` examples
per batch, seeded ``seed * 100003 + batch``; ``--jobs N`` runs the batches in N processes and
merges their counts in batch order, so the report is the same), and go through every check; no
check ever stops the campaign. The report (JSON, and a Markdown summary beside it) gives the
programs run per check with their outcomes, the refusals by class (and why each was
acceptable), the skips by reason, the ops drawn, and each distinct failure: its count,
whether an open finding (`findings.FINDINGS`) explains it, and a minimal reproducer, found by
replaying the batch it first appeared in with hypothesis shrinking towards that failure.

``--phase deep`` leaves out what the known findings need (their ops, structures and checks,
`findings.triggers`, listed in the report), so that they cannot hide other defects.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import types
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def _bootstrap() -> None:
    """Make ``tests`` this checkout's test folder (a stray site-packages ``tests`` package,
    installed by nsopy, would shadow it when run as a script; pytest needs no help)."""
    root = Path(__file__).resolve().parents[2]
    module = sys.modules.get("tests")
    if module is None or str(root / "tests") not in list(getattr(module, "__path__", [])):
        package = types.ModuleType("tests")
        package.__path__ = [str(root / "tests")]
        sys.modules["tests"] = package
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


_bootstrap()

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from tests.fuzz import findings, frameworks, harness, ops  # noqa: E402

KEEP = 3  # examples kept per distinct failure


def signature(case: harness.Case, outcome: harness.Outcome) -> str:
    """What makes two failures the same: the finding that explains them, or the check, the
    status and the kind of mismatch or error."""
    finding = findings.match(case, outcome)
    if finding is not None:
        return finding.id
    kind = outcome.kind.split(" (mode=")[0]
    return f"{outcome.status}|{outcome.check}|{kind}"


class Report:
    def __init__(self, args: argparse.Namespace, excluded: dict[str, list[str]]) -> None:
        self.args = args
        self.excluded = excluded
        self.programs = 0
        self.checks: dict[str, Counter] = defaultdict(Counter)
        self.refusals: Counter = Counter()
        self.skips: Counter = Counter()
        self.oracles: Counter = Counter()
        self.ops: Counter = Counter()
        self.failures: dict[str, dict[str, Any]] = {}
        self.generator_errors: Counter = Counter()
        self.builder_errors: Counter = Counter()
        self.started = time.time()

    def record(self, case: harness.Case, expected: Any, outcomes: list[harness.Outcome],
               batch_seed: int) -> None:
        self.programs += 1
        self.oracles[expected.oracle_kind if expected is not None else "none"] += 1
        self.ops.update(op.name for op in case.program.ops)
        for o in outcomes:
            self.checks[o.check][o.status] += 1
            if o.status == "refused":
                self.refusals[f"{o.kind}: {o.detail}"] += 1
            elif o.status == "skipped":
                self.skips[f"{o.check}: {o.kind}"] += 1
            elif o.failed:
                sig = signature(case, o)
                entry = self.failures.setdefault(sig, {
                    "count": 0, "checks": Counter(), "finding": None, "batch_seed": batch_seed,
                    "examples": [], "minimal": None})
                entry["count"] += 1
                entry["checks"][o.check] += 1
                finding = findings.match(case, o)
                if finding is not None:
                    entry["finding"] = {"id": finding.id, "title": finding.title,
                                        "known": finding.known, "fault": finding.fault}
                if len(entry["examples"]) < KEEP:
                    entry["examples"].append({"check": o.check, "detail": o.detail,
                                              "where": o.where, "case": repr(case)})

    def part(self) -> dict[str, Any]:
        """What this report counted (one batch's, in a worker process), to `merge`."""
        return {"programs": self.programs, "checks": dict(self.checks),
                "refusals": self.refusals, "skips": self.skips, "oracles": self.oracles,
                "ops": self.ops, "failures": self.failures,
                "generator_errors": self.generator_errors,
                "builder_errors": self.builder_errors}

    def merge(self, part: dict[str, Any]) -> None:
        """Add a batch's counts. Merged in batch order, the report is the one a single
        process recording the batches in turn writes (first examples, first batch seeds)."""
        self.programs += part["programs"]
        for check, counts in part["checks"].items():
            self.checks[check].update(counts)
        for name in ("refusals", "skips", "oracles", "ops", "generator_errors",
                     "builder_errors"):
            getattr(self, name).update(part[name])
        for sig, theirs in part["failures"].items():
            entry = self.failures.get(sig)
            if entry is None:
                self.failures[sig] = theirs
                continue
            entry["count"] += theirs["count"]
            entry["checks"].update(theirs["checks"])
            entry["finding"] = entry["finding"] or theirs["finding"]
            entry["examples"] = (entry["examples"] + theirs["examples"])[:KEEP]

    def as_json(self) -> dict[str, Any]:
        return {
            "command": " ".join(sys.argv),
            "seconds": round(time.time() - self.started),
            "programs": self.programs,
            "excluded": self.excluded,
            "oracles": dict(self.oracles),
            "checks": {k: dict(v) for k, v in sorted(self.checks.items())},
            "refusals": dict(self.refusals.most_common()),
            "skips": dict(self.skips.most_common()),
            "generator_errors": dict(self.generator_errors),
            "builder_errors": dict(self.builder_errors),
            "ops": dict(self.ops.most_common()),
            "failures": {k: {**v, "checks": dict(v["checks"])}
                         for k, v in sorted(self.failures.items(),
                                            key=lambda kv: -kv[1]["count"])},
        }


def _checker(framework: str | None) -> Any:
    """``check(case, only=None)``: every check, or only the one named (shrinking replays run
    just the check that failed; ``jit-zero`` is run by ``jit``)."""
    if framework is None:
        def check(case: harness.Case, only: str | None = None) -> Any:
            if only is None:
                return harness.run_checks(case)
            return harness.run_checks(case, ("jit",) if only.startswith("jit") else (only,))

        return check
    return lambda case, only=None: frameworks.run_framework_checks(case, framework)


def _strategy(args: argparse.Namespace) -> tuple[Any, dict[str, list[str]]]:
    names = tuple(n for n in ops.TABLE if n not in ops.UNPLANTED)
    structures = harness.STRUCTURES
    excluded: dict[str, list[str]] = {"ops": [], "structures": [], "checks": []}
    if args.phase == "deep":
        bad_ops, bad_structures, bad_checks = findings.triggers()
        names = tuple(n for n in names if n not in bad_ops)
        structures = tuple(s for s in structures if s not in bad_structures)
        excluded = {"ops": sorted(bad_ops), "structures": sorted(bad_structures),
                    "checks": sorted(bad_checks)}
    if args.framework:
        names = tuple(n for n in names if n in ops.framework_names(args.framework))
        return harness.cases(names=names, structures=("array",), dtypes=("float64",),
                             max_steps=args.max_steps), excluded
    return harness.cases(names=names, structures=structures, max_steps=args.max_steps), excluded


def _settings(n: int, phases: list[Phase]) -> settings:
    return settings(max_examples=n, deadline=None, database=None, phases=phases,
                    suppress_health_check=list(HealthCheck))


def run_batch(strategy: Any, check: Any, batch_seed: int, n: int, report: Report,
              skip_checks: set[str]) -> None:
    before = Counter(harness.GENERATOR_ERRORS)
    try:
        _run_batch(strategy, check, batch_seed, n, report, skip_checks)
    finally:
        report.builder_errors.update(Counter(harness.GENERATOR_ERRORS) - before)


def _run_batch(strategy: Any, check: Any, batch_seed: int, n: int, report: Report,
               skip_checks: set[str]) -> None:
    @hypothesis_seed(batch_seed)
    @_settings(n, [Phase.generate])
    @given(strategy)
    def body(case: harness.Case) -> None:
        expected, outcomes = check(case)
        outcomes = [o for o in outcomes if o.check not in skip_checks]
        report.record(case, expected, outcomes, batch_seed)

    try:
        body()
    except Exception as e:
        report.generator_errors[f"{type(e).__name__}: {str(e)[:200]}"] += 1


def shrink(strategy: Any, check: Any, batch_seed: int, n: int, sig: str,
           only: str | None) -> dict | None:
    """Replay the batch where ``sig`` first failed, failing on it, so that hypothesis shrinks
    it to a minimal case."""
    found: list[tuple[harness.Case, harness.Outcome]] = []

    @hypothesis_seed(batch_seed)
    @_settings(n, [Phase.generate, Phase.shrink])
    @given(strategy)
    def body(case: harness.Case) -> None:
        _, outcomes = check(case, only)
        for o in outcomes:
            if o.failed and signature(case, o) == sig:
                found.append((case, o))
                raise AssertionError(sig)

    try:
        body()
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
    if not found:
        return None
    case, o = found[-1]
    return {"check": o.check, "detail": o.detail, "where": o.where, "case": repr(case),
            "source": ops.REPRODUCER_HEADER + case.source()}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Fuzz campaign: {report['programs']} programs in {report['seconds']} s", "",
             f"`{report['command']}`", "", f"Oracles: {report['oracles']}", "",
             f"Excluded (deep phase): {report['excluded']}", "",
             "| check | " + " | ".join(["ok", "refused", "skipped", "wrong", "raw",
                                          "bad-refusal", "slow"]) + " |",
             "|---|" + "---|" * 7]
    for check, counts in report["checks"].items():
        lines.append(f"| {check} | " + " | ".join(str(counts.get(s, 0)) for s in (
            "ok", "refused", "skipped", "wrong", "raw", "bad-refusal", "slow")) + " |")
    lines += ["", "## Refusals (acceptable) by class", ""]
    lines += [f"- {n} x {k}" for k, n in report["refusals"].items()]
    lines += ["", "## Skips by reason", ""]
    lines += [f"- {n} x {k}" for k, n in report["skips"].items()]
    if report["generator_errors"]:
        lines += ["", "## Generator errors", ""]
        lines += [f"- {n} x {k}" for k, n in report["generator_errors"].items()]
    lines += ["", "## Failures", ""]
    for sig, entry in report["failures"].items():
        finding = entry["finding"]
        head = f"{finding['id']} ({'known' if finding['known'] else 'new'}): {finding['title']}" \
            if finding else f"unexplained: {sig}"
        lines += [f"### {head}", "", f"{entry['count']} failures; checks {entry['checks']}", ""]
        example = entry["minimal"] or entry["examples"][0]
        lines += ["```", example["detail"][:600], example.get("where", ""),
                  example.get("source", example["case"]), "```", ""]
    return "\n".join(lines)


_WORKER: dict[str, Any] = {}


def _start_worker(args: argparse.Namespace) -> None:
    """A worker process's strategy and checker, built once (``--jobs``)."""
    warnings.simplefilter("ignore")
    harness.TIME_LIMIT = args.time_limit
    strategy, excluded = _strategy(args)
    _WORKER.update(args=args, strategy=strategy, check=_checker(args.framework),
                   skip=set(excluded["checks"]), excluded=excluded)


def _worker_batch(job: tuple[int, int]) -> dict[str, Any]:
    """Batch ``b`` of ``n`` programs, seeded as the sequential campaign seeds it."""
    b, n = job
    w = _WORKER
    part = Report(w["args"], w["excluded"])
    run_batch(w["strategy"], w["check"], w["args"].seed * 100003 + b, n, part, w["skip"])
    return part.part()


def _batches(args: argparse.Namespace, report: Report, strategy: Any, check: Any,
             skip_checks: set[str]):
    """Run the batches (in ``--jobs`` processes when more than one), yielding after each
    is merged into ``report``, in batch order."""
    batches = -(-args.programs // args.batch)
    jobs = [(b, min(args.batch, args.programs - b * args.batch)) for b in range(batches)]
    if args.jobs <= 1:
        for b, n in jobs:
            run_batch(strategy, check, args.seed * 100003 + b, n, report, skip_checks)
            yield b, batches
        return
    # spawn: a fresh interpreter per worker (forking a process that imported torch / JAX
    # is unsafe); each re-imports this module, whose _bootstrap finds this checkout's tests
    context = multiprocessing.get_context("spawn")
    with context.Pool(args.jobs, _start_worker, (args,)) as pool:
        for b, part in enumerate(pool.imap(_worker_batch, jobs)):
            report.merge(part)
            yield b, batches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--out", default="fuzz-report.json")
    parser.add_argument("--phase", choices=("all", "deep"), default="all")
    parser.add_argument("--framework", choices=frameworks.FRAMEWORKS, default=None)
    parser.add_argument("--max-steps", type=int, default=7)
    parser.add_argument("--time-limit", type=float, default=harness.CAMPAIGN_TIME_LIMIT)
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes running batches (same seeds, same report)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    harness.TIME_LIMIT = args.time_limit
    strategy, excluded = _strategy(args)
    check = _checker(args.framework)
    report = Report(args, excluded)
    skip_checks = set(excluded["checks"])
    for b, batches in _batches(args, report, strategy, check, skip_checks):
        _write(report, args.out)
        print(f"batch {b + 1}/{batches}: {report.programs} programs, "
              f"{sum(e['count'] for e in report.failures.values())} failures in "
              f"{len(report.failures)} signatures, {round(time.time() - report.started)} s",
              flush=True)
    if not args.no_shrink:  # the failures no finding explains, once per kind (not per check)
        shrunk: dict[str, Any] = {}
        for sig, entry in report.failures.items():
            if entry["finding"] is not None:
                continue
            status, _, what = sig.split("|", 2)
            kind = f"{status}|{what}"
            if kind not in shrunk:
                shrunk[kind] = shrink(strategy, check, entry["batch_seed"], args.batch, sig,
                                      entry["examples"][0]["check"])
                print(f"shrunk {sig}", flush=True)
            entry["minimal"] = shrunk[kind]
            _write(report, args.out)
    _write(report, args.out)


def _write(report: Report, out: str) -> None:
    data = report.as_json()
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, out)
    Path(out).with_suffix(".md").write_text(markdown(data))


if __name__ == "__main__":
    main()
