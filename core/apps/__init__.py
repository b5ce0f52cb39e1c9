"""Applications: the `elmo` command line, `embed_file` (resumable embedding of a text file to
hdf5), the probe, and biLM pretraining (`training`). Top layer: may import every other
layer; nothing of `elmo_core` imports it.
"""
