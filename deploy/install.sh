#!/bin/sh
# Installs the gateway from the source tree in the working directory into a new virtual
# environment at $1, with the store drivers, uvloop and the MCP SDK. The image's build stage runs it;
# tests/deploy/test_image_recipe.py runs it the same way outside a container. Modules are
# compiled here: the image runs with PYTHONDONTWRITEBYTECODE, so without them every start (a
# Lambda cold start, a new replica) would compile each one again (about a second of CPU).
set -eu
venv="$1"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check \
    ".[postgres,dynamodb,redis,speed,mcp]"
