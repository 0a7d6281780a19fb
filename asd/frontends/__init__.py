"""Framework frontends: import a PyTorch or JAX program as an asd program.

Each frontend turns the framework's own graph (``torch.export``'s ATen graph, a JAX jaxpr)
into a plain Python function on numpy arrays that calls asd's library for every operation,
so the usual sweep (``asd.subgrad``, ``asd.trace``) applies unchanged. An operation without
a mapping raises `asd.UnsupportedError` naming it and where it came from: a frontend never
falls back to the framework's own derivative, which is exactly what asd exists to replace.

The modules here import their framework at the top; the public entry points ``asd.torch``
and ``asd.jax`` import them only when called, so ``import asd`` never imports a framework.
"""
