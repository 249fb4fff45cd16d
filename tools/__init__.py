"""Maintainers' tools: the docs writers, the upstream checks, the GPU kit (entry points, like offline/)."""
