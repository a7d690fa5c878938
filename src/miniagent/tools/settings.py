"""The MCP server's fault settings: labs make it slow or make it hang, on purpose (off by default).

Read from the same layers as every other setting (``agent.config.layered``); the client hands them to the
server it starts (``MCPClient(delay=..., hang_on=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServerFaults:
    fault_delay_s: float = 0.0  # every conjugate call waits this long before it answers
    fault_hang_on: str = ""  # a verb whose conjugate call never answers ("" = none)
