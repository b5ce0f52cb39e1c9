"""Adapters for distributed engines: Ray Data (`ray_data`) and Spark (`spark`).

Each is a thin wrapper around `elmo_core.apps.lines.LineEmbedder`: the engine owns
scheduling, retries and I/O. They need the extras `elmo-bilm[ray]` or `elmo-bilm[spark]`,
and are imported only when used.
"""

__all__: list[str] = []
