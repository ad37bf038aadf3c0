"""Drive `pith mcp` over stdio with the official MCP Python SDK, as an agent's client would.

Usage: mcp_client.py PITH_BINARY WORKSPACE OUTSIDE_FILE

The workspace is prepared by the Rust test (crates/pith/tests/integration/mcp.rs): a `.git`
directory, src/db.rs (3 lines), src/pool.rs, a .gitignore'd target/ directory, and symlinks
`leak` (to OUTSIDE_FILE) and `up` (to OUTSIDE_FILE's directory) that lead out of it.

PITH_HOME holds a history the Rust test imported: the real Claude Code transcript (fix-calc), an
empty session and a session of one assistant message; the history tools find, delete, restore
and search it.

Every check raises on failure (exit status 1 with the reason); on success the last stdout line
is a JSON summary the Rust test asserts on.
"""

import asyncio
import json
import os
import re
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = [
    "forget_memory",
    "get_memory",
    "memory_delete",
    "memory_find_candidates",
    "memory_restore",
    "read_workspace_file",
    "save_memory",
    "search_history",
    "search_memory",
    "search_workspace",
    "tool_output",
    "verify_memory",
]

called = set()
checks = 0


def check(ok, what):
    global checks
    if not ok:
        raise AssertionError(what)
    checks += 1


async def call(session, name, args, error=False):
    result = await session.call_tool(name, args)
    text = "".join(c.text for c in result.content if c.type == "text")
    check(
        bool(result.is_error) == error,
        f"{name}({args}) is_error={result.is_error}, wanted {error}:\n{text}",
    )
    called.add(name)
    return text


def contains(text, needle, what):
    check(needle in text, f"{what}: {needle!r} not in:\n{text}")


async def files_and_refusals(session, ws, outside):
    text = await call(session, "read_workspace_file", {"path": "src/db.rs"})
    check(
        text == "1\tfn open() {}\n2\tfn busy_timeout() {}\n3\tfn close() {}\n",
        f"whole file read:\n{text}",
    )
    check(not os.path.exists(os.path.join(ws, ".pith")), "a read created .pith/")

    text = await call(
        session, "read_workspace_file", {"path": "src/db.rs", "start_line": 2, "end_line": 2}
    )
    check(
        text == "2\tfn busy_timeout() {}\n[src/db.rs: lines 2-2 of 3]\n",
        f"range read:\n{text}",
    )

    secret = open(outside).read()
    refusals = {
        "../" + os.path.basename(os.path.dirname(outside)): "`..` is not allowed",
        "src/../../x": "`..` is not allowed",
        outside: "outside the workspace",
        "leak": "symlink that leads outside",
        "up/" + os.path.basename(outside): "symlink that leads outside",
        "src/missing.rs": "does not exist",
    }
    for path, reason in refusals.items():
        text = await call(session, "read_workspace_file", {"path": path}, error=True)
        contains(text, reason, f"refusal of {path}")
        check(secret not in text, f"refusal of {path} leaked the file")


async def memory_tools(session, ws):
    # Reads on a workspace without memories answer plainly and create nothing.
    text = await call(session, "search_memory", {"query": "busy"})
    contains(text, "none saved in this workspace yet", "search_memory on an empty workspace")
    text = await call(session, "get_memory", {"id": "m-0000"}, error=True)
    contains(text, "no memory m-0000", "get_memory on an empty workspace")
    check(not os.path.exists(os.path.join(ws, ".pith")), "a memory read created .pith/")

    text = await call(
        session,
        "save_memory",
        {
            "kind": "fix",
            "title": "Retry on SQLITE_BUSY in the ledger writer",
            "body": "Set busy_timeout on every connection; WAL alone is not enough.",
            "tags": ["sqlite", "ledger"],
            "headline": "database is locked",
            "evidence": ["src/db.rs:2-3"],
        },
    )
    m = re.match(r"saved (m-[0-9a-f]{4,}) \(fix, fresh\): Retry on SQLITE_BUSY", text)
    check(m is not None, f"save_memory reply:\n{text}")
    fix = m.group(1)
    contains(text, "evidence hashed: src/db.rs:2-3", "save_memory evidence")

    text = await call(
        session,
        "save_memory",
        {
            "kind": "failed",
            "title": "A bigger connection pool did not help",
            "body": "Raising SIZE made the busy errors more frequent.",
            "evidence": ["src/pool.rs"],
        },
    )
    failed = re.match(r"saved (m-[0-9a-f]{4,}) \(failed, fresh\)", text).group(1)

    for bad, reason in [
        ({"evidence": ["../etc/passwd"]}, "`..` is not allowed"),
        ({"evidence": ["src/nope.rs"]}, "does not exist"),
        ({"evidence": ["src/db.rs:9-3"]}, "ends before it starts"),
        ({"title": "two\nlines"}, "title must be one line"),
    ]:
        args = {"kind": "note", "title": "bad", **bad}
        text = await call(session, "save_memory", args, error=True)
        contains(text, reason, f"save_memory refusal {bad}")

    text = await call(session, "search_memory", {"query": "busy sqlite"})
    contains(text, f"{fix} fix [fresh] Retry on SQLITE_BUSY", "search_memory hit")
    contains(text, "error: database is locked", "search_memory headline")
    check(text.index(fix) < text.index(failed), f"fix should rank first:\n{text}")

    text = await call(session, "search_memory", {"query": "busy", "limit": 1})
    contains(text, "1 of 2 memories", "search_memory limit")
    contains(text, "1 more: raise limit", "search_memory says what was withheld")

    text = await call(session, "search_memory", {"query": "busy", "kind": "failed"})
    check(failed in text and fix not in text, f"kind filter:\n{text}")

    text = await call(session, "get_memory", {"id": fix})
    contains(text, "status: fresh", "get_memory status")
    contains(text, "evidence: src/db.rs:2-3 (unchanged)", "get_memory evidence")
    contains(text, "WAL alone is not enough", "get_memory body")
    hits_before = int(re.search(r"(\d+) hits?", text).group(1))

    # A read of a cited file points at the memories (ids and titles, never bodies) ...
    text = await call(session, "read_workspace_file", {"path": "src/db.rs"})
    last = text.rstrip("\n").split("\n")[-1]
    check(
        last == f"pith: 1 memory on this file: {fix} fix: Retry on SQLITE_BUSY in the ledger "
        "writer; get_memory for details",
        f"pointer line: {last!r}",
    )
    check("WAL alone" not in text, "pointer leaked a body")
    # ... and pointers do not move hit counters: the next get is exactly one more.
    text = await call(session, "get_memory", {"id": fix})
    hits_after = int(re.search(r"(\d+) hits?", text).group(1))
    check(hits_after == hits_before + 1, f"hits {hits_before} -> {hits_after}")

    text = await call(session, "get_memory", {"id": "m-0000"}, error=True)
    contains(text, "no memory m-0000; search_memory finds ids", "unknown id")

    # Staleness: verify, edit the cited lines, delete the other evidence file.
    text = await call(session, "verify_memory", {"id": fix})
    contains(text, f"{fix} Retry on SQLITE_BUSY in the ledger writer: fresh", "first verify")
    with open(os.path.join(ws, "src/db.rs"), "w") as f:
        f.write("fn open() {}\nfn retry_busy() {}\nfn close() {}\n")
    text = await call(session, "verify_memory", {"id": fix})
    contains(text, "stale: src/db.rs:2-3 changed (was fresh)", "verify after edit")
    contains(text, "verify_memory with accept=true", "verify says how to accept")
    os.remove(os.path.join(ws, "src/pool.rs"))
    text = await call(session, "verify_memory", {"id": failed})
    contains(text, "stale: src/pool.rs gone", "verify after delete")
    text = await call(session, "get_memory", {"id": failed})
    contains(text, "status: stale: src/pool.rs gone", "get_memory after delete")
    text = await call(session, "verify_memory", {"id": fix, "accept": True})
    contains(text, "evidence re-recorded, now fresh", "verify accept")

    text = await call(session, "forget_memory", {"id": failed})
    contains(text, "moved to the trash", "forget_memory")
    contains(text, f"`pith memory restore {failed}`", "forget_memory restore hint")
    text = await call(session, "get_memory", {"id": failed}, error=True)
    contains(text, "is in the trash", "get of a trashed memory")
    text = await call(session, "search_memory", {"query": "pool busy"})
    check(failed not in text, f"trashed memory still found:\n{text}")
    return fix


async def workspace_search(session):
    text = await call(session, "search_workspace", {"pattern": "fn close"})
    contains(text, "src/db.rs:3:", "search_workspace hit")
    check("target/" not in text, f"search_workspace ignored .gitignore:\n{text}")
    text = await call(session, "search_workspace", {"pattern": "(unclosed"}, error=True)
    check(text.strip() != "", "search_workspace bad regex says why")


async def history_tools(session):
    """Find, delete (only with the token, only what still matches), restore, search."""
    found = json.loads(
        await call(session, "search_history", {"query": "calc subtracted"})
    )
    check(found["hits"], f"search_history found nothing: {found}")
    calc = found["hits"][0]
    contains(calc["snippet"], "subtracted", "search snippet")

    # Imported sessions keep no whole outputs (only the proxy does, when it shortens them).
    text = await call(session, "tool_output", {"callId": "toolu_01"}, error=True)
    contains(text, "Run the call again", "a call with no kept output says what to do")

    await call(
        session,
        "memory_find_candidates",
        {"accountId": "someone-else", "filter": "empty"},
        error=True,
    )
    text = await call(
        session,
        "memory_find_candidates",
        {"accountId": "local", "filter": "no-real-user-input"},
        error=True,
    )
    contains(text, "empty, single-assistant", "unknown filter names the known ones")

    dry = json.loads(
        await call(
            session,
            "memory_find_candidates",
            {"accountId": "local", "filter": "empty", "dryRun": True},
        )
    )
    check(dry["dryRun"] is True and dry["matched"] == 1, f"dry run: {dry}")
    text = await call(
        session, "memory_delete", {"filterToken": dry["filterToken"]}, error=True
    )
    contains(text, "dry run", "a dry-run token is refused")

    empty = json.loads(
        await call(
            session, "memory_find_candidates", {"accountId": "local", "filter": "empty"}
        )
    )
    check(empty["matched"] == 1 and empty["sampled"] == 1, f"empty: {empty}")
    item = empty["items"][0]
    check(
        set(item)
        == {
            "id",
            "sessionId",
            "assistantMsgCount",
            "realUserMsgCount",
            "firstUserMsgPreview",
            "trashedAt",
        },
        f"candidate fields: {item}",
    )
    token = empty["filterToken"]
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    text = await call(session, "memory_delete", {"filterToken": tampered}, error=True)
    contains(text, "nothing was deleted", "a tampered token")
    # ids may narrow the token's set, never extend it: the transcript's id is refused.
    narrowed = json.loads(
        await call(
            session, "memory_delete", {"filterToken": token, "ids": [calc["id"]]}
        )
    )
    check(narrowed["trashed"] == [], f"an id outside the token was trashed: {narrowed}")
    check(narrowed["skipped"][0]["id"] == calc["id"], f"skipped: {narrowed}")
    deleted = json.loads(await call(session, "memory_delete", {"filterToken": token}))
    check(deleted["trashed"] == [item["id"]], f"delete: {deleted}")
    again = json.loads(
        await call(
            session, "memory_find_candidates", {"accountId": "local", "filter": "empty"}
        )
    )
    check(again["matched"] == 0, f"trashed conversation still a candidate: {again}")

    single = json.loads(
        await call(
            session,
            "memory_find_candidates",
            {"accountId": "local", "filter": "single-assistant", "agentType": "public"},
        )
    )
    check(single["matched"] == 1, f"single-assistant: {single}")
    check(single["items"][0]["assistantMsgCount"] == 1, f"single: {single}")

    restored = json.loads(
        await call(session, "memory_restore", {"ids": [item["id"]]})
    )
    check(restored["restored"] == [item["id"]], f"restore: {restored}")
    return {"transcript": calc["id"], "empty": item["id"]}


async def main(pith, ws, outside):
    params = StdioServerParameters(
        command=pith,
        args=["mcp", "--workspace", ws],
        cwd=ws,
        env={"PITH_LOG": "debug", "PITH_HOME": os.environ["PITH_HOME"]},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.server_info.name == "pith", f"server name {init.server_info}")
            check(bool(init.instructions), "server instructions")

            listed = await session.list_tools()
            names = sorted(t.name for t in listed.tools)
            check(names == TOOLS, f"tools/list: {names}")
            for t in listed.tools:
                check(
                    t.description and len(t.description) <= 90,
                    f"{t.name} description is missing or long: {t.description!r}",
                )
            await files_and_refusals(session, ws, outside)
            await memory_tools(session, ws)
            await workspace_search(session)
            history = await history_tools(session)

            try:
                await session.call_tool("no_such_tool", {})
                unknown_tool_rejected = False
            except Exception:  # the SDK raises the JSON-RPC error
                unknown_tool_rejected = True
            if not unknown_tool_rejected:
                result = await session.call_tool("no_such_tool", {})
                unknown_tool_rejected = bool(result.is_error)
            check(unknown_tool_rejected, "unknown tool accepted")

    missing = sorted(set(TOOLS) - called)
    check(not missing, f"tools never called: {missing}")
    print(
        json.dumps(
            {
                "ok": True,
                "tools_called": sorted(called),
                "checks": checks,
                "history": history,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
