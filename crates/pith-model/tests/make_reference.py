"""Writes reference.json: the reference tokenizer's ids and onnxruntime's embeddings for a few
texts, which tests/real_model.rs compares pith's tokenizer and encoder with.

Run with Python packages `tokenizers`, `onnxruntime` and `numpy`, from a model directory
that `pith model install minilm` wrote:
    python make_reference.py MODEL_DIR > reference.json
"""
import json
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

TEXTS = [
    "fn deadline_for(&self, request: &Request) -> Duration {",
    "where the proxy gives up waiting for the provider's response headers",
    "let headers = wait_for_response_headers(timeout);",
    "Café crème à la française: naïve résumé",
    "// TODO(pith): 日本語のコメント and emoji 🚀 here",
    "SELECT count(*) FROM requests WHERE session_id = ?1",
    "sessionId HTTPServer snake_case_name CONSTANT_VALUE",
    "x" * 300,
    " ".join(["token"] * 200),
    "tabs\tand\nnewlines\r\nand\u00a0nbsp",
    "",
    "$a + $b ^ ~c | d & e % f @ g # h",
]


def main():
    model_dir = sys.argv[1]
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.enable_truncation(max_length=128)
    tok.no_padding()
    session = ort.InferenceSession(f"{model_dir}/model.onnx", providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    out = []
    for text in TEXTS:
        enc = tok.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.ones_like(ids)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0][0]
        pooled = hidden.mean(axis=0)
        pooled = pooled / max(np.linalg.norm(pooled), 1e-12)
        out.append({"text": text, "ids": enc.ids, "embedding": [round(float(x), 6) for x in pooled]})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
