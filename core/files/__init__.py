"""Files: bilm-tf hdf5, model folders, options, text, atomic writes, locks, tokenizer plug-ins.
Re-exports nothing: users import `elmo_core`.
"""

__all__: list[str] = []
