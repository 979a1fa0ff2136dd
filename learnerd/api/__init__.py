"""HTTP surfaces: admin on the Unix socket, search and metrics over TCP, RPC ``inject_probe``, the
OpenAI-compatible endpoint, and the plumbing below their handlers. They reach the daemon only through
:class:`learnerd.api.surface.ControlSurface`."""
