"""op=Adasum through relaxlib_tf on real ranks (launched with adasum_torch.py by tests/test_adasum.py):
allreduce and a fused grouped_allreduce against the numpy tree, float64, DistributedGradientTape's
gradients, and the refusals (integer dtype, rank count not a power of two) on every rank."""

import numpy as np
import pytest
from adasum_reference import rank_tensors, tree

tf = pytest.importorskip("tensorflow")
import relaxlib_tf as hvd  # noqa: E402 - after the skip when TensorFlow is missing

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
POWER_OF_TWO = SIZE & (SIZE - 1) == 0
power_of_two = pytest.mark.skipif(not POWER_OF_TWO, reason="Adasum runs on a power-of-two number of ranks")
SIZES = [3, 250, 1, 17]


def expected(sizes, dtype=np.float32, seed=0):
    per_rank = [rank_tensors(r, sizes, dtype, seed) for r in range(SIZE)]
    return [tree([per_rank[r][t] for r in range(SIZE)]) for t in range(len(sizes))]


def still_works():
    total = hvd.allreduce(tf.ones([3]), op=hvd.Sum, name="tf.adasum.after")
    assert bool(tf.reduce_all(total == float(SIZE))), total


@power_of_two
def test_allreduce_and_fused_group_match_the_numpy_tree():
    mine = [tf.constant(a) for a in rank_tensors(RANK, SIZES, seed=21)]
    want = expected(SIZES, seed=21)
    grouped = hvd.grouped_allreduce(mine, op=hvd.Adasum, name="tf.adasum.grouped")
    single = hvd.allreduce(mine[1], op=hvd.Adasum, name="tf.adasum.single")
    for index, (g, w) in enumerate(zip(grouped, want)):
        assert g.dtype == tf.float32
        np.testing.assert_allclose(g.numpy(), w, rtol=2e-5, atol=2e-5 * np.abs(w).max(), err_msg=f"tensor {index}")
    np.testing.assert_array_equal(single.numpy(), grouped[1].numpy())


@power_of_two
def test_float64():
    mine = tf.constant(rank_tensors(RANK, [129], np.float64, seed=22)[0])
    out = hvd.allreduce(mine, op=hvd.Adasum, name="tf.adasum.f64")
    np.testing.assert_allclose(out.numpy(), expected([129], np.float64, seed=22)[0], rtol=1e-12, atol=1e-12)


@power_of_two
def test_gradient_tape_combines_gradients_with_adasum():
    """Horovod's tape with op=Adasum: each gradient is the Adasum of the ranks' (not divided)."""
    w = tf.Variable(np.linspace(-1, 1, 6).astype(np.float32))
    data = [tf.constant(rank_tensors(r, [6], seed=23)[0]) for r in range(SIZE)]
    per_rank = [2.0 * (w.numpy() * x.numpy() - 1.0) * x.numpy() for x in data]  # d/dw sum((w*x - 1)^2)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum((w * data[RANK] - 1.0) ** 2)
    tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    (grad,) = tape.gradient(loss, [w])
    np.testing.assert_allclose(grad.numpy(), tree(per_rank), rtol=2e-5, atol=1e-5)


def test_integer_tensors_are_refused_on_every_rank():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Adasum.*float16, float32 and float64.*int32"):
        hvd.allreduce(tf.ones([4], tf.int32), op=hvd.Adasum, name="tf.adasum.int")
    still_works()


@pytest.mark.skipif(POWER_OF_TWO, reason="checks the refusal on a rank count that is not a power of two")
def test_a_rank_count_that_is_not_a_power_of_two_is_refused_on_every_rank():
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"power-of-two number of ranks.*there are {SIZE}"):
        hvd.allreduce(tf.ones([4]), op=hvd.Adasum, name="tf.adasum.odd")
    still_works()
