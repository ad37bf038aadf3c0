//! The only crate that knows MCP: `pith mcp` over stdio with rmcp.
