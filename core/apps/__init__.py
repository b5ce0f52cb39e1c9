"""Applications: the `elmo` command, `embed_file`, the probe and biLM pretraining (`training`).

The top layer. It may import every other layer, and nothing of `elmo_core` imports it.
"""
