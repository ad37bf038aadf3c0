#!/usr/bin/env python3
"""Builds host recall's failure corpus by running the real tools: for each of 15 failures, the
output a fix would be recorded from, the same failure twice more (other values, another
directory, other timings), and two siblings (the same tool and file, another test, code,
file or kind). Every output is written to crates/pith-testkit/fixtures/recall/<case>/<variant>.txt,
which the recall tests read (the tools are not needed to run them).

Tools: cargo and rustc, gcc, node (its test runner), and, from the package registries,
pytest, mypy and ruff (PyPI), typescript and jest (npm). Point PITH_CORPUS_PYTHON at a Python
that has the first three and PITH_CORPUS_NODE_BIN at a node_modules/.bin with tsc and jest:

    python3 -m venv /tmp/corpus-venv && /tmp/corpus-venv/bin/pip install pytest mypy ruff
    (cd /tmp/corpus-npm && npm install typescript jest)
    PITH_CORPUS_PYTHON=/tmp/corpus-venv/bin/python PITH_CORPUS_NODE_BIN=/tmp/corpus-npm/node_modules/.bin \\
        scripts/eval/recall/make_corpus.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "crates/pith-testkit/fixtures/recall"
PY = os.environ.get("PITH_CORPUS_PYTHON", sys.executable)
NODE_BIN = Path(os.environ.get("PITH_CORPUS_NODE_BIN", "node_modules/.bin"))


def run(files, command, env=None):
    """Write `files` into a fresh directory, run `command` there; stdout and stderr."""
    work = Path(tempfile.mkdtemp(prefix="recall-"))
    try:
        for name, text in files.items():
            path = work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        done = subprocess.run(
            command,
            cwd=work,
            capture_output=True,
            text=True,
            env={**os.environ, "NO_COLOR": "1", "CARGO_TERM_COLOR": "never", **(env or {})},
            shell=isinstance(command, str),
        )
        text = done.stdout + done.stderr
        return text.replace(str(work), "/home/dev/" + work.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pytest(test, name="test_calc.py"):
    return run(
        {"calc.py": CALC_PY, name: test},
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    )


CALC_PY = "def add(a, b):\n    return a - b\n\ndef parse(s):\n    return {}[s]\n\ndef scale(x):\n    return x * '2'\n"


def cargo(lib, extra_files=None, test=False, clippy=False):
    files = {
        "Cargo.toml": '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n',
        "src/lib.rs": lib,
    }
    files.update(extra_files or {})
    command = ["cargo", "test" if test else "build", "-q", "--offline"]
    if clippy:
        command = ["cargo", "clippy", "-q", "--offline", "--", "-D", "warnings"]
    return run(files, command, env={"CARGO_TARGET_DIR": "/tmp/recall-corpus-target"})


def node_test(test):
    return run({"calc.js": "exports.add = (a, b) => a - b;\n", "calc.test.js": test},
               ["node", "--test", "calc.test.js"])


def jest(test):
    return run({"calc.js": "exports.add = (a, b) => a - b;\n", "calc.test.js": test,
                "package.json": '{"name": "c"}\n'},
               [str(NODE_BIN / "jest"), "--ci", "calc.test.js"])


def tsc(files):
    return run(files, [str(NODE_BIN / "tsc"), "--noEmit", "--strict", *sorted(files)])


def mypy(source):
    return run({"typed.py": source}, [PY, "-m", "mypy", "--no-incremental", "typed.py"])


def ruff(source):
    return run({"lint.py": source}, [PY, "-m", "ruff", "check", "--no-cache", "lint.py"])


def gcc(files):
    return run(files, ["gcc", "-c", *sorted(files)])


def test_fn(name, body):
    return f"from calc import add, parse, scale\n\ndef {name}():\n    {body}\n"


CASES = {
    "pytest_assert": {
        "recorded": lambda: pytest(test_fn("test_add", "assert add(2, 3) == 5")),
        "same-1": lambda: pytest(test_fn("test_add", "assert add(7, 2) == 9")),
        "same-2": lambda: pytest("import time\n" + test_fn("test_add", "time.sleep(0.05); assert add(10, 4) == 14")),
        "sibling-1": lambda: pytest(test_fn("test_add_zero", "assert add(0, 3) == 3")),
        "sibling-2": lambda: pytest(test_fn("test_add", "assert add(2, 3) == 5"), "test_more.py"),
    },
    "pytest_keyerror": {
        "recorded": lambda: pytest(test_fn("test_parse", "assert parse('name') == 1")),
        "same-1": lambda: pytest(test_fn("test_parse", "assert parse('title') == 2")),
        "same-2": lambda: pytest(test_fn("test_parse", "assert parse('id') is None")),
        "sibling-1": lambda: pytest(test_fn("test_parse_empty", "assert parse('') == 0")),
        "sibling-2": lambda: pytest(test_fn("test_parse", "assert add(1, 1) == 2")),
    },
    "pytest_scale": {
        "recorded": lambda: pytest(test_fn("test_scale", "assert scale(3) == 6")),
        "same-1": lambda: pytest(test_fn("test_scale", "assert scale(5) == 10")),
        "same-2": lambda: pytest(test_fn("test_scale", "assert scale(-1) == -2")),
        "sibling-1": lambda: pytest(test_fn("test_scale_big", "assert scale(10**6) == 2*10**6")),
        "sibling-2": lambda: pytest(test_fn("test_scale", "assert parse('x') == 6")),
    },
    "cargo_panic": {
        "recorded": lambda: cargo("pub fn add(a: i32, b: i32) -> i32 { a - b }\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(2, 3), 5); }\n}\n", test=True),
        "same-1": lambda: cargo("pub fn add(a: i32, b: i32) -> i32 { a - b }\n\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() { assert_eq!(super::add(7, 2), 9); }\n}\n", test=True),
        "same-2": lambda: cargo("pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(10, 4), 14);\n    }\n}\n", test=True),
        "sibling-1": lambda: cargo("pub fn add(a: i32, b: i32) -> i32 { a - b }\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds_zero() { assert_eq!(super::add(0, 3), 3); }\n}\n", test=True),
        "sibling-2": lambda: cargo("pub fn add(a: i32, b: i32) -> i32 { a - b }\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn subtracts() { assert_eq!(super::add(3, 3), 6); }\n}\n", test=True),
    },
    "cargo_e0308": {
        "recorded": lambda: cargo("mod parse;\n", {"src/parse.rs": "pub fn n() -> i32 { let s: String = 1; 2 }\n"}),
        "same-1": lambda: cargo("mod parse;\n", {"src/parse.rs": "\n\npub fn n() -> i32 { let s: String = 42; 2 }\n"}),
        "same-2": lambda: cargo("mod parse;\n", {"src/parse.rs": "pub fn n() -> i32 {\n    let t: String = 7;\n    2\n}\n"}),
        "sibling-1": lambda: cargo("mod parse;\n", {"src/parse.rs": "pub fn n() -> i32 { 2 }\n", "src/main.rs": "fn main() { let s: String = 1; }\n"}),
        "sibling-2": lambda: cargo("mod parse;\n", {"src/parse.rs": "pub fn n() -> i32 { let v = vec![1]; let w = v; v.len() as i32 }\n"}),
    },
    "cargo_e0425": {
        "recorded": lambda: cargo("pub fn f() -> i32 { total + 1 }\n"),
        "same-1": lambda: cargo("pub fn f() -> i32 {\n    total * 2\n}\n"),
        "same-2": lambda: cargo("\npub fn f() -> i32 { 3 - total }\n"),
        "sibling-1": lambda: cargo("pub fn f() -> i32 { count + 1 }\n"),
        "sibling-2": lambda: cargo("pub fn f() -> i32 { tota() + 1 }\n"),
    },
    "cargo_clippy": {
        "recorded": lambda: cargo("pub fn f(x: i32) -> i32 {\n    return x + 1;\n}\n", clippy=True),
        "same-1": lambda: cargo("\n\npub fn g(y: i32) -> i32 {\n    return y * 2;\n}\n", clippy=True),
        "same-2": lambda: cargo("pub fn h() -> u8 {\n    let v = 3;\n    return v;\n}\n", clippy=True),
        "sibling-1": lambda: cargo("mod util;\n", {"src/util.rs": "pub fn f(x: i32) -> i32 {\n    return x + 1;\n}\n"}, clippy=True),
        "sibling-2": lambda: cargo("pub fn f(x: &Vec<i32>) -> usize {\n    x.len()\n}\n", clippy=True),
    },
    "node_test": {
        "recorded": lambda: node_test("const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('./calc');\ntest('adds numbers', () => { assert.strictEqual(add(2, 3), 5); });\n"),
        "same-1": lambda: node_test("const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('./calc');\ntest('adds numbers', () => { assert.strictEqual(add(7, 2), 9); });\n"),
        "same-2": lambda: node_test("const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('./calc');\n\ntest('adds numbers', () => {\n  assert.strictEqual(add(10, 4), 14);\n});\n"),
        "sibling-1": lambda: node_test("const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('./calc');\ntest('adds negatives', () => { assert.strictEqual(add(-2, -3), -5); });\n"),
        "sibling-2": lambda: node_test("const test = require('node:test');\nconst assert = require('node:assert');\nconst { add } = require('./calc');\ntest('adds strings', () => { assert.deepStrictEqual({ s: add(1, 1) }, { s: 2 }); });\n"),
    },
    "jest": {
        "recorded": lambda: jest("const { add } = require('./calc');\ndescribe('add', () => { test('adds numbers', () => { expect(add(2, 3)).toBe(5); }); });\n"),
        "same-1": lambda: jest("const { add } = require('./calc');\ndescribe('add', () => { test('adds numbers', () => { expect(add(7, 2)).toBe(9); }); });\n"),
        "same-2": lambda: jest("const { add } = require('./calc');\n\ndescribe('add', () => {\n  test('adds numbers', () => {\n    expect(add(10, 4)).toBe(14);\n  });\n});\n"),
        "sibling-1": lambda: jest("const { add } = require('./calc');\ndescribe('add', () => { test('handles negatives', () => { expect(add(-2, -3)).toBe(-5); }); });\n"),
        "sibling-2": lambda: jest("const { add } = require('./calc');\ndescribe('sum', () => { test('adds numbers', () => { expect(add(2, 3)).toBe(5); }); });\n"),
    },
    "tsc_ts2322": {
        "recorded": lambda: tsc({"a.ts": "const n: number = 'one';\n"}),
        "same-1": lambda: tsc({"a.ts": "\n\nconst total: number = 'seven';\n"}),
        "same-2": lambda: tsc({"a.ts": "export const x = 1;\nconst n: number = \"two\";\n"}),
        "sibling-1": lambda: tsc({"b.ts": "const n: number = 'one';\n"}),
        "sibling-2": lambda: tsc({"a.ts": "const s: string = 1;\nexport {};\n"}),
    },
    "tsc_ts2304": {
        "recorded": lambda: tsc({"a.ts": "const n = foo + 1;\n"}),
        "same-1": lambda: tsc({"a.ts": "\nconst total = foo * 2;\n"}),
        "same-2": lambda: tsc({"a.ts": "export function f() { return foo; }\n"}),
        "sibling-1": lambda: tsc({"a.ts": "const n = bar + 1;\n"}),
        "sibling-2": lambda: tsc({"a.ts": "const n: Foo = 1;\n"}),
    },
    "mypy_return": {
        "recorded": lambda: mypy("def f() -> int:\n    return 'x'\n"),
        "same-1": lambda: mypy("\n\ndef f() -> int:\n    return 'value'\n"),
        "same-2": lambda: mypy("import os\n\ndef f() -> int:\n    return os.sep\n"),
        "sibling-1": lambda: mypy("def f(n: int) -> int:\n    return n\n\nf('x')\n"),
        "sibling-2": lambda: mypy("def f() -> str:\n    return 1\n"),
    },
    "ruff_f401": {
        "recorded": lambda: ruff("import os\n"),
        "same-1": lambda: ruff("\n\nimport os\n\nx = 1\n"),
        "same-2": lambda: ruff("import os\nimport sys\n\nprint(sys.argv)\n"),
        "sibling-1": lambda: ruff("import sys\n"),
        "sibling-2": lambda: ruff("def f():\n    x = 1\n"),
    },
    "gcc_undeclared": {
        "recorded": lambda: gcc({"calc.c": "int f(void) { return total + 1; }\n"}),
        "same-1": lambda: gcc({"calc.c": "\n\nint f(void) {\n    return total * 2;\n}\n"}),
        "same-2": lambda: gcc({"calc.c": "int g(int x) { return x; }\nint f(void) { return 3 - total; }\n"}),
        "sibling-1": lambda: gcc({"main.c": "int f(void) { return total + 1; }\n"}),
        "sibling-2": lambda: gcc({"calc.c": "int f(void) { return count + 1; }\n"}),
    },
    "gcc_semicolon": {
        "recorded": lambda: gcc({"calc.c": "int f(void) { int x = 1 return x; }\n"}),
        "same-1": lambda: gcc({"calc.c": "\nint f(void) {\n    int x = 2\n    return x;\n}\n"}),
        "same-2": lambda: gcc({"calc.c": "int f(void) { int y = 7 return y; }\n"}),
        "sibling-1": lambda: gcc({"parse.c": "int f(void) { int x = 1 return x; }\n"}),
        "sibling-2": lambda: gcc({"calc.c": "int f(void) { return (1; }\n"}),
    },
    "python_traceback": {
        "recorded": lambda: run({"app.py": "import json\nprint(json.loads(''))\n"}, [PY, "app.py"]),
        "same-1": lambda: run({"app.py": "import json\n\n\nprint(json.loads('  '))\n"}, [PY, "app.py"]),
        "same-2": lambda: run({"app.py": "import json\ndef load(s):\n    return json.loads(s)\nload('')\n"}, [PY, "app.py"]),
        "sibling-1": lambda: run({"app.py": "import json\nprint(json.loads('{'))\n"}, [PY, "app.py"]),
        "sibling-2": lambda: run({"app.py": "import json\nprint(json.load(None))\n"}, [PY, "app.py"]),
    },
}


def main():
    for case, variants in CASES.items():
        for variant, make in variants.items():
            text = make()
            path = OUT / case / f"{variant}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"{case}/{variant}: {len(text)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
