"""What the framework adapters share: a tool's JSON Schema and the text a
model reads back from a result."""

from __future__ import annotations

import json
from typing import Any

from .client import Result, Status


def parameters(tool: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a listed tool's arguments (an empty object schema
    when it names none)."""
    p = tool.get("parameters")
    if isinstance(p, str):
        p = json.loads(p)
    if not isinstance(p, dict) or not p:
        return {"type": "object", "properties": {}}
    return p


def output_text(r: Result) -> str:
    """What a model reads of a result: the output when the call ran, else
    the status with the policy's rule and reason, so the model can adapt."""
    if r.status == Status.OK:
        return r.output
    parts = [f"toolgate: call {r.status.value}"]
    if r.decision.rule:
        parts.append(f"rule {r.decision.rule}")
    if r.decision.reason:
        parts.append(r.decision.reason)
    if r.output:
        parts.append(r.output)
    return ": ".join(parts)
