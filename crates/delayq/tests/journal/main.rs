//! The recovery journal against the machine's real PostgreSQL and MariaDB (each test in a
//! database of its own, created and dropped; db.rs): what is written, and what a restore
//! brings back after the store lost its data, compared job by job with the journal-less
//! reference (the memory store given the same calls). docs/journal.md states the guarantees.
//!
//! `cargo test -p delayq --test journal` (needs PostgreSQL on 127.0.0.1:5432, MariaDB on
//! 127.0.0.1:3306 and `redis-server` on the PATH).
//!
//! restore.rs: the 10,000-job restores on Redis and on the embedded store, restoring twice,
//! `overdue: skip`, one job by id. schedules.rs: recurring schedules and topics' settings
//! back after a loss, no tick fired twice. http.rs: the routes, 409s, the compat envelope.
//! start.rs: bad URLs, an unreachable database, a newer schema. faults.rs: kill -9 under
//! load, PostgreSQL stopped under load in `sync` and `async` mode (a private PostgreSQL,
//! private_pg.rs).

#[path = "../support/mod.rs"]
mod support;

#[macro_use]
mod db;

mod faults;
mod http;
mod private_pg;
mod restore;
mod schedules;
mod start;
