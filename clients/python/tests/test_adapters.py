"""The framework adapters' tool definitions: the documented shapes of the
OpenAI Agents SDK's FunctionTool and LangChain's StructuredTool, from a
real tool listing. The frameworks are outside programs; when one is not
installed, a stand-in module records what the adapter hands it, so the
lazy import path is tested too."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import types
import unittest
from typing import Any

import toolgate
from toolgate import langchain as tg_langchain
from toolgate import openai_agents as tg_openai

from fleet import Fleet


def check_schema(t: unittest.TestCase, schema: Any) -> None:
    t.assertIsInstance(schema, dict)
    t.assertEqual(schema.get("type"), "object")
    t.assertIsInstance(schema.get("properties", {}), dict)
    json.dumps(schema)


class AdaptersTest(unittest.IsolatedAsyncioTestCase):
    fleet: Fleet

    @classmethod
    def setUpClass(cls) -> None:
        cls.fleet = Fleet(approver=False)
        cls.creds = cls.fleet.creds("agent", "py-adapter")
        with open(os.path.join(cls.fleet.workspace, "notes.txt"), "w") as f:
            f.write("adapter notes\n")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.fleet.close()

    async def asyncSetUp(self) -> None:
        self.client = await toolgate.Client.connect(self.fleet.url, creds=self.creds)
        self.listing = await self.client.tools()

    async def asyncTearDown(self) -> None:
        await self.client.close()

    async def test_openai_agents_function_tools(self) -> None:
        tools = await tg_openai.function_tools(self.client)
        self.assertEqual([t.name for t in tools], [t["name"] for t in self.listing])
        for t in tools:
            self.assertIsInstance(t, tg_openai.FunctionTool)
            self.assertTrue(t.description, t.name)
            check_schema(self, t.params_json_schema)
            self.assertFalse(t.strict_json_schema)
        read = next(t for t in tools if t.name == "read")
        self.assertIn("path", read.params_json_schema["properties"])
        out = await read.on_invoke_tool(None, json.dumps({"path": "notes.txt"}))
        self.assertIn("adapter notes", out)
        bash = next(t for t in tools if t.name == "bash")
        denied = await bash.on_invoke_tool(None, json.dumps({"command": "sudo true"}))
        self.assertIn("denied", denied)
        self.assertIn("builtin.classify.forbidden", denied)

    async def test_openai_agents_sdk_present(self) -> None:
        made: list[dict[str, Any]] = []

        class SDKFunctionTool:
            def __init__(self, *, name: str, description: str, params_json_schema: dict, on_invoke_tool: Any, strict_json_schema: bool = True) -> None:
                made.append(dict(name=name, description=description, params_json_schema=params_json_schema, on_invoke_tool=on_invoke_tool))

        sys.modules["agents"] = types.SimpleNamespace(FunctionTool=SDKFunctionTool)  # type: ignore[assignment]
        try:
            tools = tg_openai.tool_definitions(self.client, self.listing)
        finally:
            del sys.modules["agents"]
        self.assertTrue(all(isinstance(t, SDKFunctionTool) for t in tools))
        self.assertEqual(len(made), len(self.listing))
        read = next(m for m in made if m["name"] == "read")
        self.assertIn("adapter notes", await read["on_invoke_tool"](None, '{"path":"notes.txt"}'))

    async def test_langchain_structured_tools(self) -> None:
        tools = await tg_langchain.structured_tools(self.client)
        self.assertEqual([t.name for t in tools], [t["name"] for t in self.listing])
        for t in tools:
            check_schema(self, t.args_schema)
            self.assertIsInstance(t.args, dict)
        read = next(t for t in tools if t.name == "read")
        self.assertIn("path", read.args)
        self.assertIn("adapter notes", await read.ainvoke({"path": "notes.txt"}))
        # A keyword is an argument of the tool, never the name of another.
        out = await read.ainvoke({"_name": "bash", "command": "cat notes.txt"})
        self.assertNotIn("adapter notes", out)
        self.assertIn("error", out)

    async def test_langchain_core_present(self) -> None:
        made: list[dict[str, Any]] = []

        class LCStructuredTool:
            @classmethod
            def from_function(cls, func: Any = None, name: str = "", description: str = "", args_schema: Any = None, coroutine: Any = None, **kw: Any) -> "LCStructuredTool":
                made.append(dict(name=name, description=description, args_schema=args_schema, coroutine=coroutine))
                return cls()

        tools_mod = types.ModuleType("langchain_core.tools")
        tools_mod.StructuredTool = LCStructuredTool  # type: ignore[attr-defined]
        core = types.ModuleType("langchain_core")
        core.tools = tools_mod  # type: ignore[attr-defined]
        sys.modules["langchain_core"], sys.modules["langchain_core.tools"] = core, tools_mod
        try:
            tools = tg_langchain.tool_definitions(self.client, self.listing)
        finally:
            del sys.modules["langchain_core"], sys.modules["langchain_core.tools"]
        self.assertTrue(all(isinstance(t, LCStructuredTool) for t in tools))
        read = next(m for m in made if m["name"] == "read")
        check_schema(self, read["args_schema"])
        self.assertIn("adapter notes", await read["coroutine"](path="notes.txt"))


if __name__ == "__main__":
    unittest.main()
