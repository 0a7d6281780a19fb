"""asd's benchmark suite: each program timed as a numpy primal, a hand-written numpy
forward+backward where one exists, asd ``value_and_subgrad`` and the installed peers
(autograd, PyTorch, JAX with and without jit), in one interleaved run.

Run it with ``asd bench`` (``--quick`` for a smoke run, ``--json PATH`` for the numbers).
"""
