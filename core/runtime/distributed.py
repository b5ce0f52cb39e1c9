"""Joining a torchrun job (`torchrun --nproc-per-node N -m elmo_core COMMAND ...`) for pretraining and `elmo embed`."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..model.environment import environment_value


def init_distributed(device: str = "cpu") -> tuple[int, int, str]:
    """Join torchrun's process group: gloo on the CPU, nccl with `cuda:LOCAL_RANK` on GPUs.

    Returns:
        `(rank, world_size, device)`, `(0, 1, device)` outside torchrun.

    Raises:
        ElmoError: for a WORLD_SIZE or LOCAL_RANK that is not a whole number.
    """
    world_size: int = environment_value("WORLD_SIZE")
    if world_size == 1:
        return 0, 1, device
    if device.startswith("cuda"):
        device = f"cuda:{environment_value('LOCAL_RANK')}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return dist.get_rank(), dist.get_world_size(), device
