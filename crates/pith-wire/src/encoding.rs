//! Undo a response's `content-encoding` so its usage can be read. pith forwards the encoded
//! bytes untouched; this runs on a copy, off the request path.

use std::io::Read;

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A coding pith does not decode; the coding, lowercased.
    #[error("unsupported content-encoding {0:?}")]
    Unsupported(String),
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
    let mut data = body;
    // Codings are listed in the order they were applied: undo them from last to first.
    for coding in content_encoding.split(',').map(str::trim).rev() {
        let coding = coding.to_ascii_lowercase();
        let mut out = Vec::new();
        let reader: Box<dyn Read + '_> = match coding.as_str() {
            "" | "identity" => continue,
            "gzip" | "x-gzip" => Box::new(flate2::read::MultiGzDecoder::new(&data[..])),
            "deflate" => Box::new(flate2::read::ZlibDecoder::new(&data[..])),
            "br" => Box::new(brotli_decompressor::Decompressor::new(&data[..], 8192)),
            "zstd" => Box::new(ruzstd::decoding::StreamingDecoder::new(&data[..]).map_err(
                |e| DecodeError::Corrupt {
                    encoding: coding.clone(),
                    source: std::io::Error::other(e.to_string()),
                },
            )?),
            other => return Err(DecodeError::Unsupported(other.to_owned())),
        };
        reader
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|source| DecodeError::Corrupt {
                encoding: coding.clone(),
                source,
            })?;
        data = out;
    }
    Ok(data)
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
}
