//! Server-sent events: an incremental decoder that accepts arbitrary chunk splits (mid-line,
//! mid-UTF-8 character, `\r\n` split across chunks) and yields whole events; and
//! [`EventSplitter`], which cuts a stream into each event's raw bytes, exactly as sent, for a
//! response rewriter that keeps, drops or replaces whole events.

/// One SSE event: the `event:` name (empty when absent) and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field; empty when the event has none.
    pub event: String,
    /// The `data:` lines, joined by `\n`.
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
    /// A decoder at the start of a stream.
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

/// Splits a stream into raw SSE events without decoding them, for rewriting a stream one event
/// at a time: each event comes out as the exact bytes that carried it, through the blank line
/// that ends it, so an event kept as it is reaches the client byte for byte. Holds at most one
/// incomplete event.
///
/// A `\r\n` split across chunks after an event's final `\r` starts the next event with `\n`
/// (nothing is lost or reordered; a rewriter parsing that event sees a leading blank line).
#[derive(Debug, Default)]
pub struct EventSplitter {
    buf: bytes::BytesMut,
    /// Bytes of `buf` already scanned for the end of the current event.
    scanned: usize,
    /// The last byte scanned ended a line (so the next terminator ends the event).
    at_line_start: bool,
    /// The last byte scanned was `\r`: a `\n` right after it belongs to the same terminator.
    pending_cr: bool,
}

impl EventSplitter {
    /// A splitter for a new stream (unlike `Default`, it starts at the start of a line).
    pub fn new() -> Self {
        EventSplitter {
            at_line_start: true,
            ..Self::default()
        }
    }

    /// Add the next chunk of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if the bytes pushed so far hold one.
    pub fn next_event(&mut self) -> Option<bytes::Bytes> {
        while self.scanned < self.buf.len() {
            let b = self.buf[self.scanned];
            self.scanned += 1;
            if std::mem::take(&mut self.pending_cr) && b == b'\n' {
                continue;
            }
            if b != b'\n' && b != b'\r' {
                self.at_line_start = false;
                continue;
            }
            if b == b'\r' {
                self.pending_cr = true;
            }
            if !self.at_line_start {
                self.at_line_start = true;
                continue;
            }
            // A blank line: the event ends here, with its `\r\n` when both bytes are here.
            if self.pending_cr && self.buf.get(self.scanned) == Some(&b'\n') {
                self.scanned += 1;
                self.pending_cr = false;
            }
            let event = self.buf.split_to(self.scanned).freeze();
            self.scanned = 0;
            return Some(event);
        }
        None
    }

    /// Bytes held of the event not complete yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Hand on the bytes held of an incomplete event, keeping where the scan is in its lines:
    /// the next complete event is then the rest of this one. (After [`EventSplitter::next_event`]
    /// returned `None`, every byte held has been scanned.)
    pub fn take_pending(&mut self) -> bytes::Bytes {
        self.scanned = 0;
        self.buf.split().freeze()
    }

    /// End of stream: whatever followed the last complete event (an event without its closing
    /// blank line), if anything.
    pub fn finish(&mut self) -> Option<bytes::Bytes> {
        self.scanned = 0;
        self.at_line_start = true;
        self.pending_cr = false;
        (!self.buf.is_empty()).then(|| self.buf.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_events(parts: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut splitter = EventSplitter::new();
        let mut out = Vec::new();
        for part in parts {
            splitter.push(part);
            while let Some(e) = splitter.next_event() {
                out.push(e.to_vec());
            }
        }
        out.extend(splitter.finish().map(|e| e.to_vec()));
        out
    }

    #[test]
    fn raw_events_are_the_exact_bytes_of_each_event_for_every_split() {
        let bytes = STREAM.as_bytes();
        let whole = raw_events(&[bytes]);
        let raw: Vec<&[u8]> = vec![
            b"event: message_start\ndata: {\"a\":1}\n\n",
            b": comment\nevent: ping\r\ndata: {\"type\":\"ping\"}\r\n\r\n",
            b"data: line1\ndata: line2\n\n",
            b"event: no_data\n\n",
            "data: é tail".as_bytes(),
        ];
        assert_eq!(whole, raw);
        // Each raw event decodes to what the decoder makes of it.
        let decoded: Vec<Event> = whole.iter().flat_map(|e| decode_all(e)).collect();
        assert_eq!(decoded, expected());
        for a in 0..bytes.len() {
            for b in a..bytes.len() {
                let got = raw_events(&[&bytes[..a], &bytes[a..b], &bytes[b..]]);
                assert_eq!(got.concat(), bytes, "bytes lost or reordered at {a},{b}");
                if !(bytes[..a].ends_with(b"\r") || bytes[..b].ends_with(b"\r")) {
                    assert_eq!(got, raw, "split at {a},{b}");
                }
            }
        }
    }

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
