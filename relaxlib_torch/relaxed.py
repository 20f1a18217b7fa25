"""PyTorch wrappers of the direct averaging primitives (relaxlib.direct): neighbour averaging and
partial all-reduce over a group of ranks. Not negotiated: every participant must issue the
matching call (same name and size) in the same order, as deterministic schedules do."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from relaxlib import direct


def _buffer(tensor: torch.Tensor) -> direct.Buffer:
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError("neighbour and group averages need contiguous CPU tensors")
    return direct.Buffer(tensor.data_ptr(), tensor.numel(), str(tensor.dtype).rsplit(".", 1)[-1])


def _output(src: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty_like(src)
    if out.shape != src.shape or out.dtype != src.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {src.dtype} tensor of shape {tuple(src.shape)}")
    return out


def neighbor_average_async(tensor: torch.Tensor, peers: Sequence[int], weights: Sequence[float], self_weight: float,
                           name: str, codec: str | None = None, estimates=None, consensus_step: float = 1.0,
                           out: torch.Tensor | None = None) -> direct.DirectHandle:
    """Starts ``self_weight * tensor + sum_k weights[k] * tensor@peers[k]`` (world ranks); ``wait()``
    on the handle returns the result, in ``out`` (reusing a buffer saves page faults on large
    tensors) or a new tensor of ``tensor``'s shape. With ``codec`` the CHOCO variant;
    ``estimates`` = (own estimate, peers' estimates) float32 tensors of ``numel`` and
    ``numel * len(peers)`` elements, updated in place."""
    src = tensor.detach().contiguous()
    out = _output(src, out)
    own, theirs = estimates if estimates is not None else (None, None)
    return direct.neighbor_average_async(
        _buffer(src), _buffer(out), name, list(peers), list(weights), self_weight, codec=codec,
        estimate_self=_buffer(own) if own is not None else None,
        estimate_peers=_buffer(theirs) if theirs is not None else None,
        consensus_step=consensus_step, keepalive=(src, out, own, theirs), result=out)


def neighbor_average(tensor: torch.Tensor, peers: Sequence[int], weights: Sequence[float], self_weight: float,
                     name: str, **kwargs) -> torch.Tensor:
    """Blocking ``neighbor_average_async``."""
    return neighbor_average_async(tensor, peers, weights, self_weight, name, **kwargs).wait()


def partial_allreduce_async(tensor: torch.Tensor, group: Sequence[int], name: str,
                            weights: Sequence[float] | None = None,
                            out: torch.Tensor | None = None) -> direct.DirectHandle:
    """Starts the mean of ``tensor`` over the world ranks ``group`` (which must include this rank;
    ``weights`` per member for a weighted sum instead) into ``out`` or a new tensor. Other ranks
    are untouched. Runs on a cached sub-communicator of the group (``RELAX_GROUP_CACHE_SIZE``
    groups are kept, default 64)."""
    members, weights = direct.group_members_and_weights(name, group, weights)
    src = tensor.detach().contiguous()
    out = _output(src, out)
    return direct.group_average_async(_buffer(src), _buffer(out), name, members, weights, keepalive=(src, out),
                                      result=out)


def partial_allreduce(tensor: torch.Tensor, group: Sequence[int], name: str,
                      weights: Sequence[float] | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Blocking ``partial_allreduce_async``."""
    return partial_allreduce_async(tensor, group, name, weights, out).wait()
