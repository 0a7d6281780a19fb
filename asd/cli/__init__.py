"""The ``asd`` command and its tools: ``demo``, ``prove``, ``audit`` (with its ``battery`` of
exact Clarke sets), ``bench``; ``frameworks`` runs the peer frameworks they compare against;
``main`` is the entry point that dispatches to them.

Imports: anything below (the public API, the analysis tools, the front ends, the proofs and
benchmarks); nothing in asd imports this package.
"""
