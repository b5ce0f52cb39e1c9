"""Files: bilm-tf hdf5, model folders, options, text, atomic writes, locks, plug-ins. Re-exports nothing."""

__all__: list[str] = []
