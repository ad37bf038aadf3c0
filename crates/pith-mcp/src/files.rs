//! `read_workspace_file`: a workspace file (or a line range of it) as numbered lines.
//!
//! The file is streamed, never held whole: memory is bounded by the lines shown (at most
//! [`MAX_LINES`] of at most [`MAX_LINE_CHARS`] characters), whatever the file's size. Binary
//! files are told from their first [`BINARY_SNIFF`] bytes; a text file is read once to the end,
//! so the total line count in the reply stays exact.

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read};

use pith_brain::render::error_chain;
use pith_brain::{PathError, Workspace};

/// Most lines one read returns; the reply says how to get the rest.
pub const MAX_LINES: usize = 2000;
/// Longer lines (minified code, data) are cut to this many characters.
pub const MAX_LINE_CHARS: usize = 2000;
/// A NUL byte in this many first bytes makes a file binary (not shown).
pub const BINARY_SNIFF: usize = 8192;
/// Bytes read from the file at a time.
const CHUNK: usize = 64 * 1024;

/// A file read, before any memory pointer is appended.
#[derive(Debug)]
pub struct FileRead {
    /// Workspace-relative path, the key memories' evidence is stored under.
    pub rel: String,
    /// The reply: numbered lines and a trailer when not all were shown, or a note for an
    /// empty or binary file.
    pub text: String,
}

/// Read `path` (inside the workspace only) from `start_line` to `end_line` (1-based,
/// inclusive, both optional), numbered `N<TAB>line`.
pub fn read(
    ws: &Workspace,
    path: &str,
    start_line: Option<u32>,
    end_line: Option<u32>,
) -> Result<FileRead, String> {
    let resolved = ws.resolve(path).map_err(|e| match e {
        PathError::NotFound { .. } => format!("{e}; search_workspace finds files"),
        other => error_chain(&other),
    })?;
    let rel = resolved.rel;
    if resolved.abs.is_dir() {
        return Err(format!("{rel} is a directory, not a file"));
    }
    let cannot = |e: std::io::Error| format!("cannot read {rel}: {e}");
    // Only a regular file: a named pipe, socket or device would block this call (opening a
    // pipe waits for a writer) or never end. Opened without waiting, and checked again once
    // open, so one swapped in between is refused too.
    let not_regular =
        || format!("{rel} is not a regular file (a pipe, socket or device); not read");
    if !std::fs::metadata(&resolved.abs).map_err(cannot)?.is_file() {
        return Err(not_regular());
    }
    let file = open_without_waiting(&resolved.abs).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let size = meta.len();
    let text = read_lines(file, size, &rel, start_line, end_line, CHUNK)?;
    Ok(FileRead { rel, text })
}

/// `path` opened for reading; on Unix with `O_NONBLOCK`, so that opening a named pipe does
/// not wait for a writer (a regular file reads as it would anyway).
fn open_without_waiting(path: &std::path::Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0),
    );
    options.open(path)
}

/// The reply for the `size`-byte file `rel` read from `src`, `chunk` bytes at a time.
fn read_lines(
    mut src: impl Read,
    size: u64,
    rel: &str,
    start_line: Option<u32>,
    end_line: Option<u32>,
    chunk: usize,
) -> Result<String, String> {
    let cannot = |e: std::io::Error| format!("cannot read {rel}: {e}");
    let mut head = Vec::with_capacity(BINARY_SNIFF);
    (&mut src)
        .take(BINARY_SNIFF as u64)
        .read_to_end(&mut head)
        .map_err(cannot)?;
    if head.contains(&0) {
        return Ok(format!(
            "{rel} is a binary file ({size} bytes); not shown\n"
        ));
    }
    let start = usize::try_from(start_line.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
    // Lines start..=shown_to are shown, as far as the file has them.
    let shown_to = end_line
        .and_then(|e| usize::try_from(e).ok())
        .unwrap_or(usize::MAX)
        .min(start.saturating_add(MAX_LINES - 1));

    let src = BufReader::with_capacity(chunk, Cursor::new(head).chain(src));
    let mut out = String::new();
    let total = number_lines(src, start, shown_to, &mut out).map_err(cannot)?;

    if total == 0 {
        return Ok(format!("{rel} is empty\n"));
    }
    if start > total {
        return Err(format!(
            "{rel} has {total} lines; start_line {start} is past the end"
        ));
    }
    let wanted_end = end_line
        .and_then(|e| usize::try_from(e).ok())
        .unwrap_or(total)
        .min(total);
    if wanted_end < start {
        return Err(format!(
            "end_line {wanted_end} is before start_line {start}"
        ));
    }
    let end = wanted_end.min(start + MAX_LINES - 1);
    if start > 1 || end < total {
        out.push_str(&format!("[{rel}: lines {start}-{end} of {total}"));
        if end < wanted_end {
            out.push_str(&format!(
                "; capped at {MAX_LINES} lines, start_line={} continues",
                end + 1
            ));
        }
        out.push_str("]\n");
    }
    Ok(out)
}

/// Stream `src` to its end, appending lines `start..=shown_to` (as far as the file has them)
/// to `out` numbered; the file's line count.
fn number_lines(
    mut src: impl BufRead,
    start: usize,
    shown_to: usize,
    out: &mut String,
) -> std::io::Result<usize> {
    // The line the next byte belongs to, whether it has begun, and its text when it is shown.
    let mut line_no: usize = 1;
    let mut in_line = false;
    let mut shown = ShownLine::default();
    loop {
        let buf = src.fill_buf()?;
        let Some(&last) = buf.last() else { break };
        let len = buf.len();
        if line_no > shown_to {
            // Past what is shown: only count.
            line_no += memchr::memchr_iter(b'\n', buf).count();
        } else {
            let mut pos = 0;
            while pos < len {
                let showing = line_no >= start && line_no <= shown_to;
                match memchr::memchr(b'\n', &buf[pos..]) {
                    Some(i) => {
                        if showing {
                            shown.feed(&buf[pos..pos + i]);
                            shown.finish(line_no, true, out);
                        }
                        line_no += 1;
                        pos += i + 1;
                    }
                    None => {
                        if showing {
                            shown.feed(&buf[pos..]);
                        }
                        pos = len;
                    }
                }
            }
        }
        in_line = last != b'\n';
        src.consume(len);
    }
    let total = if in_line {
        if line_no >= start && line_no <= shown_to {
            shown.finish(line_no, false, out);
        }
        line_no
    } else {
        line_no - 1
    };
    Ok(total)
}

/// One shown line as its bytes arrive: decoded as `String::from_utf8_lossy` would decode the
/// whole file (a `\n` ends every invalid sequence, so decoding line by line is the same), its
/// `\r\n` ending dropped as `str::lines` drops it, and cut at [`MAX_LINE_CHARS`] with the rest
/// only counted.
#[derive(Default)]
struct ShownLine {
    text: String,
    chars: usize,
    /// Characters past the cut.
    more: usize,
    /// The start of a UTF-8 sequence the next bytes may complete.
    partial: Vec<u8>,
    /// The last byte so far was `\r`: dropped if the line ends there, kept if more follows.
    cr: bool,
}

impl ShownLine {
    fn feed(&mut self, bytes: &[u8]) {
        let Some((&last, rest)) = bytes.split_last() else {
            return;
        };
        if std::mem::take(&mut self.cr) {
            self.decode(b"\r");
        }
        if last == b'\r' {
            self.decode(rest);
            self.cr = true;
        } else {
            self.decode(bytes);
        }
    }

    fn decode(&mut self, bytes: &[u8]) {
        let joined;
        let bytes = if self.partial.is_empty() {
            bytes
        } else {
            joined = [std::mem::take(&mut self.partial).as_slice(), bytes].concat();
            joined.as_slice()
        };
        let mut chunks = bytes.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.push(chunk.valid());
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            let incomplete = chunks.peek().is_none()
                && std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none());
            if incomplete {
                self.partial.extend_from_slice(invalid);
            } else {
                self.push("\u{FFFD}");
            }
        }
    }

    fn push(&mut self, s: &str) {
        let room = MAX_LINE_CHARS - self.chars;
        match s.char_indices().nth(room) {
            None => {
                self.text.push_str(s);
                self.chars += s.chars().count();
            }
            Some((cut, _)) => {
                self.text.push_str(&s[..cut]);
                self.chars = MAX_LINE_CHARS;
                self.more += s[cut..].chars().count();
            }
        }
    }

    /// End the line (`newline`: at a `\n`, else at the end of the file) and append it to `out`
    /// numbered `line_no`.
    fn finish(&mut self, line_no: usize, newline: bool, out: &mut String) {
        if std::mem::take(&mut self.cr) && !newline {
            self.decode(b"\r");
        }
        if !std::mem::take(&mut self.partial).is_empty() {
            self.push("\u{FFFD}");
        }
        let line = std::mem::take(self);
        out.push_str(&line_no.to_string());
        out.push('\t');
        out.push_str(&line.text);
        if line.more > 0 {
            out.push_str(&format!("… [{} more characters]", line.more));
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        for (p, b) in files {
            let p = dir.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b).unwrap();
        }
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn whole_file_and_ranges() {
        let (_d, ws) = ws(&[("a.txt", b"one\ntwo\nthree\n")]);
        assert_eq!(
            read(&ws, "a.txt", None, None).unwrap().text,
            "1\tone\n2\ttwo\n3\tthree\n"
        );
        assert_eq!(
            read(&ws, "a.txt", Some(2), Some(2)).unwrap().text,
            "2\ttwo\n[a.txt: lines 2-2 of 3]\n"
        );
        assert_eq!(
            read(&ws, "./a.txt", Some(3), Some(99)).unwrap().text,
            "3\tthree\n[a.txt: lines 3-3 of 3]\n"
        );
        assert!(
            read(&ws, "a.txt", Some(4), None)
                .unwrap_err()
                .contains("has 3 lines")
        );
        assert!(read(&ws, "a.txt", Some(3), Some(2)).is_err());
    }

    #[test]
    fn caps_long_files_and_lines() {
        let long: String = (1..=2500).map(|i| format!("line {i}\n")).collect();
        let wide = "x".repeat(MAX_LINE_CHARS + 10);
        let (_d, ws) = ws(&[("long.txt", long.as_bytes()), ("wide.txt", wide.as_bytes())]);
        let text = read(&ws, "long.txt", None, None).unwrap().text;
        assert!(text.ends_with(
            "2000\tline 2000\n[long.txt: lines 1-2000 of 2500; capped at 2000 lines, start_line=2001 continues]\n"
        ));
        let text = read(&ws, "wide.txt", None, None).unwrap().text;
        assert!(text.ends_with("x… [10 more characters]\n"), "{text}");
    }

    #[test]
    fn binary_empty_directory_and_missing() {
        let (_d, ws) = ws(&[("b.bin", b"\x00\x01"), ("e.txt", b""), ("d/x", b"")]);
        assert!(
            read(&ws, "b.bin", None, None)
                .unwrap()
                .text
                .contains("binary file (2 bytes)")
        );
        assert_eq!(
            read(&ws, "e.txt", None, None).unwrap().text,
            "e.txt is empty\n"
        );
        assert!(
            read(&ws, "d", None, None)
                .unwrap_err()
                .contains("is a directory")
        );
        assert!(
            read(&ws, "nope", None, None)
                .unwrap_err()
                .contains("does not exist")
        );
    }

    #[test]
    fn a_huge_sparse_file_is_told_binary_without_reading_it() {
        let (d, ws) = ws(&[]);
        let path = d.path().join("huge.log");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        // 1 TiB, almost all of it a hole: no disk, and more memory than any machine would give.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let text = read(&ws, "huge.log", Some(1), Some(10)).unwrap().text;
        assert_eq!(
            text,
            "huge.log is a binary file (1099511627776 bytes); not shown\n"
        );
    }

    /// What `read` answered when it held the whole file (the reply must not change).
    fn whole_file_reply(
        bytes: &[u8],
        rel: &str,
        start_line: Option<u32>,
        end_line: Option<u32>,
    ) -> Result<String, String> {
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return Ok(format!(
                "{rel} is a binary file ({} bytes); not shown\n",
                bytes.len()
            ));
        }
        let text = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        if total == 0 {
            return Ok(format!("{rel} is empty\n"));
        }
        let start = usize::try_from(start_line.unwrap_or(1).max(1)).unwrap();
        if start > total {
            return Err(format!(
                "{rel} has {total} lines; start_line {start} is past the end"
            ));
        }
        let wanted_end = end_line
            .map(|e| usize::try_from(e).unwrap())
            .unwrap_or(total)
            .min(total);
        if wanted_end < start {
            return Err(format!(
                "end_line {wanted_end} is before start_line {start}"
            ));
        }
        let end = wanted_end.min(start + MAX_LINES - 1);
        let mut out = String::new();
        for (i, line) in lines[start - 1..end].iter().enumerate() {
            out.push_str(&format!("{}\t", start + i));
            match line.char_indices().nth(MAX_LINE_CHARS) {
                None => out.push_str(line),
                Some((cut, _)) => {
                    out.push_str(&line[..cut]);
                    let rest = line[cut..].chars().count();
                    out.push_str(&format!("… [{rest} more characters]"));
                }
            }
            out.push('\n');
        }
        if start > 1 || end < total {
            out.push_str(&format!("[{rel}: lines {start}-{end} of {total}"));
            if end < wanted_end {
                out.push_str(&format!(
                    "; capped at {MAX_LINES} lines, start_line={} continues",
                    end + 1
                ));
            }
            out.push_str("]\n");
        }
        Ok(out)
    }

    #[test]
    fn streaming_gives_the_reply_reading_the_whole_file_gave() {
        // Pieces that stress decoding at chunk edges: CRLF, lone CR, multi-byte and broken
        // UTF-8, long lines, and now and then a NUL.
        const PIECES: &[&[u8]] = &[
            b"a",
            b"xyz ",
            b"\n",
            b"\r\n",
            b"\r",
            "é".as_bytes(),
            "€".as_bytes(),
            "𐍈".as_bytes(),
            b"\xe2\x82",
            b"\xf0\x90",
            b"\xff",
            b"\x80",
            b"\xc3",
            b"\t",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % n as u64).unwrap()
        };
        for case in 0..400 {
            let mut bytes = Vec::new();
            for _ in 0..next(60) {
                bytes.extend_from_slice(PIECES[next(PIECES.len())]);
            }
            if case % 10 == 0 {
                // A line longer than MAX_LINE_CHARS, with broken UTF-8 inside and at its cut.
                for i in 0..MAX_LINE_CHARS + next(20) {
                    bytes.extend_from_slice(if i % 97 == 0 {
                        b"\xe2\x82"
                    } else {
                        "é".as_bytes()
                    });
                }
                bytes.extend_from_slice(PIECES[next(PIECES.len())]);
            }
            if case % 50 == 7 {
                bytes.push(0);
            }
            let ranges = [
                (None, None),
                (Some(1), Some(1)),
                (Some(2), None),
                (Some(next(8) as u32), Some(next(8) as u32)),
                (Some(3), Some(2)),
                (Some(40), None),
            ];
            for (start, end) in ranges {
                let want = whole_file_reply(&bytes, "f", start, end);
                for chunk in [1, 2, 3, 5, 7, CHUNK] {
                    let got = read_lines(&bytes[..], bytes.len() as u64, "f", start, end, chunk);
                    assert_eq!(
                        got, want,
                        "case {case} {start:?}-{end:?} chunk {chunk}: {bytes:?}"
                    );
                }
            }
        }
        let long: String = (1..=2500).map(|i| format!("line {i}\r\n")).collect();
        for (start, end) in [(None, None), (Some(1999), Some(2600)), (Some(2500), None)] {
            assert_eq!(
                read_lines(long.as_bytes(), long.len() as u64, "l", start, end, 5),
                whole_file_reply(long.as_bytes(), "l", start, end)
            );
        }
    }
}
