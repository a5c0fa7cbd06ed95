"""Drop-in session stores for agent frameworks, each behind its extra.

``agentsession.integrations.<framework>`` adapts one framework's session protocol to any
agentsession store; nothing here is imported by the core, and this package imports nothing.
"""
