"""The AgentCore Runtime test app (.ci/services/55-agentcore.sh): a ``BedrockAgentCoreApp``
whose entrypoint streams the scripted LLM's answer, as a container deployed to AgentCore
Runtime would, served on ``127.0.0.1:$AGENTCORE_TEST_PORT``.

The payload is ``{"prompt": <text>}``. The app keeps the conversation of each runtime session
(the ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` header) in memory, as one runtime
session's microVM would, and sends it with each new prompt, so the scripted LLM's
``/_requests`` show a second turn with the first. Without a session header a prompt is alone.

* a prompt with ``AGENTCORE_JSON`` gets one JSON answer ``{"result": <text>}`` instead of
  server-sent events;
* a prompt with ``AGENTCORE_DICTS`` streams each chunk as ``{"data": <text>}`` (the shape of a
  Strands agent's text events) instead of a JSON string;
* an LLM error (``FAKE_HTTP_500``) raises in the entrypoint: the SDK ends the stream with its
  error event ``{"error", "error_type", "message"}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
from bedrock_agentcore.runtime import BedrockAgentCoreApp

LLM_URL = os.environ["AGENTCORE_TEST_LLM_URL"].rstrip("/") + "/v1/chat/completions"

app = BedrockAgentCoreApp()
conversations: dict[str, list[dict[str, str]]] = {}


async def llm_chunks(messages: list[dict[str, str]]) -> AsyncIterator[str]:
    """The text chunks of one streamed chat completion; an HTTP error raises."""
    body = {"model": "fake-model", "messages": messages, "stream": True}
    async with httpx.AsyncClient(timeout=60) as http, http.stream(
            "POST", LLM_URL, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            for choice in json.loads(line[5:])["choices"]:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text


async def answer(prompt: str, session_id: str | None) -> AsyncIterator[str]:
    """Stream the answer to ``prompt``; the session keeps the turn once it completed."""
    history = conversations.get(session_id, []) if session_id else []
    messages = [*history, {"role": "user", "content": prompt}]
    chunks: list[str] = []
    async for chunk in llm_chunks(messages):
        chunks.append(chunk)
        yield chunk
    if session_id:
        conversations[session_id] = [*messages, {"role": "assistant", "content": "".join(chunks)}]


async def as_dicts(chunks: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    async for chunk in chunks:
        yield {"data": chunk}


@app.entrypoint
async def invoke(payload: dict[str, Any], context: Any) -> Any:
    """JSON for ``AGENTCORE_JSON`` prompts, else a stream (SSE) of the answer's chunks."""
    prompt = str(payload.get("prompt", ""))
    chunks = answer(prompt, context.session_id)
    if "AGENTCORE_JSON" in prompt:
        return {"result": "".join([c async for c in chunks])}
    if "AGENTCORE_DICTS" in prompt:
        return as_dicts(chunks)
    return chunks


if __name__ == "__main__":
    app.run(port=int(os.environ["AGENTCORE_TEST_PORT"]), host="127.0.0.1")
