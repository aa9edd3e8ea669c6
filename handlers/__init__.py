"""The handlers the gateway ships, one per framework or backend (Hermes, OpenClaw, any
OpenAI-compatible chat backend, LangGraph, Agno, ADK, a remote A2A agent, the echo demo, the
TCK's scenarios) and the parts they share; the contract they implement is ``handlers.base``."""
