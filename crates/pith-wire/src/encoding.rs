//! Undo a response's `content-encoding` so its usage can be read. pith forwards the encoded
//! bytes untouched; this runs on a copy, off the request path.

use std::io::Read;

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A coding pith does not decode; the coding, lowercased.
    #[error("unsupported content-encoding {0:?}")]
    Unsupported(String),
    /// The memory to decode it was not there: the caller's budget said no before the decoded
    /// bytes outgrew what it granted.
    #[error("no memory left to decode it within the budget")]
    OverBudget,
    /// The bytes do not decode as the coding says.
    #[error("corrupt {encoding} body: {source}")]
    Corrupt {
        /// The coding that failed, lowercased.
        encoding: String,
        /// The decoder's error.
        source: std::io::Error,
    },
}

/// Decode `body` per `content_encoding` (`gzip`, `x-gzip`, `deflate`, `br`, `zstd`, `identity`,
/// or a comma-separated chain applied in order). At most `limit` decoded bytes are produced.
pub fn decode(content_encoding: &str, body: Vec<u8>, limit: u64) -> Result<Vec<u8>, DecodeError> {
    decode_within(content_encoding, &body, limit, &mut |_| true)
}

/// [`decode`], asking `may_grow(n)` before an output buffer takes `n` more bytes of memory:
/// when it says no, the decode stops there with [`DecodeError::OverBudget`] (a process that
/// decodes many bodies at once bounds them by memory, not by how many run). A buffer grows by
/// doubling, never past `limit`, so what was granted is what is held.
pub fn decode_within(
    content_encoding: &str,
    body: &[u8],
    limit: u64,
    may_grow: &mut dyn FnMut(usize) -> bool,
) -> Result<Vec<u8>, DecodeError> {
    let mut decoded: Option<Vec<u8>> = None;
    // Codings are listed in the order they were applied: undo them from last to first.
    for coding in content_encoding.split(',').map(str::trim).rev() {
        let coding = coding.to_ascii_lowercase();
        let data: &[u8] = decoded.as_deref().unwrap_or(body);
        let mut reader: Box<dyn Read + '_> = match coding.as_str() {
            "" | "identity" => continue,
            "gzip" | "x-gzip" => Box::new(flate2::read::MultiGzDecoder::new(data)),
            "deflate" => Box::new(flate2::read::ZlibDecoder::new(data)),
            "br" => Box::new(brotli_decompressor::Decompressor::new(data, 8192)),
            "zstd" => Box::new(ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| {
                DecodeError::Corrupt {
                    encoding: coding.clone(),
                    source: std::io::Error::other(e.to_string()),
                }
            })?),
            other => return Err(DecodeError::Unsupported(other.to_owned())),
        };
        let out = read_within(&mut reader, limit, may_grow).map_err(|e| match e {
            ReadError::OverBudget => DecodeError::OverBudget,
            ReadError::Io(source) => DecodeError::Corrupt {
                encoding: coding.clone(),
                source,
            },
        })?;
        drop(reader);
        decoded = Some(out);
    }
    Ok(decoded.unwrap_or_else(|| body.to_vec()))
}

enum ReadError {
    OverBudget,
    Io(std::io::Error),
}

/// Everything `reader` gives, up to `limit` bytes, each growth of the buffer granted first.
fn read_within(
    reader: &mut dyn Read,
    limit: u64,
    may_grow: &mut dyn FnMut(usize) -> bool,
) -> Result<Vec<u8>, ReadError> {
    const CHUNK: usize = 16 << 10;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = [0u8; CHUNK];
    while out.len() < limit {
        let want = CHUNK.min(limit - out.len());
        let n = match reader.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        let needed = out.len() + n;
        if needed > out.capacity() {
            let grown = out
                .capacity()
                .saturating_mul(2)
                .max(4 * CHUNK)
                .min(limit)
                .max(needed);
            if !may_grow(grown - out.capacity()) {
                return Err(ReadError::OverBudget);
            }
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gzip_and_identity() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"{\"usage\":{}}").unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(decode("gzip", gz, 1 << 20).unwrap(), b"{\"usage\":{}}");
        assert_eq!(decode("identity", b"x".to_vec(), 10).unwrap(), b"x");
        assert!(matches!(
            decode("compress", b"x".to_vec(), 10),
            Err(DecodeError::Unsupported(_))
        ));
        assert!(decode("gzip", b"not gzip".to_vec(), 10).is_err());
    }

    #[test]
    fn a_decode_stops_when_its_budget_says_no_and_holds_what_it_was_granted() {
        let plain = vec![b'a'; 1 << 20];
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&plain).unwrap();
        let gz = enc.finish().unwrap();
        let mut granted = 0;
        let whole = decode_within("gzip", &gz, 2 << 20, &mut |n| {
            granted += n;
            true
        })
        .unwrap();
        assert_eq!(whole, plain);
        assert_eq!(granted, whole.capacity(), "granted what it holds");
        let mut left = 256 << 10;
        let refused = decode_within("gzip", &gz, 2 << 20, &mut |n| {
            let ok = n <= left;
            left -= n.min(left);
            ok
        });
        assert!(
            matches!(refused, Err(DecodeError::OverBudget)),
            "{refused:?}"
        );
    }
}
