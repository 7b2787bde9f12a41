//! The MySQL/MariaDB journal: how a batch is written there, plus the statements both dialects
//! share (`sql.rs`'s `statements!`). MySQL has no arrays: a batch is one transaction of
//! multi-row statements (at most [`ROWS_PER_STATEMENT`] rows each), the rows of each run
//! between kicks of a topic as an upsert, an update joined with a derived table of the moves,
//! an update per ending state, and the events.

use super::row::Op;
use super::sql::{DELETED_VERSION, Last, Meta, event_of, last_of, meta_of, runs, spec_bytes};

super::sql::statements!(
    sqlx::MySql,
    schema::MYSQL,
    "DELETE j FROM delayq_jobs AS j JOIN delayq_job_events AS e ON j.id = e.job_id \
     WHERE e.at < "
);

/// The upsert's tail after the rows: a job row already there is replaced.
const UPSERT: &str = " ON DUPLICATE KEY UPDATE topic = VALUES(topic), queue = VALUES(queue), \
    body = VALUES(body), run_at = VALUES(run_at), ttr_ms = VALUES(ttr_ms), \
    priority = VALUES(priority), attempts = VALUES(attempts), \
    max_attempts = VALUES(max_attempts), backoff_ms = VALUES(backoff_ms), \
    callback_url = VALUES(callback_url), callback_timeout_ms = VALUES(callback_timeout_ms), \
    state = VALUES(state), reserved_until = VALUES(reserved_until), seq = VALUES(seq), \
    changed_at = VALUES(changed_at), publish = VALUES(publish)";

/// Writes `ops` in order, in one transaction, on `conn`.
pub async fn write(
    conn: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
    ops: &[Op],
    instance: &str,
) -> Result<(), sqlx::Error> {
    let mut tx = sqlx::Connection::begin(&mut **conn).await?;
    for (run, kick) in runs(ops) {
        if run.iter().any(Op::is_job) {
            write_run(&mut tx, run, instance).await?;
        }
        if let Some((queue, n, at)) = kick {
            kick_topic(&mut tx, queue.as_str(), n, at, instance).await?;
        }
    }
    write_meta(&mut tx, &meta_of(ops)).await?;
    tx.commit().await
}

/// A schedule row already there is replaced only by a new schedule (version 1) or a higher
/// version (`sql.rs`'s [`Meta`]); `version` is set last, as MySQL assigns left to right.
const SCHEDULE_UPSERT: &str = " ON DUPLICATE KEY UPDATE \
    spec = IF(VALUES(version) = 1 OR VALUES(version) > version, VALUES(spec), spec), \
    next_tick = IF(VALUES(version) = 1 OR VALUES(version) > version, VALUES(next_tick), next_tick), \
    last_tick = IF(VALUES(version) = 1 OR VALUES(version) > version, VALUES(last_tick), last_tick), \
    state = IF(VALUES(version) = 1 OR VALUES(version) > version, 'live', state), \
    changed_at = IF(VALUES(version) = 1 OR VALUES(version) > version, VALUES(changed_at), changed_at), \
    version = IF(VALUES(version) = 1 OR VALUES(version) > version, VALUES(version), version)";

/// The schedules' and topic settings' rows of a batch (`sql.rs`'s [`Meta`]), in the batch's
/// transaction.
async fn write_meta(
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
    meta: &Meta<'_>,
) -> Result<(), sqlx::Error> {
    for chunk in meta.puts.chunks(ROWS_PER_STATEMENT) {
        let mut q = Q::new(
            "INSERT INTO delayq_schedules (id, spec, version, next_tick, last_tick, state, \
             changed_at) ",
        );
        q.push_values(chunk, |mut b, (sc, at)| {
            b.push_bind(sc.spec.id.as_str().to_string())
                .push_bind(spec_bytes(sc))
                .push_bind(i(sc.version))
                .push_bind(sc.next_tick.map(i))
                .push_bind(sc.last_tick.map(i))
                .push_bind("live")
                .push_bind(i(*at));
        });
        q.push(SCHEDULE_UPSERT);
        q.build().execute(&mut **tx).await?;
    }
    for chunk in meta.fires.chunks(ROWS_PER_STATEMENT) {
        let mut q = Q::new("UPDATE delayq_schedules AS s JOIN (");
        for (k, (f, at)) in chunk.iter().enumerate() {
            q.push(if k == 0 {
                "SELECT "
            } else {
                " UNION ALL SELECT "
            });
            q.push_bind(f.id.as_str().to_string())
                .push(" AS id, CAST(")
                .push_bind(i(f.version))
                .push(" AS SIGNED) AS version, CAST(")
                .push_bind(f.next_tick.map(i))
                .push(" AS SIGNED) AS next_tick, CAST(")
                .push_bind(f.last_tick.map(i))
                .push(" AS SIGNED) AS last_tick, CAST(")
                .push_bind(i(*at))
                .push(" AS SIGNED) AS at");
        }
        q.push(
            ") AS f ON s.id = f.id SET s.next_tick = f.next_tick, s.last_tick = f.last_tick, \
             s.changed_at = f.at, s.version = f.version WHERE s.version < f.version",
        );
        q.build().execute(&mut **tx).await?;
    }
    for (id, at) in &meta.deletes {
        let mut q = Q::new("UPDATE delayq_schedules SET state = 'deleted', version = ");
        q.push_bind(DELETED_VERSION)
            .push(", changed_at = ")
            .push_bind(i(*at))
            .push(" WHERE id = ")
            .push_bind(id.as_str().to_string());
        q.build().execute(&mut **tx).await?;
    }
    for chunk in meta.settings.chunks(ROWS_PER_STATEMENT) {
        let mut q = Q::new(
            "INSERT INTO delayq_topic_settings (topic, paused, rate_micros, burst, \
             max_in_flight, changed_at) ",
        );
        q.push_values(chunk, |mut b, (topic, s, at)| {
            b.push_bind(topic.as_str().to_string())
                .push_bind(s.paused)
                .push_bind(s.rate_micros.map(i))
                .push_bind(s.burst.map(i64::from))
                .push_bind(s.max_in_flight.map(i64::from))
                .push_bind(i(*at));
        });
        q.push(
            " ON DUPLICATE KEY UPDATE paused = VALUES(paused), rate_micros = VALUES(rate_micros), \
             burst = VALUES(burst), max_in_flight = VALUES(max_in_flight), \
             changed_at = VALUES(changed_at)",
        );
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// Ops without kicks of a topic: the last of each job's ops decides its row; every op is an
/// event.
async fn write_run(
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
    ops: &[Op],
    instance: &str,
) -> Result<(), sqlx::Error> {
    if ops.is_empty() {
        return Ok(());
    }
    let Last { puts, moves, ends } = &last_of(ops);
    for chunk in puts.chunks(ROWS_PER_STATEMENT) {
        let mut q = Q::new(
            "INSERT INTO delayq_jobs (id, topic, queue, body, run_at, ttr_ms, \
             priority, attempts, max_attempts, backoff_ms, callback_url, \
             callback_timeout_ms, state, reserved_until, seq, changed_at, publish) ",
        );
        q.push_values(chunk, |mut b, row| {
            let s = &row.spec;
            b.push_bind(s.id.as_str().to_string())
                .push_bind(s.topic.as_str().to_string())
                .push_bind(s.queue().as_str().to_string())
                .push_bind(s.body.as_bytes().to_vec())
                .push_bind(i(s.run_at))
                .push_bind(i(s.ttr_ms))
                .push_bind(i64::from(s.priority))
                .push_bind(i64::from(row.attempts))
                .push_bind(i64::from(s.max_attempts))
                .push_bind(row.backoff_text())
                .push_bind(s.callback.as_ref().map(|c| c.url.clone()))
                .push_bind(s.callback.as_ref().map(|c| i(c.timeout_ms)))
                .push_bind(row.state.as_str())
                .push_bind(row.reserved_until.map(i))
                .push_bind(i(row.seq))
                .push_bind(i(row.changed_at))
                .push_bind(s.publish.as_ref().map(|p| p.pack()));
        });
        q.push(UPSERT);
        q.build().execute(&mut **tx).await?;
    }
    for chunk in moves.chunks(ROWS_PER_STATEMENT) {
        // No arrays in MySQL: the moves as a derived table of one row each.
        let mut q = Q::new("UPDATE delayq_jobs AS j JOIN (");
        for (k, m) in chunk.iter().enumerate() {
            q.push(if k == 0 {
                "SELECT "
            } else {
                " UNION ALL SELECT "
            });
            q.push_bind(m.id.as_str().to_string())
                .push(" AS id, ")
                .push_bind(m.state.as_str())
                .push(" AS state, CAST(")
                .push_bind(i(m.run_at))
                .push(" AS SIGNED) AS run_at, CAST(")
                .push_bind(i64::from(m.attempts))
                .push(" AS SIGNED) AS attempts, CAST(")
                .push_bind(m.reserved_until.map(i))
                .push(" AS SIGNED) AS reserved_until, CAST(")
                .push_bind(i(m.seq))
                .push(" AS SIGNED) AS seq, CAST(")
                .push_bind(i(m.at))
                .push(" AS SIGNED) AS changed_at");
        }
        q.push(
            ") AS m ON j.id = m.id SET j.state = m.state, j.run_at = m.run_at, \
             j.attempts = m.attempts, j.reserved_until = m.reserved_until, \
             j.seq = m.seq, j.changed_at = m.changed_at",
        );
        q.build().execute(&mut **tx).await?;
    }
    for chunk in ends.chunks(ROWS_PER_STATEMENT) {
        // One statement per ending state, at the latest time among its jobs.
        for to in [RowState::Finished, RowState::Deleted, RowState::Skipped] {
            let ids: Vec<_> = chunk.iter().filter(|e| e.1 == to).collect();
            let Some(at) = ids.iter().map(|e| e.2).max() else {
                continue;
            };
            let mut q = Q::new("UPDATE delayq_jobs SET state = ");
            q.push_bind(to.as_str())
                .push(", changed_at = ")
                .push_bind(i(at));
            q.push(" WHERE id IN (");
            let mut sep = q.separated(", ");
            for (id, _, _) in &ids {
                sep.push_bind(id.as_str().to_string());
            }
            q.push(")");
            q.build().execute(&mut **tx).await?;
        }
    }
    for chunk in ops.chunks(ROWS_PER_STATEMENT) {
        let mut q =
            Q::new("INSERT INTO delayq_job_events (job_id, from_state, to_state, at, instance) ");
        q.push_values(
            chunk.iter().filter_map(event_of),
            |mut b, (id, from, to, at)| {
                b.push_bind(id.as_str().to_string())
                    .push_bind(from.map(|s| s.as_str()))
                    .push_bind(to.as_str())
                    .push_bind(i(at))
                    .push_bind(instance.to_string());
            },
        );
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}
