"""The HTTP and gRPC side of the gateway: the URL table, the JSON-RPC, HTTP+JSON and gRPC
bindings, SSE, agent cards, the admin API, the event feed, health and the request limits."""
