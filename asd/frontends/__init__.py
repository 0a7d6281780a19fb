"""Framework front ends: import a PyTorch, JAX or TensorFlow program as an asd program.

Each front end turns the framework's own graph (``torch.export``'s ATen graph, a JAX jaxpr, a
``tf.function`` graph) into a plain Python function that calls asd's library for every
operation, so the usual sweep (``asd.subgrad``, ``asd.trace``) applies unchanged. An operation
without a mapping raises `asd.UnsupportedError` naming it and where it came from: a front end
never falls back to the framework's own derivative, which is exactly what asd exists to replace.

The modules are published under short names (``asd.frontends.torch`` is ``asd.torch``,
``asd.frontends.jax`` is ``asd.jax``, ``asd.frontends.tf`` is ``asd.tf``: one module object
under two names, see ``asd``). Each imports its framework at the top; ``import asd`` imports
none of them, so a framework is loaded only when its front end is first used.

Imports: the public API (``import asd``), the engine and the leaf modules; never the command
line.
"""
