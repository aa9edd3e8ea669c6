"""What the Python client scripts share: a run of one client, told to the test as JSON lines
(one ``{"event": ...}`` per event, then ``{"end": true}`` or ``{"error": "<type>: <message>"}``).
Imported by the scripts beside it, each run by its own SDK's venv."""

import asyncio
import json
import sys


def emit(**line):
    print(json.dumps(line), flush=True)


def dump(model):
    """A pydantic model of the SDK as its wire JSON."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def card_path(args):
    """The resolver's card path: the SDK's default unless the test gives one."""
    return {"agent_card_path": args["card_path"]} if "card_path" in args else {}


def main(run):
    """Run ``run(args)`` on the JSON arguments of the command line, and say how it ended."""
    args = json.loads(sys.argv[1])
    try:
        asyncio.run(run(args))
    except Exception as exc:  # reported to the test, which names the failure
        emit(error=f"{type(exc).__name__}: {exc}")
    else:
        emit(end=True)
