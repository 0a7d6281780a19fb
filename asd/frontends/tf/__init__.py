"""TensorFlow programs in, correct subgradients out: ``asd.tf.subgrad`` and ``asd.tf.function``.

TensorFlow picks a fixed derivative at every kink (``relu'(0) = 0``, ``maximum`` sends a tie to
its first argument), which does not compose: ``relu(x) - relu(-x)`` is the identity, yet its
``tf.GradientTape`` gradient at 0 is 0. These functions trace the function with
``tf.function`` and interpret the graph's operations with asd's library (below), so the answer
is an element of the Clarke subdifferential.

- ``subgrad(fn, *tensors, argnums=0, seed=None, direction=None)``: ``fn`` is a function or a
  Keras model / layer (or ``tf.Module``) returning a scalar. ``argnums`` is an int or a tuple of
  ints (positions in ``tensors``), or ``'params'`` for the trainable variables ``fn`` reads
  (then the result, and a given ``direction``, are dicts ``{name: tensor}``: a model's
  variables by their Keras path below the model, ``'dense/kernel'``; a function's captured
  model ``mlp`` gives ``'mlp/dense/kernel'``, a captured ``tf.Variable`` ``w`` gives ``'w'``);
  ``'params'`` may also appear inside a tuple. With ``direction=v`` the result is the limiting
  gradient ``lim ∇f(x + δv)``, δ ↓ 0. Results are TF tensors in the inputs' dtype.
- ``value_and_subgrad``: the same with the value.
- ``function(fn, seed=None)``: ``fn`` as a ``tf.custom_gradient`` whose gradient is asd's
  vector-limiting-Jacobian product; ``tf.GradientTape`` on anything built with it gets correct
  subgradients, for the inputs and for the trainable variables ``fn`` reads.
- ``program(fn, *tensors)``: the imported ``asd.Program``.

This package is ``asd.frontends.tf``, published as ``asd.tf``; ``import asd`` does not import
it, so TensorFlow is imported only when ``asd.tf`` is first used. Its modules: `ops` (the op
table), `importer` (the graph, the program, its cache), `api` (``subgrad``), `dropin`
(``function``).

How a graph becomes an asd program: ``tf.function(fn).get_concrete_function(specs)`` gives the
graph as TensorFlow operations (``Relu``, ``MatMul``, ``BiasAdd``, ``Conv2D``, ``MaxPool``,
``SelectV2``...). `TfProgram` evaluates its operations on numpy or traced arrays, mapping
every one that depends on the differentiated inputs to an asd library function (`OPS`).
Variables are captured resources: ``ReadVariableOp`` reads the value asd is given for a
trainable variable, or the variable's current value for a non-trainable one. A nested
``tf.function`` (``PartitionedCall``, ``StatefulPartitionedCall``) is interpreted
recursively, like JAX's ``pjit``. Operations on constants only (shape arithmetic,
``Const``, ``Fill``) are run by TensorFlow itself: they carry no derivative. An operation
that depends on the differentiated inputs and has no mapping raises `asd.UnsupportedError`
when the program is imported, naming the operation type, the node and the fix; nothing
falls back to TensorFlow's own derivative, which is exactly the fixed choice at a kink that
asd replaces.

``sqrt(reduce_sum(x * x))`` (``tf.norm``) becomes ``asd.norm``: ``sqrt`` alone is not
Lipschitz at 0, the norm is (TensorFlow returns NaN for the gradient of ``tf.norm`` at 0).

Imported programs are cached per input signature and per everything the trace could have
captured: the identity, shape and dtype of the variables, and the values of the Python objects
``fn`` reaches (closure cells, globals it names, default arguments, the attributes of the
objects it is bound to, recursively). Changing a captured Python number retraces; assigning
new values to variables does not need to (they are read on every call).

>>> import tensorflow as tf, asd.tf
>>> f = lambda x: tf.reduce_sum(tf.nn.relu(x) - tf.nn.relu(-x))
>>> asd.tf.subgrad(f, tf.zeros(3))
<tf.Tensor: shape=(3,), dtype=float32, numpy=array([1., 1., 1.], dtype=float32)>
>>> x = tf.Variable(tf.zeros(3))
>>> with tf.GradientTape() as tape:                                   # TensorFlow's own answer
...     y = f(x)
>>> tape.gradient(y, x).numpy()
array([0., 0., 0.], dtype=float32)
>>> g = asd.tf.function(lambda x: tf.nn.relu(x) - tf.nn.relu(-x))
>>> with tf.GradientTape() as tape:
...     y = tf.reduce_sum(g(x))
>>> tape.gradient(y, x).numpy()
array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

from asd.frontends.tf.api import subgrad, value_and_subgrad
from asd.frontends.tf.dropin import function
from asd.frontends.tf.importer import TfProgram, import_program, program
from asd.frontends.tf.ops import OPS

NATIVE_BACKWARD = True
"""Whether `function` uses TensorFlow's own gradient where no tie matters (`native`); False:
asd's sweep at every call (the reference the native path is tested against)."""

__all__ = ["NATIVE_BACKWARD", "OPS", "TfProgram", "function", "import_program", "program",
           "subgrad", "value_and_subgrad"]
