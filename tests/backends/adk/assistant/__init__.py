from . import agent  # noqa: F401  (adk api_server loads the agent from the package)
