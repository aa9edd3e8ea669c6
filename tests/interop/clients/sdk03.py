"""A client built on a2a-sdk 0.3.x (A2A 0.3, no ``A2A-Version`` header), run in that SDK's own
venv by tests/interop: prints what it saw as JSON lines (one ``{"event": ...}`` per
event, then ``{"end": true}`` or ``{"error": "<type>: <message>"}``).

    python sdk03.py '{"action": "stream", "base_url": "http://127.0.0.1:8080/<endpoint_id>",
                      "message": {<an A2A 0.3 Message>}}'
    python sdk03.py '{"action": "resubscribe", "base_url": ..., "task_id": "..."}'
    "card_path" (optional): the card's path below base_url, instead of the SDK's default
"""


import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, TaskIdParams
from json_lines import card_path, dump, emit, main


def events(item):
    """The wire event behind one item of the client's stream: a Message, or the update of a
    (task, update) pair; the pair of the stream's Task event has no update, the task is it."""
    if isinstance(item, tuple):
        task, update = item
        return dump(update if update is not None else task)
    return dump(item)


async def run(args):
    async with httpx.AsyncClient(timeout=30) as http:
        resolver = A2ACardResolver(http, args["base_url"], **card_path(args))
        card = await resolver.get_agent_card()
        config = ClientConfig(streaming=True, httpx_client=http,
                              supported_transports=[args.get("transport", "JSONRPC")])
        client = ClientFactory(config).create(card)
        if args["action"] == "stream":
            stream = client.send_message(Message.model_validate(args["message"]))
        else:
            stream = client.resubscribe(TaskIdParams(id=args["task_id"]))
        async for item in stream:
            emit(event=events(item))


if __name__ == "__main__":
    main(run)
