"""Drive an upstream (pith's mock, or pith's proxy in front of it) with the official SDKs.

Usage:
    python sdk_clients.py --base-url http://127.0.0.1:PORT [--api-key KEY] [--calls a,b,...]
                          [--prompt TEXT] [--more-tools N]

`--base-url` has no `/v1`: the Anthropic client gets it as is, the OpenAI client gets
`<base-url>/v1`. The SDKs' retries are off (max_retries=0), so each call sends exactly one
request, in this fixed order (a server scripting FIFO replies queues them in this order):

    anthropic.messages.create            non-streamed, one user message
    anthropic.messages.stream            messages.stream(), read to the end
    anthropic.messages.create.tool       non-streamed, with one tool defined
    anthropic.messages.stream.tool       streamed, with one tool defined
    anthropic.messages.count_tokens      count_tokens
    openai.chat.create                   chat.completions.create, non-streamed
    openai.chat.stream                   stream=True, stream_options.include_usage=True
    openai.chat.stream.tool              same, with one tool defined
    openai.responses.create              responses.create, non-streamed
    openai.responses.stream              responses.create(stream=True)
    openai.responses.stream.tool         same, with one tool defined
    openai.responses.input_tokens        responses.input_tokens.count

`--calls` runs a subset (same relative order). `--prompt` replaces the user message (default
"Say hello."), e.g. with a pin command that pith answers itself. `--more-tools N` adds N
tools with long descriptions beside `read_file` to the Anthropic `.tool` calls (enough for
pith to defer them). Output: one JSON object on stdout mapping each
call name to what the SDK parsed (keys in call order):

    anthropic.messages.*      {"text", "stop_reason",
                               "usage": {"input_tokens", "output_tokens",
                                         "cache_creation_input_tokens", "cache_read_input_tokens"},
                               "tool_calls": [{"id", "name", "input"}],
                               "block_types": [content block types, in order]}
                              streamed ones add "events": {event type: count} as the SDK's
                              MessageStream yielded them (it drops `ping`, and adds its own
                              "text" / "input_json" events)
    anthropic.messages.count_tokens  {"input_tokens"}
    openai.responses.input_tokens    {"object", "input_tokens"}
    openai.chat.*             {"text", "finish_reason",
                               "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
                                         "cached_tokens", "cache_write_tokens"} or null,
                               "tool_calls": [{"id", "name", "arguments"}]}
                              streamed ones add "chunks" (count) and "usage_chunks" (chunks
                              with a non-null usage)
    openai.responses.*        {"text", "status",
                               "usage": {"input_tokens", "output_tokens", "total_tokens",
                                         "cached_tokens", "cache_write_tokens"},
                               "tool_calls": [{"call_id", "name", "arguments"}]}
                              streamed ones: "text" is the concatenated output_text deltas,
                              "completed_text" the text of the response.completed event,
                              plus "events": {event type: count} and "sequence_ok" (the
                              sequence numbers ran 0, 1, 2, ... without a gap)

Tool "input"/"arguments" are reported parsed (an object), so fragment joins are checked.
Any SDK error ends the run with a traceback on stderr and a non-zero exit status.
"""

import argparse
import json
import os
import sys
from collections import Counter

import anthropic
import openai

MAX_TOKENS = 256
ANTHROPIC_MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-5.4"
PROMPT = "Say hello."

ANTHROPIC_TOOL = {
    "name": "read_file",
    "description": "Read a file from the workspace",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file from the workspace",
        "parameters": ANTHROPIC_TOOL["input_schema"],
    },
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file from the workspace",
    "parameters": ANTHROPIC_TOOL["input_schema"],
    "strict": False,
}


def anthropic_usage(usage):
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    }


def anthropic_result(message):
    return {
        "block_types": [block.type for block in message.content],
        "text": "".join(block.text for block in message.content if block.type == "text"),
        "stop_reason": message.stop_reason,
        "usage": anthropic_usage(message.usage),
        "tool_calls": [
            {"id": block.id, "name": block.name, "input": block.input}
            for block in message.content
            if block.type == "tool_use"
        ],
    }


def anthropic_create(client, tools):
    extra = {"tools": tools} if tools else {}
    message = client.messages.create(
        model=ANTHROPIC_MODEL,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": PROMPT}],
        **extra,
    )
    return anthropic_result(message)


def anthropic_stream(client, tools):
    extra = {"tools": tools} if tools else {}
    events = Counter()
    with client.messages.stream(
        model=ANTHROPIC_MODEL,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": PROMPT}],
        **extra,
    ) as stream:
        for event in stream:
            events[event.type] += 1
        message = stream.get_final_message()
    result = anthropic_result(message)
    result["events"] = dict(sorted(events.items()))
    return result


def anthropic_count_tokens(client):
    count = client.messages.count_tokens(
        model=ANTHROPIC_MODEL,
        messages=[{"role": "user", "content": PROMPT}],
    )
    return {"input_tokens": count.input_tokens}


def responses_input_tokens(client):
    count = client.responses.input_tokens.count(
        model=OPENAI_MODEL,
        input=[{"role": "user", "content": PROMPT}],
    )
    return {"object": count.object, "input_tokens": count.input_tokens}


def chat_usage(usage):
    if usage is None:
        return None
    details = usage.prompt_tokens_details
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": details.cached_tokens if details else None,
        "cache_write_tokens": details.cache_write_tokens if details else None,
    }


def chat_create(client):
    completion = client.chat.completions.create(
        model=OPENAI_MODEL,
        messages=[{"role": "user", "content": PROMPT}],
    )
    choice = completion.choices[0]
    return {
        "text": choice.message.content or "",
        "finish_reason": choice.finish_reason,
        "usage": chat_usage(completion.usage),
        "tool_calls": [
            {"id": call.id, "name": call.function.name, "arguments": json.loads(call.function.arguments)}
            for call in choice.message.tool_calls or []
        ],
    }


def chat_stream(client, tools):
    extra = {"tools": tools} if tools else {}
    stream = client.chat.completions.create(
        model=OPENAI_MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    text = []
    finish_reason = None
    usage = None
    chunks = 0
    usage_chunks = 0
    calls = {}
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage_chunks += 1
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            if choice.finish_reason:
                finish_reason = choice.finish_reason
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
                if call.id:
                    entry["id"] = call.id
                if call.function and call.function.name:
                    entry["name"] = call.function.name
                if call.function and call.function.arguments:
                    entry["arguments"] += call.function.arguments
    return {
        "text": "".join(text),
        "finish_reason": finish_reason,
        "usage": chat_usage(usage),
        "tool_calls": [
            {"id": c["id"], "name": c["name"], "arguments": json.loads(c["arguments"])}
            for _, c in sorted(calls.items())
        ],
        "chunks": chunks,
        "usage_chunks": usage_chunks,
    }


def responses_usage(usage):
    details = usage.input_tokens_details
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": details.cached_tokens,
        "cache_write_tokens": details.cache_write_tokens,
    }


def responses_calls(response):
    return [
        {"call_id": item.call_id, "name": item.name, "arguments": json.loads(item.arguments)}
        for item in response.output
        if item.type == "function_call"
    ]


def responses_create(client):
    response = client.responses.create(model=OPENAI_MODEL, input=PROMPT)
    return {
        "text": response.output_text,
        "status": response.status,
        "usage": responses_usage(response.usage),
        "tool_calls": responses_calls(response),
    }


def responses_stream(client, tools):
    extra = {"tools": tools} if tools else {}
    stream = client.responses.create(model=OPENAI_MODEL, input=PROMPT, stream=True, **extra)
    events = Counter()
    text = []
    sequence_ok = True
    completed = None
    for expected, event in enumerate(stream):
        events[event.type] += 1
        sequence_ok = sequence_ok and event.sequence_number == expected
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        if event.type == "response.completed":
            completed = event.response
    if completed is None:
        raise RuntimeError("stream ended without response.completed")
    return {
        "text": "".join(text),
        "completed_text": completed.output_text,
        "status": completed.status,
        "usage": responses_usage(completed.usage),
        "tool_calls": responses_calls(completed),
        "events": dict(sorted(events.items())),
        "sequence_ok": sequence_ok,
    }


def more_tools(n):
    return [
        {
            "name": f"ticket_op_{i}",
            "description": f"Operation {i} on the ticket tracker: " + "reads and updates fields. " * 40,
            "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}},
        }
        for i in range(n)
    ]


MORE_TOOLS = 0


def calls(anthropic_client, openai_client):
    a, o = anthropic_client, openai_client
    tools = [ANTHROPIC_TOOL] + more_tools(MORE_TOOLS)
    return [
        ("anthropic.messages.create", lambda: anthropic_create(a, None)),
        ("anthropic.messages.stream", lambda: anthropic_stream(a, None)),
        ("anthropic.messages.create.tool", lambda: anthropic_create(a, tools)),
        ("anthropic.messages.stream.tool", lambda: anthropic_stream(a, tools)),
        ("anthropic.messages.count_tokens", lambda: anthropic_count_tokens(a)),
        ("openai.chat.create", lambda: chat_create(o)),
        ("openai.chat.stream", lambda: chat_stream(o, None)),
        ("openai.chat.stream.tool", lambda: chat_stream(o, [CHAT_TOOL])),
        ("openai.responses.create", lambda: responses_create(o)),
        ("openai.responses.stream", lambda: responses_stream(o, None)),
        ("openai.responses.stream.tool", lambda: responses_stream(o, [RESPONSES_TOOL])),
        ("openai.responses.input_tokens", lambda: responses_input_tokens(o)),
    ]


def main():
    global PROMPT, MORE_TOOLS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="http://host:port, without /v1")
    parser.add_argument("--api-key", default="sk-test-pith")
    parser.add_argument("--calls", default="", help="comma-separated call names (default: all)")
    parser.add_argument("--prompt", default=PROMPT, help="the user message every call sends")
    parser.add_argument("--more-tools", type=int, default=0, help="extra tools for the .tool calls")
    args = parser.parse_args()
    PROMPT = args.prompt
    MORE_TOOLS = args.more_tools

    # Loopback only: a proxy configured in the environment must not see these requests.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(name, None)

    base = args.base_url.rstrip("/")
    anthropic_client = anthropic.Anthropic(
        base_url=base, api_key=args.api_key, max_retries=0, timeout=30.0
    )
    openai_client = openai.OpenAI(
        base_url=base + "/v1", api_key=args.api_key, max_retries=0, timeout=30.0
    )
    available = calls(anthropic_client, openai_client)
    wanted = [name for name in args.calls.split(",") if name]
    unknown = set(wanted) - {name for name, _ in available}
    if unknown:
        parser.error(f"unknown calls: {', '.join(sorted(unknown))}")

    results = {}
    for name, run in available:
        if not wanted or name in wanted:
            results[name] = run()
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
