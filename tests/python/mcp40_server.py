"""An MCP server with 40 tools over stdio, shaped like the one the mcp40 captures were made
with: `jira_op_0` .. `jira_op_39`, each a long description and a two-argument schema, about
800 bytes of tool JSON apiece, so a client that lists them sends a tool list deferral exists
for. Each tool answers one line naming itself and its query."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("demo")


def make(i: int) -> None:
    def jira_op(query: str, limit: int = 10) -> str:
        return f"jira_op_{i}: no issue matches {query!r} (limit {limit})"

    description = (
        f"Jira operation number {i}: searches issues, projects, boards and sprints in the "
        "Jira instance. "
    ) * 5
    server.add_tool(jira_op, name=f"jira_op_{i}", description=description)


for i in range(40):
    make(i)

if __name__ == "__main__":
    server.run("stdio")
