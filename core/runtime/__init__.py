"""The runtime: how the model serves on this machine.

The parts a model is built with (`parts.py`), the thread rule (`threads.py`), the
layer-0 and feature caches (`token_cache.py`, `feature_cache.py`), batching by a token
budget (`batching.py`), windows over long inputs and the windowed inference loop
(`windows.py`), the embedding drivers (`embedding.py`: `embed_sentences`,
`iter_embeddings`), int8 quantization (`quantization.py`), memory release (`memory.py`),
the first-use lock (`first_use.py`) and `torch.distributed` setup (`distributed.py`).
Imports the model only.

The names users need are in `elmo_core`; this package re-exports nothing.
"""

__all__: list[str] = []
