"""Adapters for Ray Data (`ray_data`) and Spark (`spark`), thin wrappers of `LineEmbedder`.

The engine owns scheduling, retries and I/O. Extras `elmo-bilm[ray]` or `elmo-bilm[spark]`.
"""

__all__: list[str] = []
