"""The runtime: how the model serves on this machine (threads, caches, batches, windows,
embedding, int8, memory). Imports the model only. Re-exports nothing: users import `elmo_core`.
"""

__all__: list[str] = []
