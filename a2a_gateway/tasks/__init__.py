"""The A2A side of a task: the SDK request handler, the engine, one run, push, following."""
