"""The MCP server (`dream mcp`): the host's memory tools for agents, one scope per caller."""
