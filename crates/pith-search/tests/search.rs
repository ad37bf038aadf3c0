//! pith-search on generated trees: ignore rules, globs, literal vs regex, paging, totals, binary
//! files, path confinement, rendering, and the ranking contract with a scripted ranker.

use std::cell::Cell;
use std::fs;
use std::path::Path;

use pith_search::{
    Candidate, MAX_LINE_CHARS, RankPolicy, Ranker, Ranking, SearchError, SearchRequest, search,
    search_workspace,
};

#[expect(
    clippy::unwrap_used,
    reason = "test setup: a failure should fail the test"
)]
fn write(root: &Path, rel: &str, content: impl AsRef<[u8]>) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn paths(results: &[pith_search::Match]) -> Vec<String> {
    results
        .iter()
        .map(|m| format!("{}:{}", m.path, m.line))
        .collect()
}

/// A small project: sources, an ignored build dir, an ignored log, a hidden dir, a .git dir.
#[expect(
    clippy::unwrap_used,
    reason = "test setup: a failure should fail the test"
)]
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, ".gitignore", "target/\n*.log\n");
    write(root, "src/main.rs", "fn main() {\n    needle();\n}\n");
    write(root, "src/lib.rs", "pub fn needle() {}\n// NEEDLE upper\n");
    write(root, "src/util/mod.rs", "// needle in util\n");
    write(root, "docs/guide.md", "the needle in docs\n");
    write(root, "target/debug/out.rs", "needle in build output\n");
    write(root, "run.log", "needle in a log\n");
    write(root, ".hidden/secret.rs", "needle hidden\n");
    write(root, ".git/config", "needle in git\n");
    dir
}

#[test]
fn gitignored_hidden_and_git_files_are_not_searched() {
    let dir = project();
    let results = search(dir.path(), &SearchRequest::new("needle")).unwrap();
    assert_eq!(
        paths(&results.matches),
        [
            "docs/guide.md:1",
            "src/lib.rs:1",
            "src/main.rs:2",
            "src/util/mod.rs:1"
        ]
    );
    assert_eq!(results.total_matches, 4);
    assert_eq!(results.files_with_matches, 4);
    assert_eq!(results.matches[1].text, "pub fn needle() {}");
    // Indentation is trimmed.
    assert_eq!(results.matches[2].text, "needle();");
}

#[test]
fn gitignore_in_a_subdirectory_applies_below_it() {
    let dir = project();
    write(dir.path(), "src/.gitignore", "util/\n");
    let results = search(dir.path(), &SearchRequest::new("needle")).unwrap();
    assert!(
        !paths(&results.matches)
            .iter()
            .any(|p| p.starts_with("src/util"))
    );
    assert_eq!(results.total_matches, 3);
}

#[test]
fn case_insensitive_finds_both_cases() {
    let dir = project();
    let req = SearchRequest {
        case_insensitive: true,
        ..SearchRequest::new("needle")
    };
    let results = search(dir.path(), &req).unwrap();
    assert_eq!(results.total_matches, 5);
    assert!(paths(&results.matches).contains(&"src/lib.rs:2".to_owned()));
}

#[test]
fn globs_include_and_exclude() {
    let dir = project();
    let only_rust = SearchRequest {
        globs: vec!["*.rs".into()],
        ..SearchRequest::new("needle")
    };
    let results = search(dir.path(), &only_rust).unwrap();
    assert_eq!(
        paths(&results.matches),
        ["src/lib.rs:1", "src/main.rs:2", "src/util/mod.rs:1"]
    );

    let rust_but_not_util = SearchRequest {
        globs: vec!["*.rs".into(), "!src/util/**".into()],
        ..SearchRequest::new("needle")
    };
    let results = search(dir.path(), &rust_but_not_util).unwrap();
    assert_eq!(paths(&results.matches), ["src/lib.rs:1", "src/main.rs:2"]);

    let exclude_only = SearchRequest {
        globs: vec!["!*.md".into()],
        ..SearchRequest::new("needle")
    };
    let results = search(dir.path(), &exclude_only).unwrap();
    assert_eq!(results.total_matches, 3);
}

#[test]
fn globs_are_relative_to_the_root_when_a_path_is_given() {
    let dir = project();
    let req = SearchRequest {
        path: Some("src".into()),
        globs: vec!["src/util/*.rs".into()],
        ..SearchRequest::new("needle")
    };
    let results = search(dir.path(), &req).unwrap();
    assert_eq!(paths(&results.matches), ["src/util/mod.rs:1"]);
}

#[test]
fn literal_and_regex_differ() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.txt", "a.c\nabc\nfoo(bar\n");
    let regex = search(dir.path(), &SearchRequest::new("a.c")).unwrap();
    assert_eq!(regex.total_matches, 2);
    let literal = SearchRequest {
        literal: true,
        ..SearchRequest::new("a.c")
    };
    let literal = search(dir.path(), &literal).unwrap();
    assert_eq!(paths(&literal.matches), ["a.txt:1"]);

    let paren = SearchRequest {
        literal: true,
        ..SearchRequest::new("foo(")
    };
    assert_eq!(search(dir.path(), &paren).unwrap().total_matches, 1);
}

#[test]
fn bad_regex_and_empty_pattern_are_clear_errors() {
    let dir = project();
    let err = search(dir.path(), &SearchRequest::new("foo(")).unwrap_err();
    assert!(matches!(err, SearchError::InvalidPattern { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("foo(") && message.contains("literal=true"),
        "{message}"
    );
    assert!(matches!(
        search(dir.path(), &SearchRequest::new("")).unwrap_err(),
        SearchError::EmptyPattern
    ));
    let bad_glob = SearchRequest {
        globs: vec!["src/[".into()],
        ..SearchRequest::new("x")
    };
    assert!(matches!(
        search(dir.path(), &bad_glob).unwrap_err(),
        SearchError::InvalidGlob { .. }
    ));
}

#[test]
fn search_path_must_stay_inside_the_workspace() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("ws");
    write(&root, "src/a.rs", "needle\n");
    write(outer.path(), "outside/b.rs", "needle\n");

    let inside = SearchRequest {
        path: Some("src".into()),
        ..SearchRequest::new("needle")
    };
    assert_eq!(
        paths(&search(&root, &inside).unwrap().matches),
        ["src/a.rs:1"]
    );
    let one_file = SearchRequest {
        path: Some("src/a.rs".into()),
        ..SearchRequest::new("needle")
    };
    assert_eq!(
        paths(&search(&root, &one_file).unwrap().matches),
        ["src/a.rs:1"]
    );

    for escaping in [
        "../outside",
        "../outside/missing",
        outer.path().join("outside").to_str().unwrap(),
        "/",
    ] {
        let req = SearchRequest {
            path: Some(escaping.into()),
            ..SearchRequest::new("needle")
        };
        let err = search(&root, &req).unwrap_err();
        assert!(
            matches!(err, SearchError::OutsideWorkspace { .. }),
            "{escaping}: {err:?}"
        );
    }

    let missing = SearchRequest {
        path: Some("src/nope".into()),
        ..SearchRequest::new("needle")
    };
    assert!(matches!(
        search(&root, &missing).unwrap_err(),
        SearchError::PathNotFound { .. }
    ));
}

#[cfg(unix)]
#[test]
fn a_symlink_that_escapes_is_refused_and_never_followed() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("ws");
    write(&root, "src/a.rs", "needle\n");
    write(outer.path(), "outside/b.rs", "needle\n");
    std::os::unix::fs::symlink(outer.path().join("outside"), root.join("link")).unwrap();

    let req = SearchRequest {
        path: Some("link".into()),
        ..SearchRequest::new("needle")
    };
    assert!(matches!(
        search(&root, &req).unwrap_err(),
        SearchError::OutsideWorkspace { .. }
    ));
    // Walking the root does not follow the link either.
    let all = search(&root, &SearchRequest::new("needle")).unwrap();
    assert_eq!(paths(&all.matches), ["src/a.rs:1"]);
}

/// The walker opens each directory's `.gitignore` and `.ignore` itself, following links and
/// reading them whole: a stranger's `.gitignore -> /dev/zero` grew one line until memory ran
/// out, a FIFO hung the search. Such a directory is left out, and the report says so; at the
/// search's start (or above it) the search is refused with the file named.
#[test]
fn an_ignore_file_that_is_not_a_plain_file_is_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "src/a.rs", "needle\n");
    write(root, "vendor/b.rs", "needle\n");
    write(root, "piped/c.rs", "needle\n");
    write(root, "big/d.rs", "needle\n");
    std::os::unix::fs::symlink("/dev/zero", root.join("vendor/.gitignore")).unwrap();
    let fifo = root.join("piped/.ignore");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    fs::write(
        root.join("big/.gitignore"),
        vec![b'x'; pith_search::IGNORE_FILE_MAX as usize + 1],
    )
    .unwrap();

    let report = search_workspace(
        root,
        &SearchRequest::new("needle"),
        None,
        RankPolicy::default(),
    )
    .unwrap();
    assert_eq!(paths(&report.matches), ["src/a.rs:1"]);
    assert_eq!(report.not_searched.total, 3);
    let text = report.render();
    for said in [
        "Not searched: ",
        "vendor (its .gitignore is a link out of the workspace)",
        "piped (its .ignore is not a regular file)",
        "big (its .gitignore is larger than 1 MiB)",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }

    // At the start: refused, naming it.
    let inside = SearchRequest {
        path: Some("vendor".into()),
        ..SearchRequest::new("needle")
    };
    let err = search(root, &inside).unwrap_err();
    assert!(
        matches!(&err, SearchError::UnsafeIgnoreFile { path, .. } if path == "\"vendor\""),
        "{err}"
    );
    // A link to a plain file inside the workspace is read (a monorepo's shared ignore file);
    // one out of it is not.
    write(root, "shared/ignore-rules", "*.tmp\n");
    write(root, "src/x.tmp", "needle\n");
    std::os::unix::fs::symlink(root.join("shared/ignore-rules"), root.join("src/.ignore")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "rules", "*.rs\n");
    write(root, "docs/y.md", "needle\n");
    std::os::unix::fs::symlink(outside.path().join("rules"), root.join("docs/.gitignore")).unwrap();
    let report = search_workspace(
        root,
        &SearchRequest::new("needle"),
        None,
        RankPolicy::default(),
    )
    .unwrap();
    assert_eq!(
        paths(&report.matches),
        ["src/a.rs:1"],
        "x.tmp ignored through the link"
    );
    assert!(
        report
            .render()
            .contains("docs (its .gitignore is a link out of the workspace)"),
        "{}",
        report.render()
    );
    std::os::unix::fs::symlink("/dev/zero", root.join(".ignore")).unwrap();
    let err = search(root, &SearchRequest::new("needle")).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "not searched: the workspace root: its .ignore is a link out of the workspace"
        ),
        "{err}"
    );
}

/// `.git/info/exclude` is not read (the walker reached it through a `.git` file's `gitdir:`,
/// anywhere on disk), and a line longer than the searcher holds skips its file, not the search.
#[test]
fn info_exclude_is_not_read_and_a_huge_line_skips_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, ".git/info/exclude", "excluded.rs\n");
    write(root, "excluded.rs", "needle\n");
    write(root, "src/a.rs", "needle\n");
    let mut huge = vec![b'x'; 17 << 20];
    huge.extend_from_slice(b" needle\n");
    write(root, "huge.txt", huge);
    let found = search(root, &SearchRequest::new("needle")).unwrap();
    assert_eq!(paths(&found.matches), ["excluded.rs:1", "src/a.rs:1"]);
}

/// A file name is a stranger's text: a line break in one must not add a line to the listing.
#[test]
fn a_control_character_in_a_file_name_is_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "src/we\x1b[31mird\nx.rs:9: fake", "needle\n");
    let report = search_workspace(
        root,
        &SearchRequest::new("needle"),
        None,
        RankPolicy::default(),
    )
    .unwrap();
    assert_eq!(report.matches.len(), 1);
    let text = report.render();
    assert!(!text.contains('\x1b'), "{text:?}");
    assert_eq!(
        text.lines().next(),
        Some("src/we\\u{1b}[31mird\\nx.rs:9: fake:1: needle")
    );
}

#[test]
fn binary_files_are_skipped_whole() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "text.rs", "needle\n");
    write(dir.path(), "early.bin", b"\x00\x01needle\nneedle\n");
    // NUL far beyond the first read buffer: the matches before it must not count either.
    let mut late = b"needle\n".repeat(10);
    late.extend(std::iter::repeat_n(b'x', 1 << 20));
    late.extend(b"\x00needle\n");
    write(dir.path(), "late.dat", late);

    let results = search(dir.path(), &SearchRequest::new("needle")).unwrap();
    assert_eq!(paths(&results.matches), ["text.rs:1"]);
    assert_eq!(results.total_matches, 1);
}

/// 30 files x 4 matching lines = 120 matches, plus non-matching lines.
#[expect(
    clippy::unwrap_used,
    reason = "test setup: a failure should fail the test"
)]
fn many_matches() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in 0..30 {
        let mut body = String::new();
        for line in 0..8 {
            if line % 2 == 0 {
                body.push_str(&format!("let hit_{file}_{line} = target;\n"));
            } else {
                body.push_str("nothing here\n");
            }
        }
        write(dir.path(), &format!("d{}/f{file:02}.rs", file % 3), body);
    }
    dir
}

#[test]
fn pages_are_consistent_and_totals_exact() {
    let dir = many_matches();
    let everything = SearchRequest {
        max_results: 500,
        ..SearchRequest::new("target")
    };
    let all = search(dir.path(), &everything).unwrap();
    assert_eq!(all.total_matches, 120);
    assert_eq!(all.files_with_matches, 30);
    assert_eq!(all.matches.len(), 120);
    let mut sorted = all.matches.clone();
    sorted.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    assert_eq!(
        sorted, all.matches,
        "results come sorted by path, then line"
    );

    let mut paged = Vec::new();
    for offset in [0, 50, 100] {
        let req = SearchRequest {
            offset,
            ..SearchRequest::new("target")
        };
        let page = search(dir.path(), &req).unwrap();
        assert_eq!(page.total_matches, 120);
        assert_eq!(page.offset, offset);
        paged.extend(page.matches);
    }
    assert_eq!(paged, all.matches);

    let beyond = SearchRequest {
        offset: 500,
        ..SearchRequest::new("target")
    };
    let beyond = search(dir.path(), &beyond).unwrap();
    assert!(beyond.matches.is_empty());
    assert_eq!(beyond.total_matches, 120);
}

#[test]
fn repeated_searches_return_identical_pages() {
    let dir = many_matches();
    let req = SearchRequest {
        offset: 37,
        max_results: 20,
        ..SearchRequest::new("hit_")
    };
    let first = search(dir.path(), &req).unwrap();
    for _ in 0..5 {
        assert_eq!(search(dir.path(), &req).unwrap(), first);
    }
}

#[test]
fn max_results_is_clamped_and_zero_counts_only() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "big.txt", "x\n".repeat(2000));
    let huge = SearchRequest {
        max_results: 1_000_000,
        ..SearchRequest::new("x")
    };
    let results = search(dir.path(), &huge).unwrap();
    assert_eq!(results.matches.len(), pith_search::MAX_RESULTS_LIMIT);
    assert_eq!(results.total_matches, 2000);

    let too_deep = SearchRequest {
        offset: pith_search::MAX_OFFSET + 1,
        ..SearchRequest::new("x")
    };
    assert!(matches!(
        search(dir.path(), &too_deep).unwrap_err(),
        SearchError::OffsetTooLarge { .. }
    ));

    let count_only = SearchRequest {
        max_results: 0,
        ..SearchRequest::new("x")
    };
    let report = search_workspace(dir.path(), &count_only, None, RankPolicy::default()).unwrap();
    assert!(report.matches.is_empty());
    assert_eq!(
        report.render(),
        "2000 matches in 1 file (max_results=0: counts only).\n"
    );
}

#[test]
fn long_lines_are_cut_and_the_cut_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let line = format!("{}needle{}\n", "a".repeat(5000), "b".repeat(5000));
    write(dir.path(), "min.js", line);
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("needle"),
        None,
        RankPolicy::default(),
    )
    .unwrap();
    let found = &report.matches[0];
    assert!(found.truncated);
    assert!(found.text.contains("needle"));
    assert_eq!(found.text.chars().count(), MAX_LINE_CHARS + 2);
    assert!(
        report
            .render()
            .contains("Long lines are cut to 200 characters")
    );
}

#[test]
fn render_says_how_many_more_and_how_to_get_them() {
    let dir = many_matches();
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("target"),
        None,
        RankPolicy::default(),
    )
    .unwrap();
    assert_eq!(report.matches.len(), 50);
    assert_eq!(report.withheld, 70);
    assert_eq!(report.next_offset, Some(50));
    let text = report.render();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 51);
    assert_eq!(lines[0], "d0/f00.rs:1: let hit_0_0 = target;");
    assert_eq!(
        lines[50],
        "Showing matches 1-50 of 120 matches in 30 files (sorted by path, then line). \
         70 more: pass offset=50 for the next page, or narrow with globs/path."
    );

    let last = SearchRequest {
        offset: 100,
        ..SearchRequest::new("target")
    };
    let text = search_workspace(dir.path(), &last, None, RankPolicy::default())
        .unwrap()
        .render();
    assert!(
        text.ends_with(
            "Showing matches 101-120 of 120 matches in 30 files (sorted by path, then line). \
             This is the last page.\n"
        ),
        "{text}"
    );

    let none = search_workspace(
        dir.path(),
        &SearchRequest::new("zzz"),
        None,
        RankPolicy::default(),
    )
    .unwrap();
    assert_eq!(
        none.render(),
        "No matches (ignored, hidden and binary files are not searched).\n"
    );
    let small = SearchRequest {
        path: Some("d1/f01.rs".into()),
        ..SearchRequest::new("target")
    };
    let small = search_workspace(dir.path(), &small, None, RankPolicy::default()).unwrap();
    assert!(small.render().ends_with("\n4 matches in 1 file.\n"));
}

/// A scripted ranking answer, given the number of candidates.
/// Rank above 40 matches, show 40.
const FORTY: RankPolicy = RankPolicy {
    threshold: 40,
    shown: 40,
};

/// The scripted answer for (candidates, wanted).
type Answer = fn(usize, usize) -> Result<Vec<usize>, String>;

/// A ranker that returns a scripted answer and counts its calls.
struct Scripted {
    answer: Answer,
    calls: Cell<usize>,
    capacity: usize,
}

impl Scripted {
    fn new(answer: Answer) -> Self {
        Self {
            answer,
            calls: Cell::new(0),
            capacity: 200,
        }
    }
}

impl Ranker for Scripted {
    fn name(&self) -> String {
        "local model scripted-model".to_owned()
    }
    fn max_candidates(&self) -> usize {
        self.capacity
    }
    fn rank(
        &self,
        query: &str,
        candidates: &[Candidate],
        want: usize,
    ) -> Result<Vec<usize>, String> {
        assert_eq!(query, "target");
        for (i, candidate) in candidates.iter().enumerate() {
            assert_eq!(candidate.id, i);
            assert!(!candidate.summary.contains('\n'));
        }
        self.calls.set(self.calls.get() + 1);
        (self.answer)(candidates.len(), want)
    }
}

fn reversed(n: usize, want: usize) -> Result<Vec<usize>, String> {
    Ok((0..n).rev().take(want).collect())
}

#[test]
fn a_ranking_reorders_and_says_what_it_withheld() {
    let dir = many_matches();
    let ranker = Scripted::new(reversed);
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("target"),
        Some(&ranker),
        FORTY,
    )
    .unwrap();
    assert_eq!(ranker.calls.get(), 1);
    assert_eq!(
        report.ranking,
        Ranking::Ranked {
            by: "local model scripted-model".into()
        }
    );
    assert_eq!(report.matches.len(), 40);
    assert_eq!(report.withheld, 80);
    assert_eq!(report.next_offset, None);
    assert_eq!(report.matches[0].path, "d2/f29.rs");
    assert_eq!(report.matches[0].line, 7);
    let text = report.render();
    assert!(text.starts_with(
        "pith: ranked by local model scripted-model: the 40 most relevant of 120 matches in \
         30 files, most relevant first; 80 withheld. Pass all=true to list every match in path order.\n\
         d2/f29.rs:7: let hit_29_6 = target;\n"
    ), "{text}");
}

#[test]
fn the_shown_prefix_is_its_own_setting_within_the_page() {
    let dir = many_matches();
    let ranker = Scripted::new(reversed);
    let policy = RankPolicy {
        threshold: 40,
        shown: 12,
    };
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("target"),
        Some(&ranker),
        policy,
    )
    .unwrap();
    assert_eq!(report.matches.len(), 12);
    assert_eq!(report.withheld, 108);
    assert!(report.render().starts_with(
        "pith: ranked by local model scripted-model: the 12 most relevant of 120 matches"
    ));
    // A smaller page caps what is shown (and asked for).
    let small_page = SearchRequest {
        max_results: 5,
        ..SearchRequest::new("target")
    };
    let report = search_workspace(dir.path(), &small_page, Some(&ranker), policy).unwrap();
    assert_eq!(report.matches.len(), 5);
    assert_eq!(report.withheld, 115);
    // A ranker may show fewer than it was allowed (e.g. all lines of the files it picked).
    let fewer = Scripted::new(|n, _| Ok(vec![n - 1, 0, 3]));
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("target"),
        Some(&fewer),
        policy,
    )
    .unwrap();
    assert_eq!(report.matches.len(), 3);
    assert_eq!(report.withheld, 117);
    assert!(report.render().starts_with(
        "pith: ranked by local model scripted-model: the 3 most relevant of 120 matches"
    ));
}

#[test]
fn ranking_applies_only_above_the_threshold_and_on_a_first_page() {
    let dir = many_matches();
    let ranker = Scripted::new(reversed);
    let at_threshold = search_workspace(
        dir.path(),
        &SearchRequest::new("target"),
        Some(&ranker),
        RankPolicy {
            threshold: 120,
            shown: 40,
        },
    )
    .unwrap();
    assert_eq!(at_threshold.ranking, Ranking::NotApplied);
    assert_eq!(ranker.calls.get(), 0);

    for req in [
        SearchRequest {
            all: true,
            ..SearchRequest::new("target")
        },
        SearchRequest {
            offset: 50,
            ..SearchRequest::new("target")
        },
    ] {
        let report =
            search_workspace(dir.path(), &req, Some(&ranker), RankPolicy::default()).unwrap();
        assert_eq!(report.ranking, Ranking::NotApplied);
        assert_eq!(
            report.matches[0].path,
            if req.all { "d0/f00.rs" } else { "d1/f07.rs" }
        );
    }
    assert_eq!(ranker.calls.get(), 0);

    let small_capacity = Scripted {
        capacity: 100,
        ..Scripted::new(reversed)
    };
    let too_broad = search_workspace(
        dir.path(),
        &SearchRequest::new("target"),
        Some(&small_capacity),
        RankPolicy::default(),
    )
    .unwrap();
    assert_eq!(too_broad.ranking, Ranking::NotApplied);
    assert_eq!(small_capacity.calls.get(), 0);
    assert_eq!(too_broad.next_offset, Some(50));
}

#[test]
fn a_bad_ranking_fails_open_with_nothing_withheld_beyond_the_page() {
    let dir = many_matches();
    let plain = search_workspace(
        dir.path(),
        &SearchRequest::new("target"),
        None,
        RankPolicy::default(),
    )
    .unwrap();
    let not_a_selection = "its answer was not 1-10 distinct result numbers";
    let answers: [(Answer, &str); 6] = [
        (
            |_, _| Err("the model is still loading".to_owned()),
            "the model is still loading",
        ),
        (|_, _| Ok(Vec::new()), not_a_selection),
        (|_, want| Ok((0..want + 1).collect()), not_a_selection),
        (
            |_, want| Ok((0..want).map(|i| i.min(want - 2)).collect()),
            not_a_selection,
        ),
        (|n, want| Ok((n - want + 1..=n).collect()), not_a_selection),
        (
            |_, _| Err("line one\nline two".to_owned()),
            "line one\nline two",
        ),
    ];
    for (answer, reason) in answers {
        let ranker = Scripted::new(answer);
        let report = search_workspace(
            dir.path(),
            &SearchRequest::new("target"),
            Some(&ranker),
            RankPolicy::default(),
        )
        .unwrap();
        assert_eq!(ranker.calls.get(), 1);
        assert_eq!(
            report.ranking,
            Ranking::FailedOpen {
                by: "local model scripted-model".into(),
                reason: reason.to_owned(),
            }
        );
        assert_eq!(report.matches, plain.matches);
        assert_eq!(report.withheld, plain.withheld);
        // The plain page, below one line that says why it is not ranked.
        let text = report.render();
        let (first, rest) = text.split_once('\n').unwrap();
        let shown = reason.replace('\n', " ");
        assert_eq!(
            first,
            format!(
                "pith: not ranked by local model scripted-model ({shown}); matches in path order."
            )
        );
        assert_eq!(rest, plain.render());
    }
}

#[test]
fn paging_stops_at_the_offset_limit_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "huge.txt", "x\n".repeat(10_100));
    let deep = SearchRequest {
        offset: pith_search::MAX_OFFSET,
        ..SearchRequest::new("x")
    };
    let report = search_workspace(dir.path(), &deep, None, RankPolicy::default()).unwrap();
    assert_eq!(report.matches[0].line, 10_001);
    assert!(
        report.render().ends_with(
            "Showing matches 10001-10050 of 10100 matches in 1 file (sorted by path, then line). \
             50 more, past the paging limit (offset 10000): narrow with globs/path.\n"
        ),
        "{}",
        report.render()
    );
}
