"""Send one request through a pith gateway with an official SDK, naming an account key (or not),
and say what the SDK made of the answer.

Usage:
    python account_key.py --base-url http://127.0.0.1:PORT --sdk anthropic|openai [--key KEY]

`--base-url` has no `/v1`. With `--key`, the SDK sends it in the `pith-account-key` header
(`default_headers`, as a developer would configure it). The SDKs' retries are off. Output: one
JSON object on stdout, `{"text": ...}` when the request was answered, else
`{"error": {"class", "status", "type", "message"}}` as the SDK parsed pith's refusal (class is
the SDK's exception class, e.g. AuthenticationError).
"""

import argparse
import json

import anthropic
import openai


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--sdk", choices=["anthropic", "openai"], required=True)
    parser.add_argument("--key")
    args = parser.parse_args()
    headers = {"pith-account-key": args.key} if args.key else {}
    try:
        if args.sdk == "anthropic":
            client = anthropic.Anthropic(
                base_url=args.base_url, api_key="sk-test", max_retries=0, default_headers=headers
            )
            message = client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=64,
                messages=[{"role": "user", "content": "Say hello."}],
            )
            out = {"text": "".join(b.text for b in message.content if b.type == "text")}
        else:
            client = openai.OpenAI(
                base_url=args.base_url + "/v1",
                api_key="sk-test",
                max_retries=0,
                default_headers=headers,
            )
            completion = client.chat.completions.create(
                model="gpt-5.4", messages=[{"role": "user", "content": "Say hello."}]
            )
            out = {"text": completion.choices[0].message.content or ""}
    except anthropic.APIStatusError as e:
        error = e.body.get("error", {}) if isinstance(e.body, dict) else {}
        out = {
            "error": {
                "class": type(e).__name__,
                "status": e.status_code,
                "type": error.get("type"),
                "message": error.get("message"),
            }
        }
    except openai.APIStatusError as e:
        out = {
            "error": {
                "class": type(e).__name__,
                "status": e.status_code,
                "type": e.type,
                "message": e.message,
            }
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
