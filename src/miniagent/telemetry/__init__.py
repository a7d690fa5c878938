"""OpenTelemetry traces of a run, for the trace viewers of the field (off by default).

``settings`` says whether a run is traced and where its spans go; ``spans`` makes them from the loop's own trace
events (the JSONL trace stays the one record of a run); ``export`` sets up the SDK in the agent and in the MCP
server, and is the only module that imports it.
"""
