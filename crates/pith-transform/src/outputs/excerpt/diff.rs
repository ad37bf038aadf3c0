//! A unified diff inside an output (`git show`, `git log -p`, `git diff`): each hunk line's
//! side, and the number it has in the file as changed, which is where a later read of that
//! file finds it (a read of `skim.rs` from line 100 opens the function a commit added there).

/// A line of a diff's hunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HunkLine<'l> {
    /// `+`, `-` or ` `.
    pub side: u8,
    /// The file as changed and the line's number in it; none for a removed line, or when no
    /// `+++` line named the file.
    pub at: Option<(&'l str, u64)>,
}

/// Each line's place in a hunk, `None` outside hunks (and for a `\ No newline at end of
/// file`). A hunk is as long as its `@@ -a,b +c,d @@` says (a count left out is 1), so a line
/// after it is read as what it is (a `commit`, a `+++ ` header, the next command's output)
/// even when it starts with `+`, `-` or a space; a line that cannot be in a hunk ends it.
pub(super) fn hunk_lines<'l>(content: &[&'l str]) -> Vec<Option<HunkLine<'l>>> {
    let mut out = vec![None; content.len()];
    let mut path: Option<&str> = None;
    // Lines left of the hunk on each side, and the next line's number in the file as changed.
    let mut hunk: Option<Hunk> = None;
    for (i, line) in content.iter().enumerate() {
        if let Some(h) = &mut hunk {
            let first = line.as_bytes().first().copied();
            let taken = match first {
                Some(b'\\') => continue,
                Some(b' ') | None if h.old > 0 && h.new > 0 => {
                    (h.old, h.new) = (h.old - 1, h.new - 1);
                    Some(b' ')
                }
                Some(b'-') if h.old > 0 => {
                    h.old -= 1;
                    Some(b'-')
                }
                Some(b'+') if h.new > 0 => {
                    h.new -= 1;
                    Some(b'+')
                }
                _ => None,
            };
            if let Some(side) = taken {
                let at = match side {
                    b'-' => None,
                    _ => {
                        let at = path.map(|p| (p, h.next));
                        h.next = h.next.saturating_add(1);
                        at
                    }
                };
                out[i] = Some(HunkLine { side, at });
                if h.old == 0 && h.new == 0 {
                    hunk = None;
                }
                continue;
            }
            hunk = None;
        }
        if let Some(header) = line.strip_prefix("+++ ") {
            path = changed_path(header);
        } else if line.starts_with("diff ") || line.starts_with("commit ") {
            path = None;
        } else if let Some(ranges) = line.strip_prefix("@@ -") {
            hunk = Hunk::of(ranges);
        }
    }
    out
}

/// Each line's side in a diff's hunk (`+`, `-` or ` `), `None` outside hunks.
#[cfg(test)]
pub(super) fn diff_sides(content: &[&str]) -> Vec<Option<u8>> {
    hunk_lines(content)
        .into_iter()
        .map(|h| h.map(|h| h.side))
        .collect()
}

struct Hunk {
    old: u64,
    new: u64,
    next: u64,
}

impl Hunk {
    /// The hunk a header announces, from what follows its `@@ -`: `a,b +c,d @@ ...`.
    fn of(ranges: &str) -> Option<Hunk> {
        let (old, rest) = ranges.split_once(" +")?;
        let (new, _) = rest.split_once(" @@")?;
        let count = |range: &str| -> Option<(u64, u64)> {
            match range.split_once(',') {
                Some((start, n)) => Some((start.parse().ok()?, n.parse().ok()?)),
                None => Some((range.parse().ok()?, 1)),
            }
        };
        let (_, old) = count(old)?;
        let (next, new) = count(new)?;
        (old > 0 || new > 0).then_some(Hunk { old, new, next })
    }
}

/// The file a `+++ ` header names as changed: git's `b/` and quotes, and what `diff -u` puts
/// after a tab (a date), left out; none for a deleted file.
fn changed_path(header: &str) -> Option<&str> {
    let name = header
        .split('\t')
        .next()
        .unwrap_or(header)
        .trim_end_matches('\r');
    let name = (name.strip_prefix('"'))
        .and_then(|n| n.strip_suffix('"'))
        .unwrap_or(name);
    (name != "/dev/null").then(|| name.strip_prefix("b/").unwrap_or(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each hunk line's index, side and place in the file as changed.
    type Numbered<'l> = Vec<(usize, u8, Option<(&'l str, u64)>)>;

    fn numbered<'l>(content: &[&'l str]) -> Numbered<'l> {
        (hunk_lines(content).into_iter().enumerate())
            .filter_map(|(i, h)| h.map(|h| (i, h.side, h.at)))
            .collect()
    }

    #[test]
    fn a_hunks_lines_are_numbered_as_in_the_file_it_changed() {
        let diff = [
            "commit 0123abc",
            "diff --git a/src/skim.rs b/src/skim.rs",
            "--- a/src/skim.rs",
            "+++ b/src/skim.rs",
            "@@ -98,3 +100,4 @@ fn walk() {",
            " fn member_value_start() {",
            "-    old();",
            "+    new();",
            "+    newer();",
            "",
            "commit 4567def",
            "+++ b/src/other.rs",
            "@@ -1 +101 @@",
            "+fn other() {}",
        ];
        let s = Some("src/skim.rs");
        let at = |n| s.map(|p| (p, n));
        assert_eq!(
            numbered(&diff),
            [
                (5, b' ', at(100)),
                (6, b'-', None),
                (7, b'+', at(101)),
                (8, b'+', at(102)),
                (9, b' ', at(103)),
                (13, b'+', Some(("src/other.rs", 101))),
            ]
        );
    }

    /// Lines after a hunk's count are not its lines, whatever they start with; a `\ No
    /// newline` line is no line of the file; a date after the path is not the path.
    #[test]
    fn a_hunk_ends_where_its_header_says() {
        let diff = [
            "--- a/notes.txt\t2026-12-07 12:00:00",
            "+++ b/notes.txt\t2026-12-07 12:30:00",
            "@@ -5,1 +5,3 @@",
            "-last",
            "\\ No newline at end of file",
            "+last",
            "+++ an added line that looks like a header",
            "+added",
            "",
            "+ not a diff line: the hunk is over",
            "- nor this",
        ];
        let n = Some("notes.txt");
        assert_eq!(
            numbered(&diff),
            [
                (3, b'-', None),
                (5, b'+', n.map(|p| (p, 5))),
                (6, b'+', n.map(|p| (p, 6))),
                (7, b'+', n.map(|p| (p, 7))),
            ]
        );
        assert_eq!(diff_sides(&diff)[9], None);
    }

    #[test]
    fn a_headers_path_is_the_file_as_changed() {
        assert_eq!(changed_path("b/src/a.rs"), Some("src/a.rs"));
        assert_eq!(changed_path("\"b/src/a b.rs\""), Some("src/a b.rs"));
        assert_eq!(changed_path("b/x.rs\t2026-12-07"), Some("x.rs"));
        assert_eq!(changed_path("/dev/null"), None);
        assert!(Hunk::of("1 +1 @@").is_some_and(|h| h.old == 1 && h.new == 1));
        assert!(Hunk::of("0,0 +1,3 @@ fn x()").is_some_and(|h| h.new == 3 && h.next == 1));
        assert!(Hunk::of("x,1 +1 @@").is_none());
    }
}
