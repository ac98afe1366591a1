"""toolgate: call the tools of a toolgate fleet from Python agents.

    import asyncio, toolgate

    async def main():
        client = await toolgate.Client.connect("nats://127.0.0.1:4222", creds="agent-7.creds")
        r = await client.call("read", {"path": "README.md"}, timeout=30)
        print(r.status, r.decision.action, r.output)
        await client.close()

    asyncio.run(main())

Every result is verified (pkg/eventsig's format: an ed25519 signature by a
worker whose user JWT the install's account issued, and the result of the
very call waited for) and refused when it does not verify.
"""

from ._nats import AuthError, NATSError, NoResponders
from ._verify import Refused, Verifier
from .client import (
    Action,
    Call,
    CancelReply,
    Client,
    Credentials,
    CredentialsError,
    Decision,
    ListingRefused,
    NoResult,
    Progress,
    Result,
    Status,
    ToolgateError,
    new_call_id,
)
from .sync import SyncClient

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AuthError",
    "Call",
    "CancelReply",
    "Client",
    "Credentials",
    "CredentialsError",
    "Decision",
    "ListingRefused",
    "NATSError",
    "NoResponders",
    "NoResult",
    "Progress",
    "Refused",
    "Result",
    "Status",
    "SyncClient",
    "ToolgateError",
    "Verifier",
    "new_call_id",
]
