"""The engine: everything that turns a function into a straight-line program and sweeps it.

It knows no particular primitive. ``tracing`` records a user's function as ``program`` nodes
(the IR) over ``primitive`` objects (the rule protocol); each rule returns a structured
``linear`` map; ``sweep`` runs the forward pass along a direction and the reverse pass over the
selected branches; ``ties`` decides every tie (tangent, then the exact ``series`` along the
ray, then the lexicographic directions); ``arguments`` converts and checks what crosses into
the engine; ``backend`` is the one place that knows numpy, torch and JAX apart; ``jit``
keeps a traced program per signature and replays it, ``codegen`` writes the tie-free fast
path of a compiled subgradient.

Imports: numpy (array-api-compat lazily, for other libraries' arrays), and from asd only the
leaf modules ``asd.errors`` and ``asd.tree``; nothing above this package (the API, the
library, the analysis tools, the front ends, the command line) is imported from here.
"""
