//! The stdio transport with a bound on what one message may be. rmcp drops a line longer than
//! its limit without a word, so the client that sent it waits for an answer forever. Here the
//! server reads stdin through [`pump_in`], which passes on whole lines up to [`MAX_MESSAGE`]
//! and answers a longer one itself with a JSON-RPC error naming its id, and writes through
//! [`pump_out`], which puts those errors between the server's own lines, never inside one.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest message pith mcp reads: a tool call's arguments are a path, a query, a
/// memory; nothing a client sends comes near.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// How much of an over-long line's start and end is kept to find its id.
const ID_WINDOW: usize = 4096;

/// Read lines from `input` into `server` until either ends: a line of at most [`MAX_MESSAGE`]
/// bytes passes whole; a longer one is dropped, and its error reply goes to `errors`.
pub async fn pump_in(
    input: impl AsyncRead + Unpin,
    mut server: impl AsyncWrite + Unpin,
    errors: mpsc::UnboundedSender<String>,
) {
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut line: Vec<u8> = Vec::new();
    // An over-long line: its size so far, its first and last bytes.
    let mut oversized: Option<(usize, Vec<u8>, Vec<u8>)> = None;
    loop {
        let (consumed, ended) = {
            let available = match input.fill_buf().await {
                Ok([]) => break,
                Ok(a) => a,
                Err(_) => break,
            };
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let part = &available[..take];
            match &mut oversized {
                Some((size, _, tail)) => {
                    *size += take;
                    keep_tail(tail, part);
                }
                None if line.len() + take > MAX_MESSAGE => {
                    let mut head = std::mem::take(&mut line);
                    head.extend_from_slice(part);
                    let size = head.len();
                    let mut tail = Vec::new();
                    keep_tail(&mut tail, &head);
                    head.truncate(ID_WINDOW);
                    oversized = Some((size, head, tail));
                }
                None => line.extend_from_slice(part),
            }
            (take, newline.is_some())
        };
        input.consume(consumed);
        if !ended {
            continue;
        }
        match oversized.take() {
            Some((size, head, tail)) => {
                tracing::warn!(bytes = size, "a message over the limit was refused");
                if let Some(error) = too_large(size, &head, &tail)
                    && errors.send(error).is_err()
                {
                    break;
                }
            }
            None => {
                if server.write_all(&line).await.is_err() || server.flush().await.is_err() {
                    break;
                }
                line.clear();
            }
        }
    }
    // What is left without a newline is an incomplete message: the server sees the end.
    let _ = server.shutdown().await;
}

/// Write the server's lines from `server` and the refusals from `errors` to `output`, each
/// line whole, until the server's output ends.
pub async fn pump_out(
    server: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
    mut errors: mpsc::UnboundedReceiver<String>,
) {
    let mut server = BufReader::new(server);
    let mut line = Vec::new();
    loop {
        tokio::select! {
            read = server.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            break;
                        }
                        line.clear();
                    }
                }
            }
            Some(error) = errors.recv() => {
                // A partial line of the server's waits in `line`: the refusal goes first.
                if output.write_all(error.as_bytes()).await.is_err()
                    || output.flush().await.is_err()
                {
                    break;
                }
            }
        }
    }
    let _ = output.flush().await;
}

fn keep_tail(tail: &mut Vec<u8>, part: &[u8]) {
    tail.extend_from_slice(part);
    if tail.len() > 2 * ID_WINDOW {
        tail.drain(..tail.len() - ID_WINDOW);
    }
}

/// The JSON-RPC error for an over-long message (`-32600`, invalid request), with its id as
/// its start or end shows it, else `null` as JSON-RPC has it for an id that cannot be read;
/// `None` for a notification (a message with a method and no id gets no reply).
fn too_large(size: usize, head: &[u8], tail: &[u8]) -> Option<String> {
    let (head_id, has_method) = top_level_id(head);
    let id = match head_id.or_else(|| last_id(tail)) {
        Some(id) => id,
        None if has_method => return None,
        None => "null".to_owned(),
    };
    // One literal per line (`concat!`), so no line ends inside a string.
    Some(format!(
        concat!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32600,\"message\":",
            "\"pith mcp reads messages of at most {max} bytes; this one was {size} bytes and ",
            "was not read\"}}}}\n",
        ),
        id = id,
        max = MAX_MESSAGE,
        size = size,
    ))
}

/// In the start of a message: its top-level `"id"` (the members of `params` are not it), and
/// whether a top-level `"method"` was seen.
fn top_level_id(head: &[u8]) -> (Option<String>, bool) {
    let text = String::from_utf8_lossy(head);
    let bytes = text.as_bytes();
    let (mut depth, mut i, mut has_method) = (0usize, 0usize, false);
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let Some(end) = string_end(bytes, i) else {
                    break;
                };
                if depth == 1 {
                    let key = &text[i + 1..end];
                    if let Some(value) = text[end + 1..].trim_start().strip_prefix(':') {
                        if key == "method" {
                            has_method = true;
                        }
                        if key == "id" {
                            return (id_value(value.trim_start(), false), has_method);
                        }
                    }
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    (None, has_method)
}

/// Where the string starting at `bytes[start]` (a quote) ends: its closing quote.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut escaped = false;
    for (k, b) in bytes.iter().enumerate().skip(start + 1) {
        match b {
            b'\\' if !escaped => escaped = true,
            b'"' if !escaped => return Some(k),
            _ => escaped = false,
        }
    }
    None
}

/// In the end of a message: an `"id"` that is its last member (as SDKs that spread the request
/// first and add the id after it write it).
fn last_id(tail: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(tail);
    let body = text.trim_end().strip_suffix('}')?.trim_end();
    let at = body.rfind("\"id\"")?;
    let value = body[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    id_value(value, true)
}

/// An id's value at the start of `value`: a number (followed by a delimiter, or by nothing when
/// `to_end`), or a string written back exactly as it came.
fn id_value(value: &str, to_end: bool) -> Option<String> {
    if value.starts_with('"') {
        let end = string_end(value.as_bytes(), 0)?;
        return Some(value[..=end].to_owned());
    }
    let number: String = value
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    let rest = &value[number.len()..];
    let delimited = if to_end {
        rest.trim().is_empty()
    } else {
        rest.starts_with([',', '}', ' ', '\n', '\r', '\t'])
    };
    (!number.is_empty() && number != "-" && delimited).then_some(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_messages_own_at_its_start_or_its_end() {
        let head = |h: &[u8]| top_level_id(h).0;
        assert_eq!(
            head(br#"{"jsonrpc":"2.0","id":42,"method":"x""#),
            Some("42".into())
        );
        assert_eq!(
            head(br#"{"id" : "a\"b","method""#),
            Some(r#""a\"b""#.into())
        );
        // An id inside the arguments is not the message's.
        let call = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"id":"m-1""#;
        assert_eq!(head(call), None);
        // A number cut at the window's edge is not trusted.
        assert_eq!(head(br#"{"id":123"#), None);
        assert_eq!(last_id(br#"xxx"}},"id":7}"#), Some("7".into()));
        assert_eq!(last_id(br#"xxx","id":"r-9" }"#), Some(r#""r-9""#.into()));
        assert_eq!(last_id(br#"{"params":{"valid":1}}"#), None);
        let error = too_large(20, b"{\"id\":3,", b"").unwrap();
        assert!(error.contains("\"id\":3,\"error\""), "{error}");
        assert!(too_large(20, b"{", b"}").unwrap().contains("\"id\":null"));
        // A notification gets no reply.
        let note = br#"{"jsonrpc":"2.0","method":"notifications/x","params":{"#;
        assert_eq!(too_large(20, note, b"}}"), None);
    }

    #[tokio::test]
    async fn an_over_long_line_is_answered_and_the_next_passes() {
        let (mut client, stdin) = tokio::io::duplex(1 << 16);
        let (server_in, mut server_read) = tokio::io::duplex(1 << 16);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pump = tokio::spawn(pump_in(stdin, server_in, tx));
        let writer = tokio::spawn(async move {
            let big = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":9,\"params\":\"{}\"}}\n",
                "x".repeat(MAX_MESSAGE)
            );
            client.write_all(big.as_bytes()).await.unwrap();
            client.write_all(b"{\"id\":10}\n").await.unwrap();
        });
        let mut got = Vec::new();
        let mut reader = BufReader::new(&mut server_read);
        reader.read_until(b'\n', &mut got).await.unwrap();
        assert_eq!(got, b"{\"id\":10}\n");
        let error = rx.recv().await.unwrap();
        assert!(
            error.starts_with("{\"jsonrpc\":\"2.0\",\"id\":9,\"error\":{\"code\":-32600"),
            "{error}"
        );
        writer.await.unwrap();
        drop(reader);
        drop(server_read);
        pump.await.unwrap();
    }
}
