"""The model: the paper's forward pass as torch modules (Peters et al. 2018, section 3).

Pure torch: imports nothing else of `elmo_core`, whose top level holds the public names.
"""

__all__: list[str] = []
