"""Actor runtime: actors wired by ZeroMQ, run under anyio."""
