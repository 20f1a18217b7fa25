"""``TensorMath`` (and the step scale's ``StepScaleMath``) as TensorFlow ops: the math of the
traced Keras step and of ``DistributedGradientTape`` (symbolic tensors while traced, eager ones
otherwise). State is TF variables; nothing is written in place except by ``assign``."""

from __future__ import annotations

import tensorflow as tf

from relaxlib.algorithms.context import TensorMath
from relaxlib.algorithms.step_scale import StepScaleMath

NOT_IN_A_GRAPH = "is not available while a step is traced (the algorithm is not traceable)"


class GraphMath(TensorMath, StepScaleMath):
    """TF ops on flat tensors; ``zeros`` are variables created outside the traced function."""

    writes_in_place = False  # tensors are immutable; only whole variables are assigned

    def zeros(self, numel: int) -> tf.Variable:
        """A variable (created outside the traced function): state that outlives the trace."""
        with tf.init_scope():
            return tf.Variable(tf.zeros([numel], tf.float32), trainable=False)

    def concat(self, tensors: list) -> tf.Tensor:
        return tensors[0] if len(tensors) == 1 else tf.concat(tensors, axis=0)

    def copy_(self, tensor: tf.Variable, value) -> None:
        tensor.assign(value)

    def add_(self, tensor, other, alpha: float = 1.0) -> None:
        raise NotImplementedError(f"in-place addition {NOT_IN_A_GRAPH}")

    def scale_(self, tensor, factor: float) -> None:
        raise NotImplementedError(f"in-place scaling {NOT_IN_A_GRAPH}")

    def sum_of_squares(self, tensor) -> float:
        """Eagerly only (e.g. ``consensus_distance()`` between steps)."""
        if not tf.executing_eagerly():
            raise NotImplementedError(f"a host value (sum of squares) {NOT_IN_A_GRAPH}")
        return float(tf.reduce_sum(tf.square(tf.cast(tensor, tf.float64))))

    def clone(self, tensor) -> tf.Tensor:
        return tf.identity(tensor)

    def sqrt(self, tensor) -> tf.Tensor:
        return tf.sqrt(tensor)  # correctly rounded (tf.pow(x, 0.5) is not)

    def repeat(self, tensor, count: int) -> tf.Tensor:
        return tf.repeat(tensor, count)

    def host_view(self, tensor) -> None:
        """Never: TF tensors are not written in place (the scale composes these ops instead)."""
        return None

    def factor_mean_squares(self, tensor, rows: int, cols: int) -> tf.Tensor:
        squares = tf.square(tf.reshape(tf.cast(tensor, tf.float64), [rows, cols]))
        row = tf.reduce_mean(squares, axis=1)
        return tf.cast(tf.concat([row, tf.reduce_mean(squares, axis=0), [tf.reduce_mean(row)]], axis=0), tf.float32)

    def outer(self, a, b) -> tf.Tensor:
        return tf.reshape(a[:, None] * b[None, :], [-1])

    def finite_or(self, value, fallback) -> tf.Tensor:
        return tf.where(tf.math.is_finite(value), value, tf.convert_to_tensor(fallback))

    def from_host(self, array) -> tf.Tensor:
        return tf.reshape(tf.constant(array, tf.float32), [-1])

    def matmul(self, a, b, rows: int, inner: int, cols: int, transpose_a: bool = False,
               transpose_b: bool = False) -> tf.Tensor:
        left = tf.reshape(a, [inner, rows] if transpose_a else [rows, inner])
        right = tf.reshape(b, [cols, inner] if transpose_b else [inner, cols])
        return tf.reshape(tf.matmul(left, right, transpose_a=transpose_a, transpose_b=transpose_b), [-1])

    def orthogonalize(self, tensor, rows: int, cols: int, epsilon: float = 0.0) -> tf.Tensor:
        """Modified Gram-Schmidt as in the other bindings, column by column (no in-place writes:
        the columns are new tensors)."""
        columns = tf.unstack(tf.reshape(tf.cast(tensor, tf.float32), [rows, cols]), num=cols, axis=1)
        for i in range(cols):
            column = columns[i]
            divisor = tf.sqrt(tf.reduce_sum(column * column)) + epsilon
            # a zero column (epsilon 0) stays zero, where 0 / 0 would be NaN
            column = tf.where(divisor > 0, column / tf.where(divisor > 0, divisor, 1.0), tf.zeros_like(column))
            columns[i] = column
            for j in range(i + 1, cols):
                columns[j] = columns[j] - tf.reduce_sum(column * columns[j]) * column
        return tf.reshape(tf.stack(columns, axis=1), [-1])
