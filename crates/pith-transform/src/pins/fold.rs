//! The pin state, folded from the transcript: file pins (every rules-file line, in order),
//! then session commands applied oldest to newest. The same transcript always folds to the
//! same pins, which is what keeps the pin block byte-stable from turn to turn.

use super::command::{Command, Target, parse_line};
use super::rawstr::{self, RawLine};
use super::transcript::{Content, Part, Role, Source, Transcript};

/// Where a pin comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tier {
    /// A line in a rules file; `path` when the harness's envelope names the file.
    File {
        /// The file the line is in, as the envelope names it.
        path: Option<String>,
    },
    /// A line the user typed this session.
    Session,
}

/// One pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The rule, blanks collapsed.
    pub text: String,
    /// Where it comes from.
    pub tier: Tier,
}

/// What one session command did, for pith's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Pinned as number `.0` (1-based, in the listing after the command).
    Pinned(usize, String),
    /// Already pinned, as number `.0`.
    AlreadyPinned(usize, String),
    /// `@pith pin` with no rule.
    EmptyPin,
    /// Removed these session pins (text).
    Unpinned(Vec<String>),
    /// The pin is a file pin: it is removed by editing the file.
    FilePin {
        /// The pin's number.
        number: usize,
        /// Its text.
        text: String,
        /// The file it is in, when known.
        path: Option<String>,
    },
    /// No pin has this number; there are `.1` pins.
    NoSuchNumber(usize, usize),
    /// No pin matches this text.
    NoMatch(String),
    /// Several session pins start with this text: their numbers.
    Ambiguous(String, Vec<usize>),
    /// A listing was asked for (`@pith pins`, `@pith unpin` alone).
    Listed,
}

/// A text part that holds at least one command line.
#[derive(Debug)]
pub(super) struct Scanned {
    /// The message it is in, `None` for the system prompt.
    pub message: Option<usize>,
    /// The part's index in its message's (or the system prompt's) parts.
    pub part: usize,
    /// Its lines.
    pub lines: Vec<RawLine>,
    /// Which lines are commands.
    pub commands: Vec<bool>,
}

impl Scanned {
    /// Whether nothing but commands and blank lines is in it.
    pub fn only_commands(&self) -> bool {
        self.lines
            .iter()
            .zip(&self.commands)
            .all(|(line, command)| *command || line.text.trim().is_empty())
    }
}

/// One command found, in transcript order.
#[derive(Debug)]
pub(super) struct Found {
    /// Its message, `None` for the system prompt.
    pub message: Option<usize>,
    /// What it asks.
    pub command: Command,
    /// File tier (durable) or session.
    pub file: bool,
}

/// The fold's result.
#[derive(Debug, Default)]
pub(super) struct Folded {
    /// Pins after the whole transcript, in listing order: file pins, then session pins.
    pub pins: Vec<Pin>,
    /// Parts holding commands.
    pub scanned: Vec<Scanned>,
    /// Every command, in order.
    pub found: Vec<Found>,
    /// Each session command's change, with its message.
    pub changes: Vec<(usize, Change)>,
    /// Command turns the provider answered instead of pith: not folded, not edited.
    pub ignored: Vec<Turn>,
}

/// Whether the message after `turn` is pith's answer to it.
pub(super) fn answered(transcript: &Transcript<'_>, turn: &Turn) -> bool {
    transcript.messages.get(turn.end).is_some_and(|answer| {
        answer.role == Role::Assistant
            && answer
                .first_text()
                .is_some_and(|t| t.starts_with(super::REPLY_MARKER))
    })
}

/// A run of messages between the model's turns: the user's turn (with the harness's system
/// messages inside it). `start..end` in message indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Turn {
    pub start: usize,
    pub end: usize,
}

/// The trailing turn, when the transcript ends with one.
pub(super) fn final_turn(transcript: &Transcript<'_>) -> Option<Turn> {
    let end = transcript.messages.len();
    let start = transcript
        .messages
        .iter()
        .rposition(|m| matches!(m.role, Role::Assistant | Role::Loop))
        .map_or(0, |i| i + 1);
    (start < end).then_some(Turn { start, end })
}

/// Every turn, in order.
pub(super) fn turns(transcript: &Transcript<'_>) -> Vec<Turn> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, m) in transcript.messages.iter().enumerate() {
        match (m.role, start) {
            (Role::Assistant | Role::Loop, Some(s)) => {
                out.push(Turn { start: s, end: i });
                start = None;
            }
            (Role::Assistant | Role::Loop, None) => {}
            (_, None) => start = Some(i),
            (_, Some(_)) => {}
        }
    }
    if let Some(s) = start {
        out.push(Turn {
            start: s,
            end: transcript.messages.len(),
        });
    }
    out
}

/// Fold the transcript into pins.
pub(super) fn fold(transcript: &Transcript<'_>) -> Folded {
    let mut folded = Folded::default();
    let system = transcript
        .system
        .iter()
        .enumerate()
        .map(|(i, p)| (None, i, p));
    let messages = transcript.messages.iter().enumerate().flat_map(|(m, msg)| {
        msg.parts
            .iter()
            .enumerate()
            .map(move |(i, p)| (Some(m), i, p))
    });
    for (message, index, part) in system.chain(messages) {
        folded.scan(message, index, part);
    }
    // A command turn counts once pith answered it (or while it is the turn being asked): one
    // the provider answered instead (pins were off, pith was not in the path) is history the
    // model saw, left as it is.
    let last = final_turn(transcript);
    folded.ignored = turns(transcript)
        .into_iter()
        .filter(|t| Some(t) != last.as_ref())
        .filter(|t| !answered(transcript, t) && folded.command_only(transcript, t))
        .collect();
    let session: Vec<(usize, Command)> = folded
        .found
        .iter()
        .filter(|f| !f.file)
        .filter_map(|f| f.message.map(|m| (m, f.command.clone())))
        .filter(|(m, _)| !folded.is_ignored(*m))
        .collect();
    for (message, command) in session {
        let change = apply(&mut folded.pins, command);
        folded.changes.push((message, change));
    }
    folded
}

impl Folded {
    /// Reads the command lines of one text part (part `index` of `message`, `None` for the
    /// system prompt): file pins added as found, every command to `found`, the part to
    /// `scanned` when it holds any.
    fn scan(&mut self, message: Option<usize>, index: usize, part: &Part<'_>) {
        if !part.source.read() || !part.literal.contains(super::MARKER) {
            return;
        }
        let Some(lines) = rawstr::lines(part.literal) else {
            return;
        };
        let file = part.source.is_file();
        let mut path = None;
        let mut commands = vec![false; lines.len()];
        let mut fenced = false;
        for (i, line) in lines.iter().enumerate() {
            // A fenced code block in a document shows commands; it does not give them.
            if line.text.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            if let Some(p) = envelope_path(&line.text) {
                path = Some(p);
                continue;
            }
            let Some(command) = parse_line(&line.text) else {
                continue;
            };
            commands[i] = true;
            if file && let Command::Pin(text) = &command {
                add_file_pin(&mut self.pins, text, path.clone());
            }
            self.found.push(Found {
                message,
                command,
                file,
            });
        }
        if commands.iter().any(|c| *c) {
            self.scanned.push(Scanned {
                message,
                part: index,
                lines,
                commands,
            });
        }
    }

    /// Whether message `m` is in a command turn the provider answered.
    pub fn is_ignored(&self, m: usize) -> bool {
        self.ignored.iter().any(|t| (t.start..t.end).contains(&m))
    }

    /// The changes made by commands in `turn`.
    pub fn changes_in(&self, turn: &Turn) -> Vec<Change> {
        self.changes
            .iter()
            .filter(|(m, _)| (turn.start..turn.end).contains(m))
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// Whether `turn` is nothing but pin commands: its typed text is all command lines (at
    /// least one), with no tool result and no block other than text.
    pub fn command_only(&self, transcript: &Transcript<'_>, turn: &Turn) -> bool {
        let mut commands = 0;
        for m in turn.start..turn.end {
            let message = &transcript.messages[m];
            if message.role != Role::User {
                continue;
            }
            if message.has_tool_result() {
                return false;
            }
            if let Content::Array { blocks, .. } = &message.content {
                let text_blocks = message.parts.iter().filter(|p| p.block.is_some()).count();
                if text_blocks != blocks.len() {
                    return false;
                }
            }
            for (i, part) in message.parts.iter().enumerate() {
                if part.source != Source::Typed {
                    continue;
                }
                match self.scanned_part(Some(m), i) {
                    Some(s) if s.only_commands() => {
                        commands += s.commands.iter().filter(|c| **c).count();
                    }
                    Some(_) => return false,
                    None if is_blank(part.literal) => {}
                    None => return false,
                }
            }
        }
        commands > 0
    }

    /// The scan of part `part` of `message`, when it holds commands.
    pub fn scanned_part(&self, message: Option<usize>, part: usize) -> Option<&Scanned> {
        self.scanned
            .iter()
            .find(|s| s.message == message && s.part == part)
    }
}

fn is_blank(literal: &str) -> bool {
    serde_json::from_str::<String>(literal).is_ok_and(|t| t.trim().is_empty())
}

/// The file an envelope line names (each client's envelope is in its file in `pith-clients`).
fn envelope_path(line: &str) -> Option<String> {
    pith_clients::rules_file_named(line)
}

fn add_file_pin(pins: &mut Vec<Pin>, text: &str, path: Option<String>) {
    if text.is_empty() || pins.iter().any(|p| p.text == text) {
        return;
    }
    // File pins stay ahead of session pins in the listing.
    let at = pins
        .iter()
        .position(|p| p.tier == Tier::Session)
        .unwrap_or(pins.len());
    pins.insert(
        at,
        Pin {
            text: text.to_owned(),
            tier: Tier::File { path },
        },
    );
}

/// Apply one session command.
fn apply(pins: &mut Vec<Pin>, command: Command) -> Change {
    match command {
        Command::List | Command::Unpin(Target::Nothing) => Change::Listed,
        Command::Pin(text) if text.is_empty() => Change::EmptyPin,
        Command::Pin(text) => match pins.iter().position(|p| p.text == text) {
            Some(i) => Change::AlreadyPinned(i + 1, text),
            None => {
                pins.push(Pin {
                    text: text.clone(),
                    tier: Tier::Session,
                });
                Change::Pinned(pins.len(), text)
            }
        },
        Command::Unpin(Target::All) => {
            let removed: Vec<String> = pins
                .iter()
                .filter(|p| p.tier == Tier::Session)
                .map(|p| p.text.clone())
                .collect();
            pins.retain(|p| p.tier != Tier::Session);
            Change::Unpinned(removed)
        }
        Command::Unpin(Target::Number(n)) => match n.checked_sub(1).and_then(|i| pins.get(i)) {
            None => Change::NoSuchNumber(n, pins.len()),
            Some(pin) => match &pin.tier {
                Tier::File { path } => Change::FilePin {
                    number: n,
                    text: pin.text.clone(),
                    path: path.clone(),
                },
                Tier::Session => Change::Unpinned(vec![pins.remove(n - 1).text]),
            },
        },
        Command::Unpin(Target::Text(text)) => unpin_text(pins, &text),
    }
}

/// By text: exact match first, else prefix; a file pin answers with its file.
fn unpin_text(pins: &mut Vec<Pin>, text: &str) -> Change {
    let exact: Vec<usize> = (0..pins.len()).filter(|&i| pins[i].text == text).collect();
    let matched = if exact.is_empty() {
        (0..pins.len())
            .filter(|&i| pins[i].text.starts_with(text))
            .collect()
    } else {
        exact
    };
    match matched.as_slice() {
        [] => Change::NoMatch(text.to_owned()),
        [i] => match &pins[*i].tier {
            Tier::File { path } => Change::FilePin {
                number: i + 1,
                text: pins[*i].text.clone(),
                path: path.clone(),
            },
            Tier::Session => Change::Unpinned(vec![pins.remove(*i).text]),
        },
        many => Change::Ambiguous(text.to_owned(), many.iter().map(|i| i + 1).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(text: &str) -> Command {
        Command::Pin(text.into())
    }

    fn session(text: &str) -> Pin {
        Pin {
            text: text.into(),
            tier: Tier::Session,
        }
    }

    fn file(text: &str) -> Pin {
        Pin {
            text: text.into(),
            tier: Tier::File {
                path: Some("/p/CLAUDE.md".into()),
            },
        }
    }

    #[test]
    fn pin_and_unpin_by_number_text_prefix_and_all() {
        let mut pins = vec![file("use tabs")];
        assert_eq!(
            apply(&mut pins, pin("be concise")),
            Change::Pinned(2, "be concise".into())
        );
        assert_eq!(
            apply(&mut pins, pin("be concise")),
            Change::AlreadyPinned(2, "be concise".into())
        );
        assert_eq!(
            apply(&mut pins, pin("run tests")),
            Change::Pinned(3, "run tests".into())
        );
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::Number(2))),
            Change::Unpinned(vec!["be concise".into()])
        );
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::Text("run".into()))),
            Change::Unpinned(vec!["run tests".into()])
        );
        assert_eq!(pins, vec![file("use tabs")]);
        apply(&mut pins, pin("a"));
        apply(&mut pins, pin("ab"));
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::Text("a".into()))),
            Change::Unpinned(vec!["a".into()]),
            "an exact match wins over prefixes"
        );
        apply(&mut pins, pin("ac"));
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::Text("a".into()))),
            Change::Ambiguous("a".into(), vec![2, 3])
        );
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::All)),
            Change::Unpinned(vec!["ab".into(), "ac".into()])
        );
        assert_eq!(pins, vec![file("use tabs")]);
    }

    #[test]
    fn file_pins_are_refused_with_their_file() {
        let mut pins = vec![file("use tabs"), session("x")];
        let refused = Change::FilePin {
            number: 1,
            text: "use tabs".into(),
            path: Some("/p/CLAUDE.md".into()),
        };
        assert_eq!(apply(&mut pins, Command::Unpin(Target::Number(1))), refused);
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::Text("use".into()))),
            refused
        );
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::All)),
            Change::Unpinned(vec!["x".into()])
        );
        assert_eq!(pins, vec![file("use tabs")]);
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::Number(5))),
            Change::NoSuchNumber(5, 1)
        );
        assert_eq!(
            apply(&mut pins, Command::Unpin(Target::Nothing)),
            Change::Listed
        );
        assert_eq!(apply(&mut pins, pin("")), Change::EmptyPin);
    }

    #[test]
    fn envelopes_name_their_files() {
        assert_eq!(
            envelope_path(
                "Contents of /p/CLAUDE.md (project instructions, checked into the codebase):"
            ),
            Some("/p/CLAUDE.md".into())
        );
        assert_eq!(
            envelope_path("Instructions from: /p/AGENTS.md"),
            Some("/p/AGENTS.md".into())
        );
        assert_eq!(
            envelope_path("# AGENTS.md instructions for /p"),
            Some("/p/AGENTS.md".into())
        );
        assert_eq!(envelope_path("use tabs"), None);
    }
}
