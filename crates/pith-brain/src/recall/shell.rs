//! Reading a shell command line as far as recall needs: which commands it runs (is it a
//! verdict command?) and, for the simplest reads (`cat FILE`, `sed -n '1,80p' FILE`), which file
//! it shows.
//!
//! This is not a shell. It splits at the operators (`&&`, `||`, `;`, `|`, `&`, newlines), honours
//! quotes and backslashes, drops redirections, and marks every word a shell would expand
//! (`$`, backquotes, globs, braces, `~`), so that a path is only ever taken from a command whose
//! meaning is certain without running it.

/// One simple command of a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its words, quotes removed, redirections left out.
    pub words: Vec<Word>,
    /// It redirects input or output somewhere.
    pub redirects: bool,
    /// The operator that ends it (`None` for the last).
    pub then: Option<Op>,
}

/// A word of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The text with quotes and escapes removed.
    pub text: String,
    /// A shell would expand it (parameters, command substitution, globs, braces, `~`): its
    /// text is not what the command sees.
    pub expands: bool,
}

/// What joins two simple commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `|`
    Pipe,
    /// `&&`
    And,
    /// `||`
    Or,
    /// `;` or a newline
    Seq,
    /// `&`
    Background,
}

/// Split `command` into simple commands. `None` when quoting is unbalanced (the line cannot be
/// read with certainty).
pub fn segments(command: &str) -> Option<Vec<Segment>> {
    let mut lexer = Lexer::default();
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => lexer.single_quoted(&mut chars)?,
            '"' => lexer.double_quoted(&mut chars)?,
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(other) => {
                    lexer.in_word = true;
                    lexer.word.push(other);
                }
                None => {}
            },
            ' ' | '\t' | '\r' => lexer.end_word(),
            '\n' | ';' => lexer.end_segment(Some(Op::Seq)),
            '|' => {
                let op = pipe_or_or(&mut chars);
                lexer.end_segment(Some(op));
            }
            '&' => lexer.ampersand(&mut chars),
            '>' | '<' => {
                // A word of digits right before is the descriptor (`2>`), not an argument.
                if lexer.in_word && !lexer.expands && lexer.word.chars().all(|d| d.is_ascii_digit())
                {
                    lexer.word.clear();
                    lexer.in_word = false;
                } else {
                    lexer.end_word();
                }
                lexer.redirect(&mut chars);
            }
            '#' if !lexer.in_word => {
                // A comment runs to the end of the line.
                while chars.peek().is_some_and(|&n| n != '\n') {
                    chars.next();
                }
            }
            '$' | '`' | '*' | '?' | '[' | ']' | '(' | ')' | '{' | '}' | '~' | '!' => {
                lexer.in_word = true;
                lexer.expands = true;
                lexer.word.push(c);
            }
            other => {
                lexer.in_word = true;
                lexer.word.push(other);
            }
        }
    }
    lexer.end_segment(None);
    Some(lexer.done)
}

/// What the lexer reads a command from.
type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After a `|`: `||` (or), else a pipe (`|&` pipes stderr too).
fn pipe_or_or(chars: &mut Chars<'_>) -> Op {
    if chars.peek() == Some(&'|') {
        chars.next();
        return Op::Or;
    }
    if chars.peek() == Some(&'&') {
        chars.next();
    }
    Op::Pipe
}

#[derive(Default)]
struct Lexer {
    done: Vec<Segment>,
    words: Vec<Word>,
    word: String,
    in_word: bool,
    expands: bool,
    redirects: bool,
    /// The next word is a redirection's target.
    drop_next: bool,
}

impl Lexer {
    /// The rest of a `'...'` word; `None` when the quote is not closed.
    fn single_quoted(&mut self, chars: &mut Chars<'_>) -> Option<()> {
        self.in_word = true;
        loop {
            match chars.next()? {
                '\'' => return Some(()),
                other => self.word.push(other),
            }
        }
    }

    /// The rest of a `"..."` word; `None` when the quote is not closed.
    fn double_quoted(&mut self, chars: &mut Chars<'_>) -> Option<()> {
        self.in_word = true;
        loop {
            match chars.next()? {
                '"' => return Some(()),
                '\\' => match chars.next()? {
                    // Only these are escapes inside double quotes.
                    e @ ('"' | '\\' | '$' | '`') => self.word.push(e),
                    '\n' => {}
                    other => {
                        self.word.push('\\');
                        self.word.push(other);
                    }
                },
                e @ ('$' | '`') => {
                    self.expands = true;
                    self.word.push(e);
                }
                other => self.word.push(other),
            }
        }
    }

    /// After a `&`: `&&` (and), `&>file` (both streams to a file), else in the background.
    fn ampersand(&mut self, chars: &mut Chars<'_>) {
        let op = if chars.peek() == Some(&'&') {
            chars.next();
            Op::And
        } else if chars.peek() == Some(&'>') {
            self.end_word();
            self.redirect(chars);
            return;
        } else {
            Op::Background
        };
        self.end_segment(Some(op));
    }

    fn end_word(&mut self) {
        if self.in_word {
            let word = Word {
                text: std::mem::take(&mut self.word),
                expands: self.expands,
            };
            if self.drop_next {
                self.drop_next = false;
            } else {
                self.words.push(word);
            }
        }
        self.in_word = false;
        self.expands = false;
    }

    fn end_segment(&mut self, then: Option<Op>) {
        self.end_word();
        self.drop_next = false;
        if self.words.is_empty() && !self.redirects {
            // `a && && b` or a trailing operator: keep the operator on the previous segment.
            if let (Some(last), Some(op)) = (self.done.last_mut(), then) {
                last.then = Some(op);
            }
            return;
        }
        self.done.push(Segment {
            words: std::mem::take(&mut self.words),
            redirects: std::mem::take(&mut self.redirects),
            then,
        });
    }

    /// After `>` or `<`: the rest of the operator (`>>`, `>&2`, `<<`, `<&-`), then its target
    /// is the next word unless the operator named a descriptor.
    fn redirect(&mut self, chars: &mut Chars<'_>) {
        self.redirects = true;
        while chars.peek().is_some_and(|&n| n == '>' || n == '<') {
            chars.next();
        }
        if chars.peek() == Some(&'&') {
            chars.next();
            while chars
                .peek()
                .is_some_and(|&n| n.is_ascii_digit() || n == '-')
            {
                chars.next();
            }
            return;
        }
        self.drop_next = true;
    }
}

impl Segment {
    /// The words a command runs with, once leading variable assignments and wrappers that only
    /// change how it runs (`env`, `time`, `nice`, `timeout 60`, `command`, `exec`) are set aside.
    pub fn command_words(&self) -> &[Word] {
        let mut words = self.words.as_slice();
        loop {
            let Some((first, rest)) = words.split_first() else {
                return words;
            };
            if is_assignment(&first.text) {
                words = rest;
                continue;
            }
            match first.text.as_str() {
                "env" | "time" | "command" | "exec" | "nohup" => words = rest,
                "nice" => {
                    words = rest;
                    if words.first().is_some_and(|w| w.text == "-n") {
                        words = words.get(2..).unwrap_or(&[]);
                    } else if words.first().is_some_and(|w| w.text.starts_with('-')) {
                        words = &words[1..];
                    }
                }
                "timeout" => {
                    words = rest;
                    while words.first().is_some_and(|w| w.text.starts_with('-')) {
                        words = &words[1..];
                    }
                    // The duration.
                    words = words.get(1..).unwrap_or(&[]);
                }
                _ => return words,
            }
        }
    }
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// The program's name as a verdict list writes it: the file name of a path
/// (`./node_modules/.bin/jest` is `jest`).
fn program_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// The words after runners that only start a tool (`python -m`, `uv run`, `npx`, `pnpm exec`,
/// `bunx`, ...), with the program reduced to its file name.
fn tool_words(segment: &Segment) -> Vec<&str> {
    let mut words: Vec<&str> = segment
        .command_words()
        .iter()
        .map(|w| w.text.as_str())
        .collect();
    loop {
        let first = words.first().map(|w| program_name(w));
        let skip = match (first, words.get(1).copied()) {
            (Some(p), Some("-m")) if p.starts_with("python") || p == "py" => 2,
            (Some("uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye"), Some("run")) => 2,
            (Some("pnpm" | "yarn"), Some("exec" | "dlx")) => 2,
            (Some("bun"), Some("x")) => 2,
            (Some("npx" | "pnpx" | "bunx"), Some(_)) => {
                // `npx --yes jest`
                1 + words[1..].iter().take_while(|w| w.starts_with('-')).count()
            }
            _ => 0,
        };
        if skip == 0 || skip >= words.len() {
            break;
        }
        words.drain(..skip);
    }
    if let Some(first) = words.first_mut() {
        *first = program_name(first);
    }
    // `cargo +nightly test`
    if words.first() == Some(&"cargo") {
        let toolchain = words
            .iter()
            .skip(1)
            .take_while(|w| w.starts_with('+'))
            .count();
        words.drain(1..1 + toolchain);
    }
    words
}

/// Whether `segment` runs one of `patterns` (each a list of leading words, such as
/// `["cargo", "test"]`). A pattern's last word also matches a word that continues it after a
/// `:` (`npm run test:unit` for `npm run test`).
pub fn runs_any(segment: &Segment, patterns: &[Vec<String>]) -> bool {
    let words = tool_words(segment);
    patterns.iter().any(|pattern| {
        !pattern.is_empty()
            && words.len() >= pattern.len()
            && pattern.iter().enumerate().all(|(i, p)| {
                let w = words[i];
                w == p
                    || (i + 1 == pattern.len()
                        && w.strip_prefix(p.as_str())
                            .is_some_and(|rest| rest.starts_with(':')))
            })
    })
}

/// The one file a read-only command shows, when the command line makes it certain: `cat`,
/// `nl`, `head`/`tail` (with `-n N`) or `sed -n 'A,Bp'` of one file, optionally piped into
/// more of the same with no file of their own. Anything else (two files, a redirection, a
/// word the shell would expand, another operator) is `None`.
pub fn file_shown(command: &str) -> Option<String> {
    let segments = segments(command)?;
    let (first, rest) = segments.split_first()?;
    if segments.iter().any(|s| s.redirects)
        || segments[..segments.len() - 1]
            .iter()
            .any(|s| s.then != Some(Op::Pipe))
        || segments.last().is_some_and(|s| s.then.is_some())
    {
        return None;
    }
    let file = reader_operand(first)?;
    // Later stages only filter what the first one printed.
    if rest.iter().any(|s| reader_operand(s) != Some(None)) {
        return None;
    }
    file
}

/// For a read-only viewer (`cat`, `nl`, `head`, `tail`, `sed -n`): `Some(Some(file))` when it
/// reads exactly one certain file, `Some(None)` when it reads only its input, and `None` when
/// it is something else or its operands are not certain.
fn reader_operand(segment: &Segment) -> Option<Option<String>> {
    let words = segment.command_words();
    if words.iter().any(|w| w.expands) {
        return None;
    }
    let (program, args) = words.split_first()?;
    let args: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    let operands: Vec<&str> = match program_name(&program.text) {
        "cat" | "nl" => {
            if args.iter().any(|a| a.starts_with('-') && !is_view_flag(a)) {
                return None;
            }
            args.iter()
                .copied()
                .filter(|a| !a.starts_with('-'))
                .collect()
        }
        "head" | "tail" => {
            let mut operands = Vec::new();
            let mut i = 0;
            while i < args.len() {
                let a = args[i];
                if a == "-n" || a == "-c" {
                    if !args
                        .get(i + 1)?
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '+')
                    {
                        return None;
                    }
                    i += 2;
                    continue;
                }
                if let Some(flag) = a.strip_prefix('-') {
                    let n = flag.trim_start_matches(['n', 'c']);
                    if flag.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
                        return None;
                    }
                } else {
                    operands.push(a);
                }
                i += 1;
            }
            operands
        }
        "sed" => {
            let (flag, script, rest) = match args.as_slice() {
                [flag, script, rest @ ..] => (*flag, *script, rest),
                _ => return None,
            };
            if flag != "-n" || !is_print_range(script) {
                return None;
            }
            rest.to_vec()
        }
        _ => return None,
    };
    match operands.as_slice() {
        [] => Some(None),
        [one] if *one != "-" => Some(Some((*one).to_owned())),
        _ => None,
    }
}

/// Flags of `cat` and `nl` that change only how lines are shown (`-n`, `-ba`, `-A`).
fn is_view_flag(flag: &str) -> bool {
    let letters = flag.trim_start_matches('-');
    !letters.is_empty() && letters.chars().all(|c| "nbsvAETetwa".contains(c))
}

/// `12p`, `1,80p`, `$p`, `10,$p`.
fn is_print_range(script: &str) -> bool {
    let Some(range) = script.strip_suffix('p') else {
        return false;
    };
    let address = |a: &str| a == "$" || (!a.is_empty() && a.chars().all(|c| c.is_ascii_digit()));
    match range.split_once(',') {
        Some((a, b)) => address(a) && address(b),
        None => address(range),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(command: &str) -> Vec<Vec<String>> {
        segments(command)
            .unwrap()
            .iter()
            .map(|s| s.words.iter().map(|w| w.text.clone()).collect())
            .collect()
    }

    #[test]
    fn splits_at_operators_and_keeps_quoted_text() {
        assert_eq!(
            words("cd 'my dir' && FOO=1 pytest -q \"a b.py\"; echo x|wc -l"),
            [
                vec!["cd", "my dir"],
                vec!["FOO=1", "pytest", "-q", "a b.py"],
                vec!["echo", "x"],
                vec!["wc", "-l"],
            ]
        );
        assert_eq!(
            words("cargo test 2>&1 | tail -n 50"),
            [vec!["cargo", "test"], vec!["tail", "-n", "50"]]
        );
        assert_eq!(words("make > log.txt"), [vec!["make"]]);
        assert_eq!(segments("echo 'unterminated"), None);
        assert_eq!(words("ls # a comment"), [vec!["ls"]]);
    }

    fn patterns(list: &[&str]) -> Vec<Vec<String>> {
        list.iter()
            .map(|p| p.split_whitespace().map(str::to_owned).collect())
            .collect()
    }

    fn verdict(command: &str) -> bool {
        let p = patterns(&[
            "pytest",
            "cargo test",
            "npm run test",
            "go test",
            "make",
            "jest",
        ]);
        segments(command).unwrap().iter().any(|s| runs_any(s, &p))
    }

    #[test]
    fn finds_verdict_commands_behind_runners_and_wrappers() {
        for yes in [
            "pytest -q test_calc.py",
            "python3 -m pytest -q",
            "uv run pytest",
            ".venv/bin/pytest tests/",
            "cd sub && RUST_BACKTRACE=1 cargo test --lib",
            "cargo +nightly test",
            "timeout 60 go test ./...",
            "npx --yes jest calc",
            "npm run test:unit",
            "make -j4 check",
        ] {
            assert!(verdict(yes), "{yes}");
        }
        for no in [
            "cargo build",
            "echo pytest",
            "cat Makefile",
            "npm run testing",
            "gotest",
            "git commit -m 'make tests pass'",
        ] {
            assert!(!verdict(no), "{no}");
        }
    }

    #[test]
    fn a_file_is_shown_only_when_the_command_makes_it_certain() {
        for (command, file) in [
            ("cat calc.py", "calc.py"),
            ("cat -n src/lib.rs", "src/lib.rs"),
            ("sed -n '1,200p' calc.py", "calc.py"),
            ("sed -n 40p 'my file.py'", "my file.py"),
            ("nl -ba calc.py | sed -n '1,80p'", "calc.py"),
            ("head -n 20 README.md", "README.md"),
            ("tail -50 log.txt", "log.txt"),
        ] {
            assert_eq!(file_shown(command).as_deref(), Some(file), "{command}");
        }
        for command in [
            "cat a.py b.py",
            "cat *.py",
            "cat $FILE",
            "cat ~/x",
            "cat calc.py > copy.py",
            "cd src && cat lib.rs",
            "cat calc.py; rm calc.py",
            "sed -i 's/a/b/' calc.py",
            "sed -n '/def/p' calc.py",
            "grep add calc.py",
            "cat calc.py | python3 -",
            "cat",
            "cat -",
            "cat \"$(ls)\"",
        ] {
            assert_eq!(file_shown(command), None, "{command}");
        }
    }
}
