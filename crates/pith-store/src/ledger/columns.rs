//! The request row's columns both databases keep, listed once.
//!
//! A request row lives in SQLite's `requests` (each machine's ledger, and a team's replica) and
//! in the team's PostgreSQL `requests`. The columns the two share are [`SHARED`], each with its
//! kind and how it is read out of and into a [`Row`]: the SQLite INSERT, the PostgreSQL push
//! (an array per column for `unnest`), the PostgreSQL pull and both readers (by name) are
//! written from it. What one database alone keeps is beside that database's code (SQLite: the
//! bust, the arrival, the serving instance, the pending derivations; PostgreSQL: the pushing
//! instance's row id, transforms and savings as jsonb, the fingerprints). A new shared column is
//! one entry here and a migration in each schema (migrations are history: the schemas spell
//! their columns themselves).

use std::fmt::Write as _;

use super::model::{RequestOutcome, Row, Usage};
use super::{to_i64, to_u64};

/// How a column's value is held: SQLite's storage class, PostgreSQL's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `INTEGER`; PostgreSQL `bigint`.
    Int,
    /// `INTEGER`; PostgreSQL `integer` (the HTTP status).
    Int4,
    /// `REAL`; PostgreSQL `double precision`.
    Real,
    /// `TEXT`.
    Text,
}

impl Kind {
    /// PostgreSQL's name of an array of it, for `unnest($n::…[])`.
    pub(crate) fn pg_array(self) -> &'static str {
        match self {
            Kind::Int => "bigint[]",
            Kind::Int4 => "integer[]",
            Kind::Real => "float8[]",
            Kind::Text => "text[]",
        }
    }
}

/// A column's value on its way into a database, borrowed from the [`Row`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cell<'a> {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<&'a str>),
}

/// A column's value as a database gave it back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
}

/// A row being read: the row, and the token counters until all five are in.
#[derive(Default)]
pub(crate) struct Reading {
    pub(crate) row: Row,
    counters: [Option<u64>; 5],
}

impl Reading {
    /// The row, its usage decided from the five counters: a row has a `Usage` when its input
    /// count is there (a row written before a counter existed reads it as 0).
    pub(crate) fn finish(mut self) -> Row {
        let [input, output, cache_write, cache_write_1h, cache_read] = self.counters;
        self.row.usage = input.map(|input| Usage {
            input,
            output: output.unwrap_or(0),
            cache_write: cache_write.unwrap_or(0),
            cache_write_1h: cache_write_1h.unwrap_or(0),
            cache_read: cache_read.unwrap_or(0),
        });
        self.row
    }
}

/// One shared column.
pub(crate) struct Column {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// `NOT NULL` in both schemas: read as a value, a NULL there is an error.
    pub(crate) required: bool,
    /// Its value in a row.
    pub(crate) get: fn(&Row) -> Cell<'_>,
    /// Puts a read value into the row; what does not fit (a status above `u16`) is an error.
    pub(crate) set: fn(&mut Reading, Value) -> Result<(), String>,
}

/// A [`Column`]: its name, kind, whether it is required, how it is read from a row (`r`), and
/// how a read value (`v`) goes into a [`Reading`] (`w`).
macro_rules! column {
    ($name:expr, $kind:ident, $required:literal, |$r:ident| $get:expr, |$w:ident, $v:ident| $set:expr $(,)?) => {
        Column {
            name: $name,
            kind: Kind::$kind,
            required: $required,
            get: |$r| $get,
            set: |$w, $v| {
                $set;
                Ok(())
            },
        }
    };
}

/// A byte count: `NOT NULL`, a `u64` field of the column's own name.
macro_rules! byte_count {
    ($field:ident) => {
        column!(
            stringify!($field),
            Int,
            true,
            |r| Cell::Int(Some(to_i64(r.$field))),
            |w, v| w.row.$field = to_u64(int(v)?.unwrap_or(0)),
        )
    };
}

/// The columns both databases keep, in the order each database's statements list them.
pub(crate) const SHARED: &[Column] = &[
    column!("ts_ms", Int, true, |r| Cell::Int(Some(r.ts_ms)), |w, v| w
        .row
        .ts_ms =
        int(v)?.unwrap_or(0)),
    column!(
        "client",
        Text,
        true,
        |r| Cell::Text(Some(&r.client)),
        |w, v| w.row.client = text(v)?.unwrap_or_default()
    ),
    column!(
        "session",
        Text,
        false,
        |r| Cell::Text(r.session.as_deref()),
        |w, v| w.row.session = text(v)?
    ),
    column!(
        "wire",
        Text,
        false,
        |r| Cell::Text(r.wire.as_deref()),
        |w, v| w.row.wire = text(v)?
    ),
    column!(
        "provider",
        Text,
        true,
        |r| Cell::Text(Some(&r.provider)),
        |w, v| w.row.provider = text(v)?.unwrap_or_default()
    ),
    column!(
        "model",
        Text,
        false,
        |r| Cell::Text(r.model.as_deref()),
        |w, v| w.row.model = text(v)?
    ),
    column!(
        "method",
        Text,
        true,
        |r| Cell::Text(Some(&r.method)),
        |w, v| w.row.method = text(v)?.unwrap_or_default()
    ),
    column!("path", Text, true, |r| Cell::Text(Some(&r.path)), |w, v| {
        w.row.path = text(v)?.unwrap_or_default()
    }),
    column!(
        "status",
        Int4,
        false,
        |r| Cell::Int(r.status.map(i64::from)),
        |w, v| w.row.status = int(v)?
            .map(|s| u16::try_from(s).map_err(|_| format!("status {s}")))
            .transpose()?
    ),
    column!(
        "outcome",
        Text,
        true,
        |r| Cell::Text(Some(r.outcome.as_str())),
        |w, v| w.row.outcome = RequestOutcome::parse(&text(v)?.unwrap_or_default())
    ),
    column!(
        "error",
        Text,
        false,
        |r| Cell::Text(r.error.as_deref()),
        |w, v| w.row.error = text(v)?
    ),
    byte_count!(bytes_client),
    byte_count!(bytes_upstream),
    byte_count!(bytes_response),
    byte_count!(tools_bytes),
    byte_count!(system_bytes),
    byte_count!(messages_bytes),
    byte_count!(other_bytes),
    column!(
        "input_tokens",
        Int,
        false,
        |r| Cell::Int(r.usage.map(|u| to_i64(u.input))),
        |w, v| w.counters[0] = int(v)?.map(to_u64)
    ),
    column!(
        "output_tokens",
        Int,
        false,
        |r| Cell::Int(r.usage.map(|u| to_i64(u.output))),
        |w, v| w.counters[1] = int(v)?.map(to_u64)
    ),
    column!(
        "cache_write_tokens",
        Int,
        false,
        |r| Cell::Int(r.usage.map(|u| to_i64(u.cache_write))),
        |w, v| w.counters[2] = int(v)?.map(to_u64)
    ),
    column!(
        "cache_write_1h_tokens",
        Int,
        false,
        |r| Cell::Int(r.usage.map(|u| to_i64(u.cache_write_1h))),
        |w, v| w.counters[3] = int(v)?.map(to_u64)
    ),
    column!(
        "cache_read_tokens",
        Int,
        false,
        |r| Cell::Int(r.usage.map(|u| to_i64(u.cache_read))),
        |w, v| w.counters[4] = int(v)?.map(to_u64)
    ),
    column!("ttfb_ms", Real, false, |r| Cell::Real(r.ttfb_ms), |w, v| {
        w.row.ttfb_ms = real(v)?
    }),
    column!(
        "total_ms",
        Real,
        true,
        |r| Cell::Real(Some(r.total_ms)),
        |w, v| w.row.total_ms = real(v)?.unwrap_or(0.0)
    ),
    column!(
        "provider_count_outcome",
        Text,
        false,
        |r| Cell::Text(r.provider_count_outcome.as_deref()),
        |w, v| w.row.provider_count_outcome = text(v)?
    ),
    column!(
        "provider_count_tokens",
        Int,
        false,
        |r| Cell::Int(r.provider_count_tokens.map(to_i64)),
        |w, v| w.row.provider_count_tokens = int(v)?.map(to_u64)
    ),
];

fn int(v: Value) -> Result<Option<i64>, String> {
    match v {
        Value::Int(v) => Ok(v),
        other => Err(format!("an integer expected, {other:?} read")),
    }
}

fn real(v: Value) -> Result<Option<f64>, String> {
    match v {
        Value::Real(v) => Ok(v),
        other => Err(format!("a real expected, {other:?} read")),
    }
}

fn text(v: Value) -> Result<Option<String>, String> {
    match v {
        Value::Text(v) => Ok(v),
        other => Err(format!("a text expected, {other:?} read")),
    }
}

/// The shared columns' names, `prefix` before each, joined by `, `.
pub(crate) fn names(prefix: &str) -> String {
    let mut out = String::new();
    for (i, c) in SHARED.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{prefix}{}", c.name);
    }
    out
}

/// A row read by column name through `read` (one database's getter of a column's value as its
/// kind, required or not), the shared columns only.
pub(crate) fn read<E>(
    read: impl Fn(&Column) -> Result<Value, E>,
    corrupt: impl Fn(String) -> E,
) -> Result<Reading, E> {
    let mut reading = Reading::default();
    for column in SHARED {
        let value = read(column)?;
        (column.set)(&mut reading, value).map_err(|e| corrupt(format!("{}: {e}", column.name)))?;
    }
    Ok(reading)
}

impl rusqlite::ToSql for Cell<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Cell::Int(v) => v.to_sql(),
            Cell::Real(v) => v.to_sql(),
            Cell::Text(v) => v.to_sql(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Usage;

    /// Every field a shared column holds, none at its default.
    fn full_row() -> Row {
        Row {
            ts_ms: 1_700_000_000_123,
            client: "claude-code".into(),
            session: Some("ses".into()),
            wire: Some("anthropic".into()),
            provider: "anthropic".into(),
            model: Some("claude-haiku-4-5".into()),
            method: "POST".into(),
            path: "/v1/messages".into(),
            status: Some(429),
            outcome: RequestOutcome::UpstreamError,
            error: Some("rate limited".into()),
            bytes_client: 1,
            bytes_upstream: 2,
            bytes_response: 3,
            tools_bytes: 4,
            system_bytes: 5,
            messages_bytes: 6,
            other_bytes: 7,
            usage: Some(Usage {
                input: 8,
                output: 9,
                cache_write: 10,
                cache_write_1h: 11,
                cache_read: 12,
            }),
            ttfb_ms: Some(13.5),
            total_ms: 14.5,
            provider_count_outcome: Some("counted".into()),
            provider_count_tokens: Some(15),
            ..Row::default()
        }
    }

    fn value_of(cell: Cell<'_>) -> Value {
        match cell {
            Cell::Int(v) => Value::Int(v),
            Cell::Real(v) => Value::Real(v),
            Cell::Text(v) => Value::Text(v.map(str::to_owned)),
        }
    }

    /// Each column gives a cell of its own kind, a required one a value, and what it gives is
    /// what it takes back: a row through the table is the row (a mistyped or swapped entry
    /// fails here, before either database sees it).
    #[test]
    fn the_shared_columns_read_back_what_they_wrote() {
        let row = full_row();
        let mut reading = Reading::default();
        for c in SHARED {
            let cell = (c.get)(&row);
            let kind_fits = matches!(
                (c.kind, cell),
                (Kind::Int | Kind::Int4, Cell::Int(_))
                    | (Kind::Real, Cell::Real(_))
                    | (Kind::Text, Cell::Text(_))
            );
            assert!(kind_fits, "{}: {cell:?}", c.name);
            let null = matches!(cell, Cell::Int(None) | Cell::Real(None) | Cell::Text(None));
            assert!(!null, "{} is empty in a full row", c.name);
            (c.set)(&mut reading, value_of(cell)).unwrap();
        }
        assert_eq!(reading.finish(), row);
        let names: std::collections::HashSet<_> = SHARED.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), SHARED.len(), "a column listed twice");
    }

    /// A row without usage reads back without; one from before a counter existed reads it as 0.
    #[test]
    fn usage_is_there_when_its_input_count_is() {
        let read = |input: Option<i64>, output: Option<i64>| {
            let mut reading = Reading::default();
            for c in SHARED {
                let value = match c.name {
                    "input_tokens" => Value::Int(input),
                    "output_tokens" => Value::Int(output),
                    _ => value_of((c.get)(&full_row())),
                };
                (c.set)(&mut reading, value).unwrap();
            }
            reading.finish().usage
        };
        assert_eq!(read(None, Some(3)), None);
        let usage = read(Some(5), None).unwrap();
        assert_eq!((usage.input, usage.output, usage.cache_read), (5, 0, 12));
    }

    #[test]
    fn a_status_past_u16_is_an_error_naming_it() {
        let status = SHARED.iter().find(|c| c.name == "status").unwrap();
        let err = (status.set)(&mut Reading::default(), Value::Int(Some(70_000))).unwrap_err();
        assert_eq!(err, "status 70000");
    }
}
