"""Drives `tono-seal mcp` with the official Python MCP SDK, a client this
project did not write, and prints the session as JSON lines.

Usage: client.py TONO_SEAL TONO_LAUNCH USER OTHER_IDENTITY
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def wire(model):
    """A pydantic model as the JSON that went over the wire."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main():
    tono, launcher, user, other_identity = sys.argv[1:5]
    params = StdioServerParameters(
        command=tono,
        args=["--launcher", launcher, "mcp", "--user", user, "--secret", "api=API_KEY"],
        env={"PATH": "/usr/bin:/bin"},
    )
    log = []

    def step(name, **fields):
        log.append({"step": name, **fields})

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = wire(await session.initialize())
            step("initialize", protocolVersion=init.get("protocolVersion"),
                 serverInfo=init.get("serverInfo"))
            tools = wire(await session.list_tools())
            step("tools/list", tools=sorted(t["name"] for t in tools["tools"]))
            calls = [
                ("shell", {"command": "id -u; printf %s \"$API_KEY\" | sha256sum", "secrets": ["api"]}),
                ("read_file", {"path": other_identity}),
                ("http_get", {"url": "http://127.0.0.1/"}),
            ]
            for name, arguments in calls:
                result = wire(await session.call_tool(name, arguments))
                outcome = result.get("structuredContent") or {}
                step(
                    "tools/call " + name,
                    arguments=arguments,
                    isError=result.get("isError"),
                    text=[c.get("text") for c in result.get("content", [])],
                    verdict=outcome.get("verdict"),
                    reason=outcome.get("reason"),
                    uid=outcome.get("uid"),
                )
    for entry in log:
        print(json.dumps(entry))


asyncio.run(main())
