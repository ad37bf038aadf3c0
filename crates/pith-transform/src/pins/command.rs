//! One pin command per line: `@pith pin <rule>`, `@pith unpin [N | all | <text>]`,
//! `@pith pins`. A line is a command only when the whole line is one, from its first column
//! (after the literal double quote `opencode run` wraps a prompt in); a sentence that
//! mentions `@pith`, or an indented example, is not.

/// The prefix every command starts with, and the test the stage's fast path uses.
pub const MARKER: &str = "@pith";

/// What a command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `@pith pin <rule>`: add a pin (an empty rule only lists).
    Pin(String),
    /// `@pith unpin ...`: remove session pins.
    Unpin(Target),
    /// `@pith pins`: list the pins.
    List,
}

/// Which pins an unpin names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `@pith unpin` alone: not destructive, lists the pins.
    Nothing,
    /// `@pith unpin 2`: the pin listed as 2 (1-based).
    Number(usize),
    /// `@pith unpin all`: every session pin.
    All,
    /// `@pith unpin <text>`: by text, exact match first, else prefix.
    Text(String),
}

/// The command on `line`, or `None` when the line is not one.
pub fn parse_line(line: &str) -> Option<Command> {
    // At the very start of the line: an indented `@pith pin` is an example in a document
    // (a code block), not a command.
    let mut line = line.trim_end();
    // `opencode run "x"` sends `"x"`: a quote may open the first line and close the last.
    if let Some(rest) = line.strip_prefix('"') {
        line = rest.strip_suffix('"').unwrap_or(rest).trim_end();
    } else if let Some(rest) = line.strip_suffix('"')
        && !rest.contains('"')
    {
        line = rest.trim_end();
    }
    let rest = line.strip_prefix(MARKER)?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim_start();
    let (verb, argument) = match rest.find(char::is_whitespace) {
        Some(at) => (&rest[..at], rest[at..].trim()),
        None => (rest, ""),
    };
    match verb {
        "pin" => Some(Command::Pin(collapse_blanks(argument))),
        "pins" if argument.is_empty() => Some(Command::List),
        "unpin" => Some(Command::Unpin(target(argument))),
        _ => None,
    }
}

/// Whether `line` is a pin command (what other stages skip when they read the user's task).
pub fn is_command_line(line: &str) -> bool {
    parse_line(line).is_some()
}

fn target(argument: &str) -> Target {
    if argument.is_empty() {
        Target::Nothing
    } else if argument == "all" {
        Target::All
    } else if let Ok(n) = argument.parse::<usize>() {
        Target::Number(n)
    } else {
        Target::Text(collapse_blanks(argument))
    }
}

/// A rule's text with runs of blanks as one space, so that `use  tabs` and `use tabs` are one
/// pin and the pin block is the same bytes however the line was typed.
fn collapse_blanks(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_the_syntax() {
        assert_eq!(
            parse_line("@pith pin be concise, no walls of text"),
            Some(Command::Pin("be concise, no walls of text".into()))
        );
        assert_eq!(
            parse_line("@pith unpin 2"),
            Some(Command::Unpin(Target::Number(2)))
        );
        assert_eq!(
            parse_line("@pith unpin use tabs"),
            Some(Command::Unpin(Target::Text("use tabs".into())))
        );
        assert_eq!(
            parse_line("@pith unpin all"),
            Some(Command::Unpin(Target::All))
        );
        assert_eq!(
            parse_line("@pith unpin"),
            Some(Command::Unpin(Target::Nothing))
        );
        assert_eq!(parse_line("@pith pins"), Some(Command::List));
        assert_eq!(parse_line("@pith pin"), Some(Command::Pin(String::new())));
    }

    #[test]
    fn blanks_and_opencode_quotes_are_tolerated() {
        let pin = Some(Command::Pin("use tabs".into()));
        assert_eq!(parse_line("@pith   pin   use \t tabs  "), pin);
        assert_eq!(
            parse_line("    @pith pin use tabs"),
            None,
            "an indented example"
        );
        assert_eq!(parse_line("\"@pith pin use tabs\""), pin);
        assert_eq!(parse_line("\"@pith pin use tabs"), pin);
        assert_eq!(parse_line("@pith pin use tabs\""), pin);
        assert_eq!(
            parse_line("@pith pin say \"hi\""),
            Some(Command::Pin("say \"hi\"".into()))
        );
    }

    #[test]
    fn prose_that_mentions_pith_is_not_a_command() {
        for line in [
            "please @pith pin this",
            "@pithpin x",
            "@pith pinned x",
            "@pith pins now",
            "@pith help",
            "@Pith pin x",
            "",
            "@pith",
        ] {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
    }
}
