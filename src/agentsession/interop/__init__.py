"""Mappings between agentsession's events and the log formats of other agent runtimes.

:mod:`agentsession.interop.agentkit` translates single lines of the JSONL dialect of the Go
package agentkit (no I/O; the JSONL store reads and writes agentkit's logs through it),
:mod:`agentsession.interop.jsonl_layout` states what a layout of JSONL session files is (the
strategy the JSONL store is handed) and :mod:`agentsession.interop.agentkit_layout` is
agentkit's layout, and :mod:`agentsession.interop.importers` reads a whole agentkit sessions
directory or a lango database and imports it into a store (``agentsession import``). The core
never imports this package.
"""
