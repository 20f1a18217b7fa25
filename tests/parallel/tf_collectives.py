"""TensorFlow collectives on real ranks against numpy, eagerly and inside tf.function; gradients;
errors raised on every rank. Launched by tests/test_tf_parallel.py with 2 and 3 ranks.
"""

import zlib

import numpy as np
import pytest
import tensorflow as tf

import relaxlib_tf as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()

DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int64, tf.int32, tf.int16, tf.int8, tf.uint16,
          tf.uint8]  # every dtype Horovod has, bool aside
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
MODES = ["eager", "function"]


def rank_data(rank: int, shape, dtype: tf.DType, seed: int, small: bool = False) -> np.ndarray:
    """The values rank ``rank`` contributes (float64 or int64); every rank can recompute them."""
    rng = np.random.default_rng(seed * 1000 + rank)
    if dtype.is_floating:
        values = rng.random(shape)
        return 0.5 + values if small else values * 20 - 10
    low, high = (1, 3) if small else ((0, 40) if dtype.is_unsigned else (-20, 20))
    return rng.integers(low, high, shape)


def as_tensor(values: np.ndarray, dtype: tf.DType) -> tf.Tensor:
    return tf.cast(tf.constant(values), dtype)


def reference(dtype: tf.DType, op: int, shape, seed: int) -> np.ndarray:
    """The expected reduction of every rank's input, in float64 for floats."""
    small = op == hvd.Product
    arrays = [as_tensor(rank_data(r, shape, dtype, seed, small), dtype).numpy() for r in range(SIZE)]
    if dtype.is_floating:
        arrays = [a.astype(np.float64) for a in arrays]
    reduce = {hvd.Sum: np.add, hvd.Average: np.add, hvd.Min: np.minimum, hvd.Max: np.maximum,
              hvd.Product: np.multiply}[op]
    acc = arrays[0].copy()
    for a in arrays[1:]:
        acc = reduce(acc, a, dtype=acc.dtype)
    if op == hvd.Average:
        acc = acc / SIZE if dtype.is_floating else np.trunc(acc.astype(np.float64) * (1.0 / SIZE)).astype(acc.dtype)
    return acc


def run(mode: str, fn, *args):
    """``fn(*args)`` eagerly or as a tf.function."""
    return fn(*args) if mode == "eager" else tf.function(fn)(*args)


def close(result: tf.Tensor, expected: np.ndarray, dtype: tf.DType) -> None:
    assert result.dtype == dtype and tuple(result.shape) == tuple(expected.shape)
    got = tf.cast(result, tf.float64).numpy() if dtype.is_floating else result.numpy()
    tol = {tf.float16: 2e-2, tf.bfloat16: 8e-2}.get(dtype, 1e-6)
    if dtype.is_floating:
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * 10)
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op_name", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allreduce_matches_numpy(dtype, op_name, mode):
    op = OPS[op_name]
    shape, seed = (3, 5), zlib.crc32(f"{dtype.name}.{op_name}".encode()) % 1000  # the same on every rank
    tensor = as_tensor(rank_data(RANK, shape, dtype, seed, small=op == hvd.Product), dtype)
    result = run(mode, lambda t: hvd.allreduce(t, op=op, name=f"ar.{dtype.name}.{op_name}.{mode}"), tensor)
    close(result, reference(dtype, op, shape, seed), dtype)


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_scalar_and_scale_factors(mode):
    result = run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5,
                                               name=f"scalar.{mode}"), tf.constant(float(RANK + 1)))
    assert result.shape == () and float(result) == pytest.approx(SIZE * (SIZE + 1) / 2)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_mixed_dtypes(mode):
    tensors = [tf.fill([4], float(RANK)), tf.fill([2, 3], tf.constant(RANK, tf.int32)),
               tf.constant(float(RANK), tf.float64)]
    result = run(mode, lambda *ts: hvd.grouped_allreduce(list(ts), op=hvd.Sum, name=f"grouped.{mode}"), *tensors)
    total = SIZE * (SIZE - 1) / 2
    assert [r.dtype for r in result] == [tf.float32, tf.int32, tf.float64]
    np.testing.assert_allclose(result[0].numpy(), np.full(4, total))
    np.testing.assert_array_equal(result[1].numpy(), np.full((2, 3), int(total)))
    assert float(result[2]) == total


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES + [tf.bool], ids=lambda d: d.name)
def test_allgather_with_different_first_dimensions(dtype, mode):
    def data(r):  # rank r contributes r + 1 rows
        if dtype == tf.bool:
            return (rank_data(r, (r + 1, 3), tf.int64, 7) % 2).astype(bool)
        return rank_data(r, (r + 1, 3), dtype, 7)

    result = run(mode, lambda t: hvd.allgather(t, name=f"ag.{dtype.name}.{mode}"), as_tensor(data(RANK), dtype))
    expected = np.concatenate([as_tensor(data(r), dtype).numpy() for r in range(SIZE)])
    assert result.dtype == dtype and result.shape == expected.shape
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allgather(mode):
    tensors = [tf.fill([RANK + 1], float(RANK)), tf.fill([1, 2], tf.constant(RANK, tf.int64))]
    result = run(mode, lambda *ts: hvd.grouped_allgather(list(ts), name=f"grouped_ag.{mode}"), *tensors)
    np.testing.assert_array_equal(result[0].numpy(), np.concatenate([np.full(r + 1, r) for r in range(SIZE)]))
    np.testing.assert_array_equal(result[1].numpy(), np.arange(SIZE).repeat(2).reshape(SIZE, 2))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES + [tf.bool], ids=lambda d: d.name)
def test_broadcast_from_every_root(dtype, mode):
    def values(r):
        return rank_data(r, (2, 4), tf.int64, 3) % 2 == 1 if dtype == tf.bool else rank_data(r, (2, 4), dtype, 3)

    for root in range(SIZE):
        result = run(mode, lambda t, root=root: hvd.broadcast(t, root, name=f"bc.{dtype.name}.{root}.{mode}"),
                     as_tensor(values(RANK), dtype))
        np.testing.assert_array_equal(result.numpy(), as_tensor(values(root), dtype).numpy())


def test_broadcast_in_place_on_variables():
    variables = [tf.Variable(tf.fill([3], float(RANK))), tf.Variable(tf.constant(RANK, tf.int64))]
    hvd.broadcast_(variables, root_rank=SIZE - 1, name="bc_inplace")
    np.testing.assert_array_equal(variables[0].numpy(), np.full(3, SIZE - 1))
    assert int(variables[1].numpy()) == SIZE - 1
    variables[0].assign(tf.fill([3], float(RANK)))
    hvd.broadcast_variables(variables, root_rank=0)
    np.testing.assert_array_equal(variables[0].numpy(), np.zeros(3))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op_name", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_reducescatter_blocks(dtype, op_name, mode):
    rows = 2 * SIZE + 1  # uneven: the first rank takes the extra row
    seed = zlib.crc32(f"rs.{dtype.name}.{op_name}".encode()) % 1000
    tensor = as_tensor(rank_data(RANK, (rows, 2), dtype, seed, small=OPS[op_name] == hvd.Product), dtype)
    result = run(mode, lambda t: hvd.reducescatter(t, op=OPS[op_name], name=f"rs.{dtype.name}.{op_name}.{mode}"),
                 tensor)
    counts = [rows // SIZE + (1 if r < rows % SIZE else 0) for r in range(SIZE)]
    start = sum(counts[:RANK])
    expected = reference(dtype, OPS[op_name], (rows, 2), seed)[start:start + counts[RANK]]
    close(result, expected, dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES + [tf.bool], ids=lambda d: d.name)
def test_alltoall_with_splits(dtype, mode):
    splits = [(RANK + dest) % 3 for dest in range(SIZE)]  # rank r sends (r + d) % 3 rows to d
    rows = sum(splits)

    def block(rank, n):  # rank's n rows: values that survive every dtype (bool: parity)
        values = np.arange(n * 2).reshape(-1, 2) + 10 * rank
        return as_tensor(values % 2 == 1 if dtype == tf.bool else values, dtype).numpy()

    tensor = tf.constant(block(RANK, rows))
    received, received_splits = run(mode, lambda t, s: hvd.alltoall(t, s, name=f"a2a.{dtype.name}.{mode}"),
                                    tensor, tf.constant(splits, tf.int64))
    expected_splits = [(src + RANK) % 3 for src in range(SIZE)]
    np.testing.assert_array_equal(received_splits.numpy(), expected_splits)
    pieces = []
    for src in range(SIZE):
        src_splits = [(src + d) % 3 for d in range(SIZE)]
        offset = sum(src_splits[:RANK])
        pieces.append(block(src, sum(src_splits))[offset:offset + src_splits[RANK]])
    np.testing.assert_array_equal(received.numpy(), np.concatenate(pieces))


def test_alltoall_equal_split_returns_only_the_tensor_as_horovod():
    tensor = tf.fill([SIZE, 2], RANK)
    received = hvd.alltoall(tensor, name="a2a.equal")
    np.testing.assert_array_equal(received.numpy(), np.arange(SIZE).repeat(2).reshape(SIZE, 2))
    _, received_splits = hvd.alltoall(tensor, splits=[1] * SIZE, name="a2a.equal.splits")
    np.testing.assert_array_equal(received_splits.numpy(), np.ones(SIZE))


def test_rank_and_size_ops_barrier_and_objects():
    assert int(hvd.rank_op()) == RANK and int(hvd.size_op()) == SIZE
    assert int(hvd.local_size_op()) == hvd.local_size() and int(hvd.local_rank_op()) == hvd.local_rank()
    assert int(tf.function(hvd.size_op)()) == SIZE
    hvd.barrier()
    assert hvd.broadcast_object({"from": RANK}, root_rank=SIZE - 1) == {"from": SIZE - 1}
    assert hvd.broadcast_object_fn(root_rank=0)([RANK]) == [0]
    assert hvd.allgather_object(("r", RANK)) == [("r", r) for r in range(SIZE)]


def test_fp16_compression_keeps_dtype():
    result = hvd.allreduce(tf.fill([5], float(RANK)), op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16")
    assert result.dtype == tf.float32
    np.testing.assert_allclose(result.numpy(), np.full(5, SIZE * (SIZE - 1) / 2))


def test_indexed_slices_are_gathered():
    slices = tf.IndexedSlices(tf.fill([1, 2], float(RANK + 1)), tf.constant([RANK]), tf.constant([SIZE, 2]))
    result = hvd.allreduce(slices, op=hvd.Average, name="sparse")
    dense = tf.convert_to_tensor(result).numpy()
    np.testing.assert_allclose(dense, np.array([[r + 1, r + 1] for r in range(SIZE)]) / SIZE)


def test_process_set_collectives_involve_only_members():
    evens = hvd.add_process_set([r for r in range(SIZE) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(SIZE) if r % 2 == 1]) if SIZE > 1 else None
    mine = evens if RANK % 2 == 0 else odds
    members = [r for r in range(SIZE) if r % 2 == RANK % 2]
    total = hvd.allreduce(tf.constant([float(RANK)]), op=hvd.Sum, process_set=mine, name="ps.ar")
    assert float(total[0]) == sum(members)
    gathered = hvd.allgather(tf.constant([RANK]), process_set=mine, name="ps.ag")
    assert gathered.numpy().tolist() == members
    assert int(hvd.size_op(mine.process_set_id)) == len(members)
    assert int(hvd.rank_op(mine.process_set_id)) == members.index(RANK)
    hvd.remove_process_set(evens)
    if odds is not None:
        hvd.remove_process_set(odds)


def test_join_with_uneven_steps_contributes_zeros():
    for step in range(RANK + 1):  # rank r runs r + 1 steps, then joins
        active = [r for r in range(SIZE) if r + 1 > step]
        total = hvd.allreduce(tf.ones([3]), op=hvd.Sum, name=f"join.ar.{step}")
        np.testing.assert_array_equal(total.numpy(), np.full(3, float(len(active))))
    assert hvd.join() == SIZE - 1


# ---- gradients ----

@pytest.mark.parametrize("mode", MODES)
def test_allreduce_gradient_is_the_allreduce_of_the_gradient(mode):
    x = tf.Variable(tf.fill([3], float(RANK + 1)))

    def grad():
        with tf.GradientTape() as tape:
            y = hvd.allreduce(x * float(RANK + 1), op=hvd.Sum, name=f"grad.ar.{mode}")
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, x)

    g = run(mode, grad)
    # y = sum_r (r+1)^2 on every rank; dL/dy = 2y, summed over ranks, times (RANK + 1)
    y = sum((r + 1) ** 2 for r in range(SIZE))
    np.testing.assert_allclose(g.numpy(), np.full(3, 2 * y * SIZE * (RANK + 1)), rtol=1e-6)


GRADIENTS = ["horovod", "exact"]  # RELAX_COLLECTIVE_GRADIENTS: Horovod's formulas (default) or exact


@pytest.mark.parametrize("gradients", GRADIENTS)
@pytest.mark.parametrize("mode", MODES)
def test_allgather_gradient_returns_this_ranks_rows(mode, gradients, monkeypatch):
    monkeypatch.setenv("RELAX_COLLECTIVE_GRADIENTS", gradients)
    x = tf.Variable(tf.ones([RANK + 1, 2]))

    def grad():
        with tf.GradientTape() as tape:
            gathered = hvd.allgather(x, name=f"grad.ag.{mode}")
            weights = tf.reshape(tf.range(tf.size(gathered), dtype=tf.float32), tf.shape(gathered))
            loss = tf.reduce_sum(gathered * weights)
        return tape.gradient(loss, x)

    g = run(mode, grad)
    offset = sum(r + 1 for r in range(RANK))
    expected = np.arange((offset) * 2, (offset + RANK + 1) * 2, dtype=np.float32).reshape(RANK + 1, 2)
    # every rank's gradient is the same here: Horovod averages them, exact sums them
    np.testing.assert_allclose(g.numpy(), expected * (SIZE if gradients == "exact" else 1))


@pytest.mark.parametrize("gradients", GRADIENTS)
@pytest.mark.parametrize("mode", MODES)
def test_broadcast_gradient_reaches_the_root_only(mode, gradients, monkeypatch):
    monkeypatch.setenv("RELAX_COLLECTIVE_GRADIENTS", gradients)
    x = tf.Variable(tf.fill([2], float(RANK + 1)))

    def grad():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(hvd.broadcast(x, 0, name=f"grad.bc.{mode}") * float(RANK + 1))
        return tape.gradient(loss, x)

    g = run(mode, grad)
    total = sum(r + 1 for r in range(SIZE)) / (1 if gradients == "exact" else SIZE)
    np.testing.assert_allclose(g.numpy(), np.full(2, total if RANK == 0 else 0.0))


def test_distributed_gradient_tape_averages():
    w = tf.Variable(tf.ones([2]))
    with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
        loss = tf.reduce_sum(w * float(RANK))
    (g,) = tape.gradient(loss, [w])
    np.testing.assert_allclose(g.numpy(), np.full(2, (SIZE - 1) / 2))


def test_partial_tape_keeps_local_layer_gradients():
    import keras
    shared, local = keras.layers.Dense(1, use_bias=False), keras.layers.Dense(1, use_bias=False)
    x = tf.fill([1, 1], float(RANK + 1))
    shared(x), local(x)
    with hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=local) as tape:
        loss = tf.reduce_sum(shared(x) + local(x))
    g_shared, g_local = tape.gradient(loss, [shared.kernel, local.kernel])
    np.testing.assert_allclose(g_shared.numpy(), [[(SIZE + 1) / 2]])
    np.testing.assert_allclose(g_local.numpy(), [[(RANK + 1) / SIZE]])


# ---- errors ----

def test_shape_mismatch_raises_on_every_rank_naming_the_tensor():
    with pytest.raises(tf.errors.FailedPreconditionError, match=r"\[MismatchError\].*mismatch\.shape"):
        hvd.allreduce(tf.ones([RANK + 1]), name="mismatch.shape")
    hvd.barrier()


def test_dtype_mismatch_raises_on_every_rank():
    dtype = tf.float32 if RANK == 0 else tf.float64
    with pytest.raises(tf.errors.FailedPreconditionError, match=r"\[MismatchError\].*mismatch\.dtype"):
        hvd.allreduce(tf.ones([2], dtype), name="mismatch.dtype")
    hvd.barrier()


def test_local_argument_errors():
    with pytest.raises(ValueError, match="allgather"):
        hvd.allgather(tf.constant(1.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Adasum reduction supports float16, float32 and float64"):
        hvd.allreduce(tf.ones([1], tf.int32), op=hvd.Adasum)
    with pytest.raises(TypeError, match="algorithm must be a relaxlib.algorithms.Algorithm"):
        hvd.DistributedGradientTape(tf.GradientTape(), algorithm=object())
    with pytest.raises(tf.errors.InvalidArgumentError, match="root"):
        hvd.broadcast(tf.ones([1]), root_rank=SIZE + 3, name="bad.root")


def test_elastic_state_syncs_from_rank_0_commits_and_restores():
    variables = [tf.Variable(np.full((2, 2), float(RANK + 1))), tf.Variable(np.zeros(2))]
    state = hvd.elastic.TensorFlowState(variables, batch=20 + RANK)
    state.sync()
    assert all(np.array_equal(v.numpy(), np.ones((2, 2))) for v in variables[:1]) and state.batch == 20
    variables[0].assign(np.full((2, 2), 5.0))
    state.batch = 21
    state.restore()
    np.testing.assert_array_equal(variables[0].numpy(), np.ones((2, 2)))
    assert state.batch == 20
    variables[1].assign([3.0, 4.0])
    state.commit()
    variables[1].assign([0.0, 0.0])
    state.restore()
    np.testing.assert_array_equal(variables[1].numpy(), [3.0, 4.0])


def test_tf1_graph_mode_broadcasts_run_in_the_session():
    """In a TF1 graph, broadcast_ returns the assigned values, broadcast_global_variables the op
    to run, and the object helpers evaluate through the session (as Horovod)."""
    with tf.Graph().as_default():
        var = tf.compat.v1.Variable(tf.fill([3], float(RANK)))
        other = tf.compat.v1.Variable(tf.fill([2], float(RANK)))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            (assigned,) = hvd.broadcast_([var], root_rank=SIZE - 1)
            np.testing.assert_array_equal(sess.run(assigned), np.full(3, SIZE - 1.0))
            np.testing.assert_array_equal(sess.run(var), np.full(3, SIZE - 1.0))
            sess.run(hvd.broadcast_global_variables(0))
            np.testing.assert_array_equal(sess.run(other), np.zeros(2))
            assert hvd.broadcast_object({"r": RANK}, root_rank=0, session=sess) == {"r": 0}
            assert hvd.allgather_object(RANK, session=sess) == list(range(SIZE))
    with pytest.raises(RuntimeError, match="eager"):
        hvd.broadcast_global_variables(0)


def test_indexed_slices_refuse_scale_factors_as_horovod():
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([RANK]), dense_shape=tf.constant([SIZE, 2]))
    with pytest.raises(NotImplementedError, match="prescale_factor and postscale_factor"):
        hvd.allreduce(slices, op=hvd.Sum, prescale_factor=2.0)
    summed = hvd.allreduce(slices, op=hvd.Sum)
    assert sorted(summed.indices.numpy().tolist()) == list(range(SIZE))


def test_a_rank_dependent_local_error_fails_every_rank():
    """One rank's kernel rejects its request (2-D alltoall splits) before submitting it; the
    others must fail naming that rank instead of waiting for it."""
    bad = RANK == SIZE - 1
    splits = tf.ones([SIZE, 1], tf.int64) if bad else tf.ones([SIZE], tf.int64)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        hvd.alltoall(tf.ones([SIZE, 2]), splits=splits, name="rejected.splits")
    if not bad:
        assert f"rank {SIZE - 1} rejected it locally" in str(info.value), str(info.value)
    # A dtype the op's type constraint refuses fails when TensorFlow builds the op, before any kernel.
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError)) as info:
        hvd.allreduce(tf.ones([2], tf.complex64 if bad else tf.float32), name="rejected.dtype")
    if not bad:
        assert f"rank {SIZE - 1} rejected it locally" in str(info.value), str(info.value)
    assert int(hvd.allreduce(tf.constant(1), op=hvd.Sum)) == SIZE
