"""Files: bilm-tf weights (hdf5), model folders (safetensors + config.json), options files,
text files (compressed, standard input, UTF-8 checks), atomic writes, folder locks and the
raw-text tokenizer plug-ins. Imports the model and the runtime.

The names users need are in `elmo_core`; this package re-exports nothing.
"""

__all__: list[str] = []
