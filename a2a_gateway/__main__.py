"""``python -m a2a_gateway``: the ``a2a-gateway`` command line (``a2a_gateway.cli``)."""

from a2a_gateway.cli import main

main()
