"""``asd bench``: asd against the numpy primal, hand-written backprop and its peers, and on
PyTorch models against PyTorch (on every device torch sees).

The programs and the measurement live in the ``asd.benchmarks`` package (the top-level
``benchmarks/`` folder); this module is the command line: it runs them, prints the table
and the targets, and writes the JSON report when asked.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

PEERS = ("autograd", "torch", "jax")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; 0 when every correctness check passed (timing never fails).

    >>> main(["--help"])  # doctest: +ELLIPSIS
    usage: asd bench ...
    0
    """
    parser = argparse.ArgumentParser(prog="asd bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and 3 rounds: a smoke run for CI")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as markdown")
    parser.add_argument("--reps", type=int, help="timed rounds per contender (default 11)")
    parser.add_argument("--only", metavar="TEXT", help="run the programs whose name has TEXT")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="comma-separated peers to include if installed (default: all)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per library: numpy's BLAS (via threadpoolctl), torch "
                             "and JAX (default 1; 0 leaves their pools as they are)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)

    from rich.console import Console

    from asd.benchmarks import runner

    console = Console()
    if not console.is_terminal:  # a log or a pipe: keep the table's columns on one line
        console = Console(width=160)
    peers = tuple(p for p in args.peers.split(",") if p)
    unknown = set(peers) - set(PEERS)
    if unknown:
        print(f"asd bench: unknown peer(s) {sorted(unknown)}; choose from {PEERS}",
              file=sys.stderr)
        return 2
    threads = args.threads or None
    if threads and importlib.util.find_spec("threadpoolctl") is None:
        print("asd bench: threadpoolctl is not installed, so numpy's BLAS keeps its own "
              "thread count (pip install threadpoolctl to pin it)", file=sys.stderr)
    if threads and "jax" in peers and "jax" not in sys.modules:
        # XLA reads its thread pool size once, at start-up.
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false"
                                   f" intra_op_parallelism_threads={threads}").strip()
    # Interleaving libraries whose thread pools spin between calls (OpenBLAS, torch's
    # OpenMP, XLA's Eigen pool) on a 2-core machine makes each wait for the others' idle
    # spinning: by default every library runs on one thread, and torch's workers sleep.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    report = runner.run(quick=args.quick, reps=args.reps, peers=peers, only=args.only,
                        progress=lambda name: console.log(f"running {name}"),
                        threads=threads)
    if not (report["programs"] or report["torch_models"] or report["jax_models"]
            or report["tf_models"]):
        print(f"asd bench: no program name contains {args.only!r}", file=sys.stderr)
        return 2
    times, targets = runner.tables(report)
    if report["programs"]:
        console.print(times)
    if report["torch_models"]:
        from asd.benchmarks import torch_models

        console.print(torch_models.table(report["torch_models"]))
    if report["jax_models"]:
        from asd.benchmarks import jax_models

        console.print(jax_models.table(report["jax_models"]))
    if report["tf_models"]:
        from asd.benchmarks import tf_models

        console.print(tf_models.table(report["tf_models"]))
    if args.quick:
        # small sizes on a shared machine: the times show it runs, they judge nothing
        console.print("quick mode: small sizes, correctness checks only; time targets are not "
                      "judged (run `asd bench` without --quick for them)")
    else:
        console.print(targets)
    console.print(f"memory: {report['memory']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
        console.print(f"wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(runner.markdown(report))
        console.print(f"wrote {args.markdown}")
    failed = [p["name"] for p in report["programs"] + report["torch_models"]
              + report["tf_models"] + [r for r in report["jax_models"] if r.get("staged")]
              if not p["check"]["ok"]]
    if failed:
        print(f"asd bench: asd's subgradient disagrees with the reference on {failed}",
              file=sys.stderr)
    return 1 if failed else 0
