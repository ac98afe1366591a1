"""The fleet's tools as OpenAI Agents SDK function tools.

    from agents import Agent
    from toolgate.openai_agents import function_tools

    tools = await function_tools(client)        # the agent's listing, as FunctionTool
    agent = Agent(name="coder", tools=tools)

Each tool is the SDK's agents.FunctionTool when the SDK (openai-agents) is
installed, else a FunctionTool of this module with the same fields: name,
description, params_json_schema, on_invoke_tool(ctx, input_json) -> str,
strict_json_schema. Invoking it calls the tool through toolgate: the gate
judges it, and the model reads the output or why it did not run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

from ._adapt import output_text, parameters
from .client import Client


@dataclass
class FunctionTool:
    """The fields of the OpenAI Agents SDK's FunctionTool, for when the SDK
    is not installed."""

    name: str
    description: str
    params_json_schema: dict[str, Any]
    on_invoke_tool: Callable[[Any, str], Awaitable[str]]
    strict_json_schema: bool = False
    is_enabled: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def _sdk() -> Optional[Any]:
    try:
        import agents  # type: ignore[import]
    except ImportError:
        return None
    return agents


def tool_definitions(client: Client, listing: list[dict[str, Any]], *, timeout: Optional[float] = None) -> list[Any]:
    """FunctionTools for the tools of listing (Client.tools()), calling
    them through client."""
    sdk = _sdk()
    out = []
    for t in listing:
        name = t["name"]
        invoke = _invoker(client, name, timeout)
        fields = dict(
            name=name,
            description=t.get("description", ""),
            params_json_schema=parameters(t),
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )
        out.append(sdk.FunctionTool(**fields) if sdk is not None else FunctionTool(**fields))
    return out


def _invoker(client: Client, name: str, timeout: Optional[float]) -> Callable[[Any, str], Awaitable[str]]:
    """on_invoke_tool of tool name: the model's JSON arguments, called
    through toolgate."""

    async def invoke(ctx: Any, input_json: str) -> str:
        args = json.loads(input_json) if input_json else {}
        return output_text(await client.call(name, args, timeout=timeout))

    return invoke


async def function_tools(client: Client, *, timeout: Optional[float] = None) -> list[Any]:
    """The tools client's agent may call, as function tools."""
    return tool_definitions(client, await client.tools(), timeout=timeout)
