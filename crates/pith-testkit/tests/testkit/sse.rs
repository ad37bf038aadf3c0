//! A minimal SSE reader for checking fixture streams: events as (name, data) pairs.

use serde_json::Value;

#[derive(Debug)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

/// Parses a complete SSE body whose events are separated by blank lines.
pub fn parse(body: &[u8]) -> Vec<Event> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(text.ends_with("\n\n"), "a stream ends with a blank line");
    text.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push(value);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            Event {
                name,
                data: data.join("\n"),
            }
        })
        .collect()
}

pub fn names(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.name.as_deref().unwrap_or(""))
        .collect()
}
