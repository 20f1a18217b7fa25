"""TensorFlow ops of the direct averaging primitives: neighbour averaging and partial all-reduce
over a group of ranks (mirrors ``relaxlib_torch``'s). Not negotiated: every participant must
issue the matching call (same name and size) in the same order, as deterministic schedules do.
They are TF ops, so they run eagerly and inside ``tf.function``."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from relaxlib import compression, direct
from relaxlib_tf import mpi_ops


def _vectors(name, ranks, weights) -> tuple[tf.Tensor, tf.Tensor]:
    """Ranks and weights as int32 / float64 vectors: Python sequences (checked here) or tensors
    (a plan decided per step inside a traced step; the kernel checks their lengths)."""
    if isinstance(ranks, tf.Tensor) or isinstance(weights, tf.Tensor):
        return tf.cast(ranks, tf.int32), tf.cast(weights, tf.float64)
    if len(ranks) != len(weights):
        raise ValueError(f"{name}: {len(ranks)} ranks but {len(weights)} weights")
    return tf.constant(list(ranks), tf.int32, shape=[len(ranks)]), tf.constant(list(weights), tf.float64,
                                                                              shape=[len(weights)])


def neighbor_average(tensor, peers: Sequence[int], weights: Sequence[float], self_weight: float, name: str,
                     codec: str | None = None, estimates: tuple[tf.Variable, tf.Variable] | None = None,
                     consensus_step: float = 1.0) -> tf.Tensor:
    """``self_weight * tensor + sum_k weights[k] * tensor@peers[k]`` over world ranks (float32 or
    float64), exchanged with the peers only. With ``codec`` the CHOCO variant: ``estimates`` are
    two float32 variables, this rank's estimate (``numel`` elements) and the peers' (``numel *
    len(peers)``, in ``peers`` order), updated by the call; ``consensus_step`` is CHOCO's gamma."""
    peer_ranks, peer_weights = _vectors(name, peers, weights)
    value = tf.convert_to_tensor(tensor)
    if codec is not None:
        if estimates is None:
            raise ValueError(f"{name}: a compressed neighbour average needs the estimate variables")
        own, theirs = estimates
    else:
        own = theirs = tf.zeros([0], tf.float32)
    output, new_own, new_theirs = mpi_ops._ops.relaxlib_neighbor_average(
        value, peer_ranks, peer_weights, tf.cast(self_weight, tf.float64), own, theirs,
        tf.convert_to_tensor(name, tf.string), codec=compression.codec_id(codec) if codec is not None else 0,
        consensus_step=float(consensus_step))
    if codec is not None:
        own.assign(new_own)
        theirs.assign(new_theirs)
    return output


def partial_allreduce(tensor, group: Sequence[int], name: str, weights: Sequence[float] | None = None) -> tf.Tensor:
    """The mean of ``tensor`` over the world ranks ``group`` (which must include this rank;
    ``weights`` per member for a weighted sum instead; a tensor ``group`` is taken as it is, so
    ascending). Other ranks are untouched. Runs on a cached sub-communicator of the group
    (``RELAX_GROUP_CACHE_SIZE`` groups are kept, default 64)."""
    if not isinstance(group, tf.Tensor):
        group, weights = direct.group_members_and_weights(name, group, weights)
    elif weights is None:
        weights = tf.fill(tf.shape(group), 1.0 / tf.cast(tf.size(group), tf.float64))
    ranks, values = _vectors(name, group, weights)
    return mpi_ops._ops.relaxlib_group_average(tf.convert_to_tensor(tensor), ranks, values,
                                               tf.convert_to_tensor(name, tf.string))
