"""A client built on a2a-sdk 0.2.x (A2A 0.2: the card at ``/.well-known/agent.json``), run in
that SDK's own venv by tests/interop: prints what it saw as JSON lines (one ``{"event": ...}`` per
event, then ``{"end": true}`` or ``{"error": "<type>: <message>"}``).

    python sdk02.py '{"action": "stream", "base_url": "http://127.0.0.1:8080/<endpoint_id>",
                      "message": {<an A2A 0.3 Message>}}'
    "card_path" (optional): the card's path below base_url, instead of the SDK's default
"""

import uuid

import httpx
from a2a.client import A2ACardResolver, A2AClient
from a2a.types import Message, MessageSendParams, SendStreamingMessageRequest
from json_lines import card_path, dump, emit, main


async def run(args):
    async with httpx.AsyncClient(timeout=30) as http:
        resolver = A2ACardResolver(http, args["base_url"], **card_path(args))
        card = await resolver.get_agent_card()
        client = A2AClient(http, agent_card=card)
        request = SendStreamingMessageRequest(
            id=str(uuid.uuid4()),
            params=MessageSendParams(message=Message.model_validate(args["message"])),
        )
        async for response in client.send_message_streaming(request):
            if getattr(response.root, "error", None) is not None:
                raise RuntimeError(f"JSON-RPC error {dump(response.root.error)}")
            emit(event=dump(response.root.result))


if __name__ == "__main__":
    main(run)
