"""Tools built on the engine to study a function rather than differentiate it once.

``clarke`` samples limiting gradients and answers hull questions (``asd.clarke``,
``ClarkeSample``); ``branching`` turns a user's branching program into a primitive with a
derived rule (the paper's Algorithm 7: ``asd.branching``, ``asd.branch``); ``certificate``
checks a branching program's constraint qualification with sympy (``asd.certify``).

Imports: the public API (``asd.api``, ``asd.result``), the engine (``asd.core``) and the leaf
modules ``asd.errors`` and ``asd.tree``; never the command line or the front ends. Modules
needing scipy or sympy are loaded by ``asd`` on first use.
"""
