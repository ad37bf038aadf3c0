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
                if errors.send(too_large(size, &head, &tail)).is_err() {
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

/// The JSON-RPC error for an over-long message (`-32600`, invalid request), with its id when
/// its start or end shows one, else `null` as JSON-RPC has it for an id that cannot be read.
fn too_large(size: usize, head: &[u8], tail: &[u8]) -> String {
    let id = find_id(head)
        .or_else(|| find_id(tail))
        .unwrap_or_else(|| "null".to_owned());
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32600,\"message\":\"pith mcp \
         reads messages of at most {MAX_MESSAGE} bytes; this one was {size} bytes and was not \
         read\"}}}}\n"
    )
}

/// The value of an `"id"` member in a piece of a JSON-RPC message: a number, or a string
/// written back exactly as it came (quotes and escapes included).
fn find_id(piece: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(piece);
    let mut from = 0;
    while let Some(at) = text[from..].find("\"id\"") {
        let rest = text[from + at + 4..].trim_start();
        from += at + 4;
        let Some(value) = rest.strip_prefix(':').map(str::trim_start) else {
            continue;
        };
        if let Some(s) = value.strip_prefix('"') {
            let mut escaped = false;
            for (i, c) in s.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '"' if !escaped => return Some(format!("\"{}\"", &s[..i])),
                    _ => escaped = false,
                }
            }
            continue;
        }
        let number: String = value
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        if !number.is_empty() && number != "-" {
            return Some(number);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_found_at_the_start_or_the_end() {
        assert_eq!(
            find_id(br#"{"jsonrpc":"2.0","id":42,"method":"x""#),
            Some("42".into())
        );
        assert_eq!(
            find_id(br#"{"id" : "a\"b","method""#),
            Some(r#""a\"b""#.into())
        );
        assert_eq!(find_id(br#"xxx"}},"id":7}"#), Some("7".into()));
        assert_eq!(find_id(br#"{"params":{"valid":1}}"#), None);
        assert!(too_large(20, b"{\"id\":3", b"").contains("\"id\":3,\"error\""));
        assert!(too_large(20, b"{", b"}").contains("\"id\":null"));
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
