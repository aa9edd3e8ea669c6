"""a2a-gateway: one aiohttp server that puts agents built on any framework on an A2A network.

Each agent is an endpoint whose handler (``handlers``) translates A2A tasks into its
framework's native API; ``a2a_gateway.app`` builds the server, ``a2a_gateway.cli`` runs it.
"""
