"""Framework-neutral descriptions of how workers communicate ("algorithms").

Pass one as ``algorithm=`` to ``relaxlib_torch.DistributedOptimizer``. ``None`` (or
:class:`AllReduce`) is the Horovod/DDP baseline: gradients averaged by all-reduce each step.
"""

from relaxlib.algorithms.async_average import AsyncModelAverage
from relaxlib.algorithms.averaging import ModelAveraging
from relaxlib.algorithms.base import Algorithm, AllReduce, ParamRef, TrainingContext
from relaxlib.algorithms.compressed import CompressedScatterReduce, OneBitAdam
from relaxlib.algorithms.dear import DeAR
from relaxlib.algorithms.decentralized import Decentralized
from relaxlib.algorithms.local_updates import DiLoCo, LocalSGD, OuterSGD
from relaxlib.algorithms.partial import PartialAllReduce
from relaxlib.algorithms.powersgd import PowerSGD
from relaxlib.algorithms.topk import TopK

__all__ = ["Algorithm", "AllReduce", "AsyncModelAverage", "CompressedScatterReduce", "DeAR", "DiLoCo", "Decentralized",
           "LocalSGD", "ModelAveraging", "OneBitAdam", "OuterSGD", "ParamRef", "PartialAllReduce", "PowerSGD", "TopK",
           "TrainingContext"]
