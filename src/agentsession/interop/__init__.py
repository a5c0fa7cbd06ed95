"""Mappings between agentsession's events and the log formats of other agent runtimes.

Each submodule is a pure translation of single lines or records (no I/O): currently
:mod:`agentsession.interop.agentkit`, the JSONL line dialect of the Go package agentkit. The
core never imports this package.
"""
