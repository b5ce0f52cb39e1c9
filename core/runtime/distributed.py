"""Joining a torchrun job: one process group for pretraining and for `elmo embed`.

Launch with `torchrun --nproc-per-node N [--nnodes M ...] -m elmo_core COMMAND ...`;
torchrun sets RANK, LOCAL_RANK and WORLD_SIZE for each process. Backend gloo on the
CPU, nccl on GPUs with one device per process (`cuda:LOCAL_RANK`).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_distributed(device: str = "cpu") -> tuple[int, int, str]:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1).

    Backend gloo for CPU, nccl for CUDA; each rank uses `cuda:LOCAL_RANK`.

    Returns:
        `(rank, world_size, device)`; `(0, 1, device)` outside torchrun.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return 0, 1, device
    if device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return dist.get_rank(), dist.get_world_size(), device
