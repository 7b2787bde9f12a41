//! The PostgreSQL journal: how a batch is written there, plus the statements both dialects
//! share (`sql.rs`'s `statements!`). Every column of a batch is bound as one array and
//! expanded with `UNNEST`, so each statement has a fixed text, is prepared once per connection
//! and planned once, whatever the batch's size: a batch without a kick of a topic is one
//! statement (data-modifying `WITH` clauses, atomic as any statement: one round trip per
//! commit); a batch with one is a transaction of a few statements per run between kicks.

use super::row::{Moved, Op};
use super::sql::{
    DELETED_VERSION, Ends, EventRow, Last, Meta, event_of, has_kick, last_of, meta_of, runs,
    spec_bytes,
};
use std::borrow::Cow;

super::sql::statements!(
    sqlx::Postgres,
    schema::POSTGRES,
    "DELETE FROM delayq_jobs AS j USING delayq_job_events AS e WHERE j.id = e.job_id \
     AND e.at < "
);

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Writes `ops` in order, atomically, on `conn`.
pub async fn write(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Postgres>,
    ops: &[Op],
    instance: &str,
) -> Result<(), sqlx::Error> {
    let meta = meta_of(ops);
    if !has_kick(ops) && meta.is_empty() {
        return write_one(conn, ops, instance).await;
    }
    let mut tx = sqlx::Connection::begin(&mut **conn).await?;
    for (run, kick) in runs(ops) {
        if run.iter().any(Op::is_job) {
            write_run(&mut tx, run, instance).await?;
        }
        if let Some((queue, n, at)) = kick {
            kick_topic(&mut tx, queue.as_str(), n, at, instance).await?;
        }
    }
    write_meta(&mut tx, &meta).await?;
    tx.commit().await
}

/// The schedules' and topic settings' rows of a batch (`sql.rs`'s [`Meta`]), one statement
/// for each kind of change, in the batch's transaction.
async fn write_meta(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    meta: &Meta<'_>,
) -> Result<(), sqlx::Error> {
    let Meta {
        puts,
        fires,
        deletes,
        settings,
    } = meta;
    if !puts.is_empty() {
        let ticks = |f: fn(&crate::schedule::Schedule) -> Option<u64>| {
            puts.iter().map(|(sc, _)| f(sc).map(i)).collect::<Vec<_>>()
        };
        sqlx::query(
            "INSERT INTO delayq_schedules (id, spec, version, next_tick, last_tick, state, \
             changed_at) SELECT p.id, p.spec, p.version, p.next_tick, p.last_tick, 'live', p.at \
             FROM UNNEST($1::varchar[], $2::bytea[], $3::int8[], $4::int8[], $5::int8[], \
             $6::int8[]) AS p(id, spec, version, next_tick, last_tick, at) \
             ON CONFLICT (id) DO UPDATE SET spec = EXCLUDED.spec, version = EXCLUDED.version, \
             next_tick = EXCLUDED.next_tick, last_tick = EXCLUDED.last_tick, state = 'live', \
             changed_at = EXCLUDED.changed_at \
             WHERE EXCLUDED.version = 1 OR EXCLUDED.version > delayq_schedules.version",
        )
        .bind(
            puts.iter()
                .map(|(sc, _)| sc.spec.id.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            puts.iter()
                .map(|(sc, _)| spec_bytes(sc))
                .collect::<Vec<_>>(),
        )
        .bind(puts.iter().map(|(sc, _)| i(sc.version)).collect::<Vec<_>>())
        .bind(ticks(|sc| sc.next_tick))
        .bind(ticks(|sc| sc.last_tick))
        .bind(puts.iter().map(|(_, at)| i(*at)).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    if !fires.is_empty() {
        sqlx::query(
            "UPDATE delayq_schedules AS s SET version = f.version, next_tick = f.next_tick, \
             last_tick = f.last_tick, changed_at = f.at \
             FROM UNNEST($1::varchar[], $2::int8[], $3::int8[], $4::int8[], $5::int8[]) \
             AS f(id, version, next_tick, last_tick, at) \
             WHERE s.id = f.id AND s.version < f.version",
        )
        .bind(
            fires
                .iter()
                .map(|(f, _)| f.id.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(fires.iter().map(|(f, _)| i(f.version)).collect::<Vec<_>>())
        .bind(
            fires
                .iter()
                .map(|(f, _)| f.next_tick.map(i))
                .collect::<Vec<_>>(),
        )
        .bind(
            fires
                .iter()
                .map(|(f, _)| f.last_tick.map(i))
                .collect::<Vec<_>>(),
        )
        .bind(fires.iter().map(|(_, at)| i(*at)).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    if !deletes.is_empty() {
        sqlx::query(
            "UPDATE delayq_schedules AS s SET state = 'deleted', version = $3, \
             changed_at = d.at FROM UNNEST($1::varchar[], $2::int8[]) AS d(id, at) \
             WHERE s.id = d.id",
        )
        .bind(
            deletes
                .iter()
                .map(|(id, _)| id.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(deletes.iter().map(|(_, at)| i(*at)).collect::<Vec<_>>())
        .bind(DELETED_VERSION)
        .execute(&mut **tx)
        .await?;
    }
    if !settings.is_empty() {
        let limit = |f: fn(&crate::store::TopicSettings) -> Option<u64>| {
            settings
                .iter()
                .map(|(_, s, _)| f(s).map(i))
                .collect::<Vec<_>>()
        };
        sqlx::query(
            "INSERT INTO delayq_topic_settings (topic, paused, rate_micros, burst, \
             max_in_flight, changed_at) SELECT * FROM UNNEST($1::varchar[], $2::bool[], \
             $3::int8[], $4::int8[], $5::int8[], $6::int8[]) \
             ON CONFLICT (topic) DO UPDATE SET paused = EXCLUDED.paused, \
             rate_micros = EXCLUDED.rate_micros, burst = EXCLUDED.burst, \
             max_in_flight = EXCLUDED.max_in_flight, changed_at = EXCLUDED.changed_at",
        )
        .bind(
            settings
                .iter()
                .map(|(t, _, _)| t.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            settings
                .iter()
                .map(|(_, s, _)| s.paused)
                .collect::<Vec<_>>(),
        )
        .bind(limit(|s| s.rate_micros))
        .bind(limit(|s| s.burst.map(u64::from)))
        .bind(limit(|s| s.max_in_flight.map(u64::from)))
        .bind(settings.iter().map(|(_, _, at)| i(*at)).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// A batch without a kick of a topic as one statement ([`PG_ONE`]).
async fn write_one(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Postgres>,
    ops: &[Op],
    instance: &str,
) -> Result<(), sqlx::Error> {
    let last = last_of(ops);
    let events: Vec<_> = ops.iter().filter_map(event_of).collect();
    let query = sqlx::query(PG_ONE);
    let query = bind_moves(
        bind_ends(bind_puts(query, &last.puts), &last.ends),
        &last.moves,
    );
    bind_events(query, &events)
        .bind(instance)
        .execute(&mut **conn)
        .await?;
    Ok(())
}

/// A run of ops (no kick of a topic among them) inside a batch's transaction: its rows in
/// three statements and its events in a fourth.
async fn write_run(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    ops: &[Op],
    instance: &str,
) -> Result<(), sqlx::Error> {
    let Last { puts, moves, ends } = &last_of(ops);
    if !puts.is_empty() {
        bind_puts(sqlx::query(PG_UPSERT), puts)
            .execute(&mut **tx)
            .await?;
    }
    if !moves.is_empty() {
        bind_moves(sqlx::query(PG_MOVE), moves)
            .execute(&mut **tx)
            .await?;
    }
    if !ends.is_empty() {
        let update = sqlx::query(
            "UPDATE delayq_jobs AS j SET state = e.state, changed_at = e.at \
             FROM UNNEST($1::varchar[], $2::varchar[], $3::int8[]) AS e(id, state, at) \
             WHERE j.id = e.id",
        );
        bind_ends(update, ends).execute(&mut **tx).await?;
    }
    let events: Vec<_> = ops.iter().filter_map(event_of).collect();
    if !events.is_empty() {
        let insert = sqlx::query(
            "INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) \
             SELECT e.id, e.from_state, e.to_state, e.at, $5 \
             FROM UNNEST($1::varchar[], $2::varchar[], $3::varchar[], $4::int8[]) \
             AS e(id, from_state, to_state, at)",
        );
        bind_events(insert, &events)
            .bind(instance)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// PostgreSQL's upsert of job rows, one array per column ($1–$17). A macro, so that
/// [`PG_ONE`] can contain it.
macro_rules! pg_upsert {
    () => {
        "INSERT INTO delayq_jobs (id, topic, queue, body, run_at, ttr_ms, \
    priority, attempts, max_attempts, backoff_ms, callback_url, callback_timeout_ms, state, \
    reserved_until, seq, changed_at, publish) \
    SELECT * FROM UNNEST($1::varchar[], $2::varchar[], $3::varchar[], $4::bytea[], \
    $5::int8[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::text[], \
    $12::int8[], $13::varchar[], $14::int8[], $15::int8[], $16::int8[], $17::text[]) \
    ON CONFLICT (id) DO UPDATE SET topic = EXCLUDED.topic, queue = EXCLUDED.queue, \
    body = EXCLUDED.body, run_at = EXCLUDED.run_at, ttr_ms = EXCLUDED.ttr_ms, \
    priority = EXCLUDED.priority, attempts = EXCLUDED.attempts, \
    max_attempts = EXCLUDED.max_attempts, backoff_ms = EXCLUDED.backoff_ms, \
    callback_url = EXCLUDED.callback_url, callback_timeout_ms = EXCLUDED.callback_timeout_ms, \
    state = EXCLUDED.state, reserved_until = EXCLUDED.reserved_until, seq = EXCLUDED.seq, \
    changed_at = EXCLUDED.changed_at, publish = EXCLUDED.publish"
    };
}

/// PostgreSQL's upsert of job rows, one array per column.
const PG_UPSERT: &str = pg_upsert!();

/// PostgreSQL's update of the changing columns of moved jobs, one array per column from
/// `$first` on (7 arrays). A macro, so that [`PG_ONE`] can contain it. Neither `state` nor
/// any other column it sets is indexed, so PostgreSQL can make each a heap-only update (no
/// index entry written; schema.rs).
macro_rules! pg_move {
    ($a:literal, $b:literal, $c:literal, $d:literal, $e:literal, $f:literal, $g:literal) => {
        concat!(
            "UPDATE delayq_jobs AS j SET state = m.state, run_at = m.run_at, \
            attempts = m.attempts, reserved_until = m.reserved_until, seq = m.seq, \
            changed_at = m.at FROM UNNEST(",
            $a,
            "::varchar[], ",
            $b,
            "::varchar[], ",
            $c,
            "::int8[], ",
            $d,
            "::int8[], ",
            $e,
            "::int8[], ",
            $f,
            "::int8[], ",
            $g,
            "::int8[]) AS m(id, state, run_at, attempts, reserved_until, seq, at) \
            WHERE j.id = m.id"
        )
    };
}

/// PostgreSQL's update of moved jobs alone ($1–$7).
const PG_MOVE: &str = pg_move!("$1", "$2", "$3", "$4", "$5", "$6", "$7");

/// PostgreSQL's whole batch in one statement: the job rows ($1–$17, as [`PG_UPSERT`]), the
/// ends ($18–$20), the moves ($21–$27) and the events ($28–$31, instance $32). Each job is
/// in one of puts, ends and moves ([`last_of`]), so no row is changed twice.
const PG_ONE: &str = concat!(
    "WITH puts AS (",
    pg_upsert!(),
    "), ends AS (UPDATE delayq_jobs AS j SET state = e.state, changed_at = e.at \
    FROM UNNEST($18::varchar[], $19::varchar[], $20::int8[]) AS e(id, state, at) \
    WHERE j.id = e.id), moves AS (",
    pg_move!("$21", "$22", "$23", "$24", "$25", "$26", "$27"),
    ") INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) \
    SELECT e.id, e.from_state, e.to_state, e.at, $32 \
    FROM UNNEST($28::varchar[], $29::varchar[], $30::varchar[], $31::int8[]) \
    AS e(id, from_state, to_state, at)"
);

/// Binds the 3 column arrays of `ends` (id, state, at) after what `query` has bound.
fn bind_ends<'q>(query: PgQuery<'q>, ends: &Ends<'_>) -> PgQuery<'q> {
    query
        .bind(
            ends.iter()
                .map(|e| e.0.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            ends.iter()
                .map(|e| e.1.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(ends.iter().map(|e| i(e.2)).collect::<Vec<_>>())
}

/// Binds the 7 column arrays of `moves` (id, state, run_at, attempts, reserved_until, seq,
/// at) after what `query` has bound.
fn bind_moves<'q>(query: PgQuery<'q>, moves: &[&Moved]) -> PgQuery<'q> {
    let n = |f: fn(&Moved) -> i64| moves.iter().map(|m| f(m)).collect::<Vec<i64>>();
    query
        .bind(
            moves
                .iter()
                .map(|m| m.id.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            moves
                .iter()
                .map(|m| m.state.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(n(|m| i(m.run_at)))
        .bind(n(|m| i64::from(m.attempts)))
        .bind(
            moves
                .iter()
                .map(|m| m.reserved_until.map(i))
                .collect::<Vec<_>>(),
        )
        .bind(n(|m| i(m.seq)))
        .bind(n(|m| i(m.at)))
}

/// Binds the 4 column arrays of `events` (id, from, to, at) after what `query` has bound.
fn bind_events<'q>(query: PgQuery<'q>, events: &[EventRow<'_>]) -> PgQuery<'q> {
    query
        .bind(
            events
                .iter()
                .map(|e| e.0.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(
            events
                .iter()
                .map(|e| e.1.map(|s| s.as_str().to_string()))
                .collect::<Vec<_>>(),
        )
        .bind(
            events
                .iter()
                .map(|e| e.2.as_str().to_string())
                .collect::<Vec<_>>(),
        )
        .bind(events.iter().map(|e| i(e.3)).collect::<Vec<_>>())
}

/// Binds the 16 column arrays of `puts` ($1 to $16).
fn bind_puts<'q>(query: PgQuery<'q>, puts: &[Cow<'_, JobRow>]) -> PgQuery<'q> {
    let s = |f: fn(&JobRow) -> String| puts.iter().map(|r| f(r)).collect::<Vec<String>>();
    let n = |f: fn(&JobRow) -> i64| puts.iter().map(|r| f(r)).collect::<Vec<i64>>();
    query
        .bind(s(|r| r.spec.id.as_str().to_string()))
        .bind(s(|r| r.spec.topic.as_str().to_string()))
        .bind(s(|r| r.spec.queue().as_str().to_string()))
        .bind(
            puts.iter()
                .map(|r| r.spec.body.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .bind(n(|r| i(r.spec.run_at)))
        .bind(n(|r| i(r.spec.ttr_ms)))
        .bind(n(|r| i64::from(r.spec.priority)))
        .bind(n(|r| i64::from(r.attempts)))
        .bind(n(|r| i64::from(r.spec.max_attempts)))
        .bind(s(|r| r.backoff_text()))
        .bind(
            puts.iter()
                .map(|r| r.spec.callback.as_ref().map(|c| c.url.clone()))
                .collect::<Vec<_>>(),
        )
        .bind(
            puts.iter()
                .map(|r| r.spec.callback.as_ref().map(|c| i(c.timeout_ms)))
                .collect::<Vec<_>>(),
        )
        .bind(s(|r| r.state.as_str().to_string()))
        .bind(
            puts.iter()
                .map(|r| r.reserved_until.map(i))
                .collect::<Vec<_>>(),
        )
        .bind(n(|r| i(r.seq)))
        .bind(n(|r| i(r.changed_at)))
        .bind(
            puts.iter()
                .map(|r| r.spec.publish.as_ref().map(|p| p.pack()))
                .collect::<Vec<_>>(),
        )
}
