//! Reads a request's `stream` and `stream_options.include_usage` flags without parsing it.
//!
//! The mock picks its default reply from these two booleans on every unscripted request, and
//! it is the baseline of the proxy latency benchmark. Deserializing a 65 KB agent request with
//! serde_json just to find them takes 20-90 µs here (as much as a whole loopback round trip);
//! walking the structure and jumping from quote to quote with memchr takes about half that.

/// The two flags, or `None` when the body is not a structurally well-formed JSON object
/// (unbalanced brackets, an unterminated string, trailing bytes). Values are not validated
/// beyond that; a flag that is anything but `true` counts as false.
pub(crate) fn stream_flags(body: &[u8]) -> Option<StreamFlags> {
    let mut scanner = Scanner {
        bytes: body,
        pos: 0,
    };
    let mut flags = StreamFlags::default();
    scanner.object(|key, scanner| match key {
        b"stream" => {
            flags.stream = scanner.bool_value()?;
            Some(())
        }
        b"stream_options" if scanner.peek() == Some(b'{') => scanner.object(|key, scanner| {
            if key == b"include_usage" {
                flags.include_usage = scanner.bool_value()?;
                Some(())
            } else {
                scanner.skip_value()
            }
        }),
        _ => scanner.skip_value(),
    })?;
    scanner.skip_whitespace();
    (scanner.pos == body.len()).then_some(flags)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StreamFlags {
    pub stream: bool,
    pub include_usage: bool,
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.bytes.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// Walks `{ "key": value, ... }`, handing each raw key (escapes undecoded) to `visit`,
    /// which must consume the value.
    fn object(
        &mut self,
        mut visit: impl FnMut(&'a [u8], &mut Scanner<'a>) -> Option<()>,
    ) -> Option<()> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            visit(key, self)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Consumes a string and returns its raw contents.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.pos;
        self.skip_string_rest()?;
        self.bytes.get(start..self.pos - 1)
    }

    /// Moves past the closing quote of a string whose opening quote was consumed. Jumps from
    /// quote to quote: agent bodies escape many newlines but few quotes, so stopping at every
    /// backslash would be several times slower.
    fn skip_string_rest(&mut self) -> Option<()> {
        loop {
            let found = memchr::memchr(b'"', self.bytes.get(self.pos..)?)?;
            let quote = self.pos + found;
            self.pos = quote + 1;
            // Escaped when an odd run of backslashes precedes it; the run cannot reach past
            // the opening quote.
            let backslashes = self.bytes[..quote]
                .iter()
                .rev()
                .take_while(|&&byte| byte == b'\\')
                .count();
            if backslashes % 2 == 0 {
                return Some(());
            }
        }
    }

    fn bool_value(&mut self) -> Option<bool> {
        let is_true = self.peek()? == b't' && self.bytes[self.pos..].starts_with(b"true");
        self.skip_value()?;
        Some(is_true)
    }

    /// Consumes one value of any kind, checking only that brackets balance and strings end.
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0_usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    self.skip_string_rest()?;
                }
                b'{' | b'[' => {
                    self.pos += 1;
                    depth += 1;
                }
                b'}' | b']' if depth > 0 => {
                    self.pos += 1;
                    depth -= 1;
                }
                // A `,` or `:` inside a container, or the end of a scalar at depth 0.
                b',' | b':' if depth > 0 => self.pos += 1,
                _ if depth > 0 => self.skip_scalar()?,
                _ => return self.skip_scalar(),
            }
            if depth == 0 {
                return Some(());
            }
        }
    }

    /// Consumes a number or literal: everything up to the next delimiter.
    fn skip_scalar(&mut self) -> Option<()> {
        let start = self.pos;
        while let Some(byte) = self.bytes.get(self.pos) {
            if matches!(byte, b',' | b':' | b'}' | b']' | b'"' | b'{' | b'[')
                || byte.is_ascii_whitespace()
            {
                break;
            }
            self.pos += 1;
        }
        (self.pos > start).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::{StreamFlags, stream_flags};

    fn flags(stream: bool, include_usage: bool) -> Option<StreamFlags> {
        Some(StreamFlags {
            stream,
            include_usage,
        })
    }

    #[test]
    fn finds_top_level_flags_only() {
        assert_eq!(stream_flags(br#"{"stream":true}"#), flags(true, false));
        assert_eq!(
            stream_flags(br#" { "stream" : false } "#),
            flags(false, false)
        );
        assert_eq!(stream_flags(b"{}"), flags(false, false));
        assert_eq!(
            stream_flags(
                br#"{"a":{"stream":true},"b":["stream",{"stream":true}],"c":"\"stream\":true"}"#
            ),
            flags(false, false)
        );
        assert_eq!(
            stream_flags(
                br#"{"messages":[{"content":"x\\\"}{"}],"stream":true,"stream_options":{"x":[1,{}],"include_usage":true},"n":-1.5e3,"z":null}"#
            ),
            flags(true, true)
        );
        assert_eq!(
            stream_flags(br#"{"stream_options":null,"stream":"true"}"#),
            flags(false, false)
        );
    }

    #[test]
    fn rejects_what_is_not_a_well_formed_object() {
        for body in [
            &b""[..],
            b"{not json",
            b"[]",
            b"{\"stream\":true",
            b"{\"a\":\"unterminated}",
            b"{\"a\":[1,2}",
            b"{\"a\":1} trailing",
            b"{\"a\"}",
            b"{\"a\":}",
        ] {
            assert_eq!(
                stream_flags(body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn agrees_with_serde_on_real_client_bodies() {
        let captures = crate::fixtures::captures().unwrap();
        assert!(!captures.is_empty());
        for capture in captures {
            let value: serde_json::Value = serde_json::from_slice(&capture.body).unwrap();
            let expected = StreamFlags {
                stream: value["stream"] == true,
                include_usage: value["stream_options"]["include_usage"] == true,
            };
            assert_eq!(
                stream_flags(&capture.body),
                Some(expected),
                "{}",
                capture.id()
            );
        }
    }
}
