"""Ranks from torchrun's environment, the device of this rank, and the process group.

torchrun (and SageMaker's torch_distributed launcher, which runs torchrun) sets RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK; a plain process has none of them and runs as rank 0 of 1
without a process group. Under torchrun the group is made even for one process, so that a one-GPU
run goes through the same DDP and NCCL code as a many-GPU one. The group gets a timeout so that a
collective waiting for a rank that hangs fails instead of waiting forever; a rank that dies is handled
by torchrun, which ends the others.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    launched_by_torchrun: bool = False

    @property
    def distributed(self) -> bool:
        return self.launched_by_torchrun or self.world_size > 1


def ranks_from_env(environ: Optional[Mapping[str, str]] = None) -> Ranks:
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    ranks = Ranks(
        rank=int(env.get("RANK", "0")),
        world_size=world,
        local_rank=int(env.get("LOCAL_RANK", "0")),
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
        node_rank=int(env.get("GROUP_RANK", "0")),
        launched_by_torchrun="RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env,
    )
    if not 0 <= ranks.rank < world or not 0 <= ranks.local_rank < ranks.local_world_size:
        raise ValueError(f"inconsistent torchrun environment: {ranks}")
    return ranks


def choose_device(requested: str, ranks: Ranks, num_gpus: Optional[int]) -> torch.device:
    """auto: this rank's GPU (cuda:LOCAL_RANK) when there is one (and SM_NUM_GPUS does not say 0), else the CPU."""
    if requested == "auto":
        use_cuda = torch.cuda.is_available() and num_gpus != 0
        requested = "cuda" if use_cuda else "cpu"
    device = torch.device(requested)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device {requested!r} asked for, but torch sees no CUDA GPU "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda})"
        )
    index = ranks.local_rank if device.index is None else device.index
    count = torch.cuda.device_count()
    if index >= count:
        raise RuntimeError(
            f"local rank {ranks.local_rank} needs GPU {index}, but this host has {count}: "
            "start at most one process per GPU (torchrun --nproc_per_node)"
        )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_process_group(ranks: Ranks, device: torch.device, timeout_s: float) -> Optional[str]:
    """Join the group torchrun set up (env:// rendezvous): nccl on GPUs, gloo on the CPU. None for a plain process."""
    if not ranks.distributed:
        return None
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return backend


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
