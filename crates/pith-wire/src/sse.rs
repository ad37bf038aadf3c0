//! Server-sent events: an incremental decoder that accepts arbitrary chunk splits (mid-line,
//! mid-UTF-8 character, `\r\n` split across chunks) and yields whole events.

/// One SSE event: the `event:` name (empty when absent) and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    pub event: String,
    pub data: String,
}

/// Incremental SSE decoder. Feed chunks with [`SseDecoder::feed`]; call
/// [`SseDecoder::finish`] at end of stream to flush an event not followed by a blank line.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a leading `\n` in the next chunk belongs to it.
    pending_cr: bool,
    current: Event,
    data_lines: usize,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decode `chunk`, calling `on_event` for every event it completes.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(Event)) {
        let mut rest = chunk;
        if self.pending_cr && !rest.is_empty() {
            self.pending_cr = false;
            if let Some(stripped) = rest.strip_prefix(b"\n") {
                rest = stripped;
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            let terminator = rest[pos];
            rest = &rest[pos + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.pending_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.line_done(&line) {
                on_event(event);
            }
        }
        self.line.extend_from_slice(rest);
    }

    /// End of stream: the last event, if it had data but no closing blank line.
    pub fn finish(&mut self) -> Option<Event> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            // A final line without terminator still counts as a field line.
            let _ = self.line_done(&line);
        }
        self.dispatch()
    }

    fn dispatch(&mut self) -> Option<Event> {
        let event = std::mem::take(&mut self.current);
        let had_data = std::mem::take(&mut self.data_lines) > 0;
        had_data.then_some(event)
    }

    fn line_done(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None; // comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => self.current.event = String::from_utf8_lossy(value).into_owned(),
            b"data" => {
                if self.data_lines > 0 {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(&String::from_utf8_lossy(value));
                self.data_lines += 1;
            }
            _ => {}
        }
        None
    }
}

/// Decode a whole SSE body at once.
pub fn decode_all(body: &[u8]) -> Vec<Event> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    decoder.feed(body, |e| events.push(e));
    events.extend(decoder.finish());
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "event: message_start\ndata: {\"a\":1}\n\n: comment\nevent: ping\r\ndata: {\"type\":\"ping\"}\r\n\r\ndata: line1\ndata: line2\n\nevent: no_data\n\ndata: é tail";

    fn expected() -> Vec<Event> {
        vec![
            Event {
                event: "message_start".into(),
                data: "{\"a\":1}".into(),
            },
            Event {
                event: "ping".into(),
                data: "{\"type\":\"ping\"}".into(),
            },
            Event {
                event: String::new(),
                data: "line1\nline2".into(),
            },
            Event {
                event: String::new(),
                data: "é tail".into(),
            },
        ]
    }

    #[test]
    fn whole_body() {
        assert_eq!(decode_all(STREAM.as_bytes()), expected());
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for a in 0..bytes.len() {
            for b in a..bytes.len() {
                let mut d = SseDecoder::new();
                let mut got = Vec::new();
                for part in [&bytes[..a], &bytes[a..b], &bytes[b..]] {
                    d.feed(part, |e| got.push(e));
                }
                got.extend(d.finish());
                assert_eq!(got, expected(), "split at {a},{b}");
            }
        }
    }
}
