"""The runtime: how the model serves on this machine. Imports the model only. Re-exports nothing."""

__all__: list[str] = []
