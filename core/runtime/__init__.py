"""The inference runtime: how the model runs on this machine.

The recurrence paths and the thread rule (`Recurrence`, `attach_runtime`), the layer-0
and feature caches, batching by a token budget, the windowed inference loop, the
embedding drivers (`embed_sentences`, `iter_embeddings`), int8 quantization, bf16
autocast choice, memory release, the training products' bucketed shapes and
torch.distributed setup. Imports the model only.
"""

from __future__ import annotations

from .attach import attach_runtime, has_runtime, set_token_cache
from .batching import batches_by_token_budget
from .distributed import init_distributed
from .embedding import (
    DEFAULT_BATCH_TOKENS,
    LAYER_CHOICES,
    EmbedSettings,
    check_layers,
    check_model,
    embed_sentences,
    inference_step,
    iter_embeddings,
)
from .feature_cache import CacheStats, FeatureCache
from .first_use import first_use_lock
from .memory import (
    MMAP_THRESHOLD,
    release_free_memory,
    use_heap_for_every_block,
    use_mmap_for_large_blocks,
)
from .paired_bptt import paired_training_stacks
from .quantization import is_quantized, quantize_int8, quantize_linear_layers
from .recurrence import (
    RECURRENCES,
    CapturedRecurrence,
    Recurrence,
    bucket_shape,
    paired_stacks,
    resolve_recurrence,
    set_recurrence,
)
from .shapes import KERNEL_CACHE_CAPACITY, bucket_rows, pad_rows, reserve_kernel_cache
from .threads import (
    SIDE_BY_SIDE_MIN_WEIGHTS,
    ThreadPolicy,
    choose_threads,
    directions_side_by_side,
    forward_threads,
    other_load,
    run_side_by_side,
    set_thread_policy,
    thread_policy,
    usable_cpus,
    watch_forks,
)
from .token_cache import DEFAULT_TOKEN_CACHE_WORDS, TokenCache, float64_sum, parameter_fingerprint
from .windows import RunBatch, run_in_windows

__all__ = [
    "attach_runtime",
    "batches_by_token_budget",
    "bucket_rows",
    "bucket_shape",
    "CacheStats",
    "CapturedRecurrence",
    "check_layers",
    "choose_threads",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_TOKEN_CACHE_WORDS",
    "directions_side_by_side",
    "EmbedSettings",
    "check_model",
    "embed_sentences",
    "FeatureCache",
    "first_use_lock",
    "float64_sum",
    "forward_threads",
    "has_runtime",
    "inference_step",
    "init_distributed",
    "is_quantized",
    "iter_embeddings",
    "KERNEL_CACHE_CAPACITY",
    "LAYER_CHOICES",
    "MMAP_THRESHOLD",
    "other_load",
    "pad_rows",
    "paired_stacks",
    "paired_training_stacks",
    "parameter_fingerprint",
    "quantize_int8",
    "quantize_linear_layers",
    "Recurrence",
    "RECURRENCES",
    "release_free_memory",
    "reserve_kernel_cache",
    "resolve_recurrence",
    "run_in_windows",
    "run_side_by_side",
    "RunBatch",
    "set_recurrence",
    "set_thread_policy",
    "set_token_cache",
    "SIDE_BY_SIDE_MIN_WEIGHTS",
    "thread_policy",
    "ThreadPolicy",
    "TokenCache",
    "usable_cpus",
    "watch_forks",
    "use_heap_for_every_block",
    "use_mmap_for_large_blocks",
]
