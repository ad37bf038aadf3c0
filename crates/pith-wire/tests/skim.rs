//! The skim finds exactly the spans serde finds, reading forwards and from the end: on every
//! real capture, at every level, and on generated JSON written compactly and pretty.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test harness: a panic is the failure report"
)]

use std::collections::BTreeMap;

use pith_testkit::fixtures::captures;
use pith_wire::skim::{array_elements, members_rev, object_members};
use proptest::prelude::*;
use serde_json::value::RawValue;

fn offset(outer: &str, inner: &RawValue) -> std::ops::Range<usize> {
    let start = inner.get().as_ptr() as usize - outer.as_ptr() as usize;
    start..start + inner.get().len()
}

/// Compare the skim of `json` with serde's reading of it, recursively; returns how many
/// containers were compared.
fn same_as_serde(json: &str) -> usize {
    let trimmed = json.trim_start();
    let mut compared = 1;
    if trimmed.starts_with('{') {
        let serde: BTreeMap<String, &RawValue> = serde_json::from_str(json).unwrap();
        let members = object_members(json.as_bytes()).expect("skim reads the object");
        assert_eq!(members.len(), serde.len());
        let mut walk = members_rev(json.as_bytes());
        let mut backwards = Vec::new();
        while let Some(member) = walk.next() {
            // Arrays come with their elements, from the same pass.
            if let Some(elements) = walk.elements_of_last(&member) {
                let forwards = array_elements(&json.as_bytes()[member.value.clone()]).unwrap();
                let shifted: Vec<_> = forwards
                    .into_iter()
                    .map(|r| r.start + member.value.start..r.end + member.value.start)
                    .collect();
                assert_eq!(
                    elements,
                    shifted,
                    "elements of {:?}",
                    &json[member.key.clone()]
                );
            }
            backwards.push(member);
        }
        backwards.reverse();
        assert_eq!(backwards, members, "read from the end");
        for m in &members {
            let key: String =
                serde_json::from_str(&format!("\"{}\"", &json[m.key.clone()])).unwrap();
            let raw = serde[&key];
            assert_eq!(m.value, offset(json, raw), "value of {key}");
            compared += same_as_serde(raw.get());
        }
    } else if trimmed.starts_with('[') {
        let serde: Vec<&RawValue> = serde_json::from_str(json).unwrap();
        let elements = array_elements(json.as_bytes()).expect("skim reads the array");
        assert_eq!(elements.len(), serde.len());
        for (span, raw) in elements.iter().zip(&serde) {
            assert_eq!(*span, offset(json, raw));
            compared += same_as_serde(raw.get());
        }
    } else {
        compared = 0;
    }
    compared
}

#[test]
fn every_capture_skims_like_serde_at_every_level() {
    let captures = captures().unwrap();
    assert!(captures.len() >= 30, "{} captures", captures.len());
    for capture in &captures {
        let body = std::str::from_utf8(&capture.body).unwrap();
        let compared = same_as_serde(body);
        assert!(compared >= 3, "{}: {compared}", capture.id());
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        // Quotes, backslashes, brackets and non-ASCII inside strings.
        "[a-z\"\\\\{}\\[\\]:, é\u{1F600}\n]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z\"\\\\]{0,4}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn generated_json_skims_like_serde(value in json_value()) {
        same_as_serde(&serde_json::to_string(&value).unwrap());
        same_as_serde(&serde_json::to_string_pretty(&value).unwrap());
    }
}
