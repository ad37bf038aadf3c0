//! `read_workspace_file`: a workspace file (or a line range of it) as numbered lines.

use pith_brain::{PathError, Workspace};

/// Most lines one read returns; the reply says how to get the rest.
pub const MAX_LINES: usize = 2000;
/// Longer lines (minified code, data) are cut to this many characters.
pub const MAX_LINE_CHARS: usize = 2000;

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
        other => other.to_string(),
    })?;
    let rel = resolved.rel;
    if resolved.abs.is_dir() {
        return Err(format!("{rel} is a directory, not a file"));
    }
    let bytes = std::fs::read(&resolved.abs).map_err(|e| format!("cannot read {rel}: {e}"))?;
    if bytes.iter().take(8192).any(|b| *b == 0) {
        return Ok(FileRead {
            text: format!(
                "{rel} is a binary file ({} bytes); not shown\n",
                bytes.len()
            ),
            rel,
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if total == 0 {
        return Ok(FileRead {
            text: format!("{rel} is empty\n"),
            rel,
        });
    }
    let start = usize::try_from(start_line.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
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

    let mut out = String::new();
    for (i, line) in lines[start - 1..end].iter().enumerate() {
        out.push_str(&(start + i).to_string());
        out.push('\t');
        push_clipped(&mut out, line);
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
    Ok(FileRead { rel, text: out })
}

fn push_clipped(out: &mut String, line: &str) {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => out.push_str(line),
        Some((cut, _)) => {
            out.push_str(&line[..cut]);
            let rest = line[cut..].chars().count();
            out.push_str(&format!("… [{rest} more characters]"));
        }
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
}
