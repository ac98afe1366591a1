"""The fleet's tools as LangChain tools.

    from toolgate.langchain import structured_tools

    tools = await structured_tools(client)      # StructuredTool each
    llm_with_tools = llm.bind_tools(tools)

Each tool is langchain_core's StructuredTool when langchain-core is
installed (args_schema the tool's JSON Schema, a coroutine calling it
through toolgate), else a StructuredTool of this module offering the same
interface: name, description, args_schema, args, ainvoke, invoke,
coroutine.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

from ._adapt import output_text, parameters
from .client import Client


@dataclass
class StructuredTool:
    """A StructuredTool-compatible tool, for when langchain-core is not
    installed."""

    name: str
    description: str
    args_schema: dict[str, Any]
    coroutine: Callable[..., Awaitable[str]]

    @property
    def args(self) -> dict[str, Any]:
        """The schemas of the arguments, by name (BaseTool.args)."""
        return dict(self.args_schema.get("properties", {}))

    async def ainvoke(self, input: dict[str, Any], config: Any = None, **kw: Any) -> str:
        """Calls the tool with input, its arguments."""
        return await self.coroutine(**(input or {}))

    def invoke(self, input: dict[str, Any], config: Any = None, **kw: Any) -> str:
        """ainvoke, from code that is not in an event loop."""
        return asyncio.run(self.ainvoke(input))


def _core() -> Optional[Any]:
    try:
        from langchain_core.tools import StructuredTool as LCStructuredTool  # type: ignore[import]
    except ImportError:
        return None
    return LCStructuredTool


def tool_definitions(client: Client, listing: list[dict[str, Any]], *, timeout: Optional[float] = None) -> list[Any]:
    """StructuredTools for the tools of listing (Client.tools()), calling
    them through client."""
    lc = _core()
    out = []
    for t in listing:
        name = t["name"]
        run = _runner(client, name, timeout)
        schema = parameters(t)
        if lc is not None:
            out.append(lc.from_function(coroutine=run, name=name, description=t.get("description", "") or name, args_schema=schema))
        else:
            out.append(StructuredTool(name=name, description=t.get("description", ""), args_schema=schema, coroutine=run))
    return out


def _runner(client: Client, name: str, timeout: Optional[float]) -> Callable[..., Awaitable[str]]:
    """The coroutine calling tool name: every keyword is an argument of the
    tool (none can name another tool)."""

    async def run(**kwargs: Any) -> str:
        return output_text(await client.call(name, kwargs, timeout=timeout))

    return run


async def structured_tools(client: Client, *, timeout: Optional[float] = None) -> list[Any]:
    """The tools client's agent may call, as LangChain tools."""
    return tool_definitions(client, await client.tools(), timeout=timeout)
