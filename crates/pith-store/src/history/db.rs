//! The two databases history runs on (one SQLite file per machine; one PostgreSQL database for
//! a team) behind the few operations its queries need, so the queries, and the rules they
//! carry, are written once.
//!
//! SQL is written in the dialect both share, with SQLite's numbered parameters (`?1`); for
//! PostgreSQL they become `$1`. What both accept and this module relies on: `ON CONFLICT`,
//! `RETURNING`, `CAST(? AS TEXT)` where a parameter is only compared with NULL (PostgreSQL
//! cannot infer its type otherwise), `CAST(SUM(..) AS BIGINT)` (PostgreSQL sums a BIGINT to a
//! NUMERIC), and no boolean parameters (0/1 integers compared to a `CASE`).

use std::error::Error as StdError;
use std::sync::{Mutex, PoisonError};

use bytes::BytesMut;
use rusqlite::Connection;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::postgres::{Pg, PgError, dollar_params};
use crate::sqlite::StoreError;

/// A query parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Null,
    Int(i64),
    Text(&'a str),
    /// A PostgreSQL array (`unnest` of a batch); SQLite takes no arrays.
    Texts(&'a [String]),
    /// A PostgreSQL array (`unnest` of a batch); SQLite takes no arrays.
    Ints(&'a [i64]),
}

impl<'a> From<&'a [String]> for Value<'a> {
    fn from(v: &'a [String]) -> Self {
        Value::Texts(v)
    }
}

impl<'a> From<&'a [i64]> for Value<'a> {
    fn from(v: &'a [i64]) -> Self {
        Value::Ints(v)
    }
}

impl From<i64> for Value<'_> {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<bool> for Value<'_> {
    fn from(v: bool) -> Self {
        Value::Int(i64::from(v))
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(v: &'a str) -> Self {
        Value::Text(v)
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(v: &'a String) -> Self {
        Value::Text(v)
    }
}

impl<'a> From<Option<&'a str>> for Value<'a> {
    fn from(v: Option<&'a str>) -> Self {
        v.map_or(Value::Null, Value::Text)
    }
}

/// `[Value]` from a list of things convertible to one.
macro_rules! values {
    ($($v:expr),* $(,)?) => {
        &[$($crate::history::db::Value::from($v)),*]
    };
}
pub(crate) use values;

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Texts(_) | Value::Ints(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    "an array parameter is PostgreSQL's only".into(),
                ));
            }
        })
    }
}

impl ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            // The server chose the parameter's width from the column or literal it meets.
            Value::Int(v) => match *ty {
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::BOOL => (*v != 0).to_sql(ty, out),
                _ => v.to_sql(ty, out),
            },
            Value::Text(s) => s.to_sql(ty, out),
            Value::Texts(v) => v.to_sql(ty, out),
            Value::Ints(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// One row of a result, read by column index.
pub(crate) trait Row {
    fn opt_int(&self, index: usize) -> Result<Option<i64>, StoreError>;
    fn opt_text(&self, index: usize) -> Result<Option<String>, StoreError>;

    fn int(&self, index: usize) -> Result<i64, StoreError> {
        self.opt_int(index)?
            .ok_or_else(|| corrupt(format!("column {index} is NULL")))
    }

    /// A count or position (never negative) as a `u64`.
    fn count(&self, index: usize) -> Result<u64, StoreError> {
        Ok(u64::try_from(self.int(index)?).unwrap_or(0))
    }

    fn text(&self, index: usize) -> Result<String, StoreError> {
        self.opt_text(index)?
            .ok_or_else(|| corrupt(format!("column {index} is NULL")))
    }
}

fn corrupt(what: String) -> StoreError {
    StoreError::Team(Box::new(PgError::Corrupt(what)))
}

impl Row for rusqlite::Row<'_> {
    fn opt_int(&self, index: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.get(index)?)
    }

    fn opt_text(&self, index: usize) -> Result<Option<String>, StoreError> {
        Ok(self.get(index)?)
    }
}

impl Row for tokio_postgres::Row {
    fn opt_int(&self, index: usize) -> Result<Option<i64>, StoreError> {
        let ty = self
            .columns()
            .get(index)
            .map(|c| c.type_().clone())
            .ok_or_else(|| corrupt(format!("no column {index}")))?;
        let value = match ty {
            Type::INT2 => self
                .try_get::<_, Option<i16>>(index)
                .map(|v| v.map(i64::from)),
            Type::INT4 => self
                .try_get::<_, Option<i32>>(index)
                .map(|v| v.map(i64::from)),
            Type::BOOL => self
                .try_get::<_, Option<bool>>(index)
                .map(|v| v.map(i64::from)),
            _ => self.try_get::<_, Option<i64>>(index),
        };
        value.map_err(pg)
    }

    fn opt_text(&self, index: usize) -> Result<Option<String>, StoreError> {
        self.try_get(index).map_err(pg)
    }
}

fn pg(e: tokio_postgres::Error) -> StoreError {
    StoreError::Team(Box::new(PgError::Query(e)))
}

/// A history database: the local SQLite file, or the team's PostgreSQL.
pub(crate) enum Db {
    Sqlite(Connection),
    Postgres(Box<PgSession>),
}

/// A PostgreSQL connection held for a history's life (a transaction's statements must share
/// one), leased again after a failure.
pub(crate) struct PgSession {
    pg: Pg,
    /// A mutex only so reads can take `&self`: a history is used from one thread at a time.
    client: Mutex<Option<deadpool_postgres::Object>>,
}

impl PgSession {
    pub(crate) fn new(pg: Pg) -> PgSession {
        PgSession {
            pg,
            client: Mutex::new(None),
        }
    }

    pub(crate) fn pg(&self) -> &Pg {
        &self.pg
    }

    /// Run `work` on the held connection (leasing one first if none is held); a failure drops
    /// the connection so the next call starts on a fresh one.
    fn run<T>(
        &self,
        work: impl AsyncFnOnce(&deadpool_postgres::Object) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, StoreError> {
        let pg = &self.pg;
        let mut client = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        let outcome = pg.block_on(async {
            if client.is_none() {
                *client = Some(pg.lease().await?);
            }
            match client.as_ref() {
                Some(c) => work(c).await.map_err(PgError::Query),
                None => Err(PgError::Corrupt("no connection".into())),
            }
        });
        if outcome.is_err()
            && let Some(broken) = client.take()
        {
            // Out of the pool, closed: a connection in an aborted transaction must not be
            // handed to the next user.
            drop(deadpool_postgres::Object::take(broken));
        }
        outcome.map_err(|e| StoreError::Team(Box::new(e)))
    }
}

fn pg_params<'a>(params: &'a [Value<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

impl Db {
    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    /// Run a statement; the rows it changed.
    pub(crate) fn execute(&self, sql: &str, params: &[Value<'_>]) -> Result<u64, StoreError> {
        match self {
            Db::Sqlite(conn) => Ok(conn
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(params))?
                as u64),
            Db::Postgres(session) => {
                let sql = dollar_params(sql);
                session.run(async |c| {
                    let statement = c.prepare_cached(&sql).await?;
                    c.execute(&statement, &pg_params(params)).await
                })
            }
        }
    }

    /// Run a query, calling `each` on every row in order.
    pub(crate) fn each(
        &self,
        sql: &str,
        params: &[Value<'_>],
        mut each: impl FnMut(&dyn Row) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match self {
            Db::Sqlite(conn) => {
                let mut statement = conn.prepare_cached(sql)?;
                let mut rows = statement.query(rusqlite::params_from_iter(params))?;
                while let Some(row) = rows.next()? {
                    each(row)?;
                }
                Ok(())
            }
            Db::Postgres(session) => {
                let sql = dollar_params(sql);
                let rows = session.run(async |c| {
                    let statement = c.prepare_cached(&sql).await?;
                    c.query(&statement, &pg_params(params)).await
                })?;
                for row in &rows {
                    each(row)?;
                }
                Ok(())
            }
        }
    }

    /// Every row, each read by `read`.
    pub(crate) fn rows<T>(
        &self,
        sql: &str,
        params: &[Value<'_>],
        read: impl Fn(&dyn Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        self.each(sql, params, |r| {
            out.push(read(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// The first row, if any, read by `read`.
    pub(crate) fn row<T>(
        &self,
        sql: &str,
        params: &[Value<'_>],
        read: impl Fn(&dyn Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let mut out = None;
        self.each(sql, params, |r| {
            if out.is_none() {
                out = Some(read(r)?);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Run `work` in one transaction: committed when it returns `Ok`, rolled back otherwise.
    pub(crate) fn transaction<T, E: From<StoreError>>(
        &self,
        work: impl FnOnce(&Db) -> Result<T, E>,
    ) -> Result<T, E> {
        let begin = match self {
            // A writer takes the write lock up front: a read that later upgrades could meet
            // another process's writer and fail at once instead of waiting its busy timeout.
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
            Db::Postgres(_) => "BEGIN",
        };
        self.batch(begin)?;
        match work(self) {
            Ok(value) => {
                self.batch("COMMIT")?;
                Ok(value)
            }
            Err(e) => {
                // The rollback's own failure (a connection gone) leaves nothing to undo.
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn batch(&self, sql: &str) -> Result<(), StoreError> {
        match self {
            Db::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            Db::Postgres(session) => session.run(async |c| c.batch_execute(sql).await),
        }
    }
}
