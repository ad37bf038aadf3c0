//! Compressed bodies written by hand, as an attacker writes them: a zstd frame of raw and RLE
//! blocks, where every 4 bytes decode to 128 KiB, so a 131 KB body decodes to 4 GiB, with no
//! compressor run (RFC 8878: a frame header without a content size, blocks of at most the
//! 128 KiB window).

/// A part of what a frame decodes to.
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    /// These bytes, as they are (raw blocks).
    Bytes(&'a [u8]),
    /// This byte, this many times (RLE blocks).
    Repeat(u8, u64),
}

/// The largest block: the window (128 KiB), which is also the format's bound.
const BLOCK: u64 = 128 << 10;

/// A zstd frame that decodes to `pieces`, in order.
pub fn zstd(pieces: &[Piece<'_>]) -> Vec<u8> {
    // Magic, then a frame header descriptor of nothing optional, then a window of 2^17.
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x38];
    // Each block: its type (0 raw, 1 RLE), the bytes it decodes to, its content.
    let mut blocks: Vec<(u32, u64, &[u8])> = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Bytes(bytes) => {
                for chunk in bytes.chunks(BLOCK as usize) {
                    blocks.push((0, chunk.len() as u64, chunk));
                }
            }
            Piece::Repeat(byte, n) => {
                let mut left = *n;
                while left > 0 {
                    let size = left.min(BLOCK);
                    blocks.push((1, size, std::slice::from_ref(byte)));
                    left -= size;
                }
            }
        }
    }
    if blocks.is_empty() {
        blocks.push((0, 0, &[]));
    }
    let last = blocks.len() - 1;
    for (i, (kind, size, content)) in blocks.into_iter().enumerate() {
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        let header = u32::from(i == last) | (kind << 1) | (size << 3);
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(content);
    }
    out
}

/// A zstd bomb: `n` bytes of `a`, from 4 bytes per 128 KiB.
pub fn zstd_bomb(n: u64) -> Vec<u8> {
    zstd(&[Piece::Repeat(b'a', n)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_written_frame_decodes_to_its_pieces() {
        let frame = zstd(&[
            Piece::Bytes(b"{\"input\":\""),
            Piece::Repeat(b'x', 300_000),
            Piece::Bytes(b"\"}"),
        ]);
        assert!(frame.len() < 64, "{}", frame.len());
        let mut decoded = Vec::new();
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(&frame[..]).unwrap();
        std::io::Read::read_to_end(&mut decoder, &mut decoded).unwrap();
        assert_eq!(decoded.len(), 10 + 300_000 + 2);
        assert!(decoded.starts_with(b"{\"input\":\"xxx") && decoded.ends_with(b"x\"}"));
        assert_eq!(zstd_bomb(4 << 30).len(), 6 + 32768 * 4);
    }
}
