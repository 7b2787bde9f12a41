//! The journal's tables and their versioned migrations, one list per SQL dialect. Version `n`
//! is the `n`-th entry of each list; `delayq_journal_schema` holds the versions applied. A
//! migration is only ever appended, never edited: a database migrated by one build must read
//! the same in every later one.
//!
//! Every index is one more write per row written, and the rows are written on every
//! transition, so the tables carry only what a lookup needs (version 2):
//! - `delayq_jobs` has its key alone. A transition by id changes `state`, `run_at`,
//!   `attempts`, `reserved_until`, `seq` and `changed_at`, none of them indexed, so on
//!   PostgreSQL it is a heap-only update (no index touched; the table keeps 20 % of each page
//!   free for them). Pruning finds ended jobs through their events, and a kick of a topic
//!   (rare) reads the table.
//! - `delayq_job_events`: on PostgreSQL no key and a BRIN index on `at` (events are appended
//!   in time order; a BRIN index costs next to nothing to keep), for pruning; MySQL keeps its
//!   clustered auto-increment key and the B-tree on `at`. Both have a B-tree on `job_id`, for
//!   a job's history.

/// The schema version this build writes.
pub const LATEST: i64 = 3;

/// The table holding the version (one row).
pub const VERSION_TABLE: &str = "delayq_journal_schema";

/// PostgreSQL: each migration's statements, in order.
pub const POSTGRES: &[&[&str]] = &[
    // 1: the tables.
    &[
        "CREATE TABLE IF NOT EXISTS delayq_jobs (
        id VARCHAR(256) PRIMARY KEY,
        topic VARCHAR(128) NOT NULL,
        queue VARCHAR(140) NOT NULL,
        body BYTEA NOT NULL,
        run_at BIGINT NOT NULL,
        ttr_ms BIGINT NOT NULL,
        priority BIGINT NOT NULL,
        attempts BIGINT NOT NULL,
        max_attempts BIGINT NOT NULL,
        backoff_ms TEXT NOT NULL,
        callback_url TEXT NULL,
        callback_timeout_ms BIGINT NULL,
        state VARCHAR(16) NOT NULL,
        reserved_until BIGINT NULL,
        seq BIGINT NOT NULL,
        changed_at BIGINT NOT NULL
    )",
        "CREATE INDEX IF NOT EXISTS delayq_jobs_state ON delayq_jobs (state, changed_at)",
        "CREATE INDEX IF NOT EXISTS delayq_jobs_queue ON delayq_jobs (queue, state, changed_at)",
        "CREATE TABLE IF NOT EXISTS delayq_job_events (
        seq BIGSERIAL PRIMARY KEY,
        job_id VARCHAR(256) NOT NULL,
        from_state VARCHAR(16) NULL,
        to_state VARCHAR(16) NOT NULL,
        at BIGINT NOT NULL,
        instance VARCHAR(128) NOT NULL
    )",
        "CREATE INDEX IF NOT EXISTS delayq_job_events_at ON delayq_job_events (at)",
    ],
    // 2: no index on the columns transitions change; events without a key, BRIN on `at`, a
    // B-tree on `job_id` (histories); a publish job's target (job.rs `Publish::pack`), NULL
    // for other jobs.
    &[
        "DROP INDEX IF EXISTS delayq_jobs_state",
        "DROP INDEX IF EXISTS delayq_jobs_queue",
        "ALTER TABLE delayq_jobs SET (fillfactor = 80)",
        "ALTER TABLE delayq_job_events DROP CONSTRAINT IF EXISTS delayq_job_events_pkey",
        "DROP INDEX IF EXISTS delayq_job_events_at",
        "CREATE INDEX IF NOT EXISTS delayq_job_events_at ON delayq_job_events USING brin (at)",
        "CREATE INDEX IF NOT EXISTS delayq_job_events_job ON delayq_job_events (job_id)",
        "ALTER TABLE delayq_jobs ADD COLUMN publish TEXT NULL",
    ],
    // 3: recurring schedules and topics' flow control settings. A schedule's `spec` is the
    // store's record of it (embedded/record.rs); its place (`version`, `next_tick`,
    // `last_tick`) is in columns, which a fire updates alone. `state`: `live`, or `deleted` (a
    // tombstone, pruned after the retention).
    &[
        "CREATE TABLE IF NOT EXISTS delayq_schedules (
        id VARCHAR(256) PRIMARY KEY,
        spec BYTEA NOT NULL,
        version BIGINT NOT NULL,
        next_tick BIGINT NULL,
        last_tick BIGINT NULL,
        state VARCHAR(16) NOT NULL,
        changed_at BIGINT NOT NULL
    )",
        "CREATE TABLE IF NOT EXISTS delayq_topic_settings (
        topic VARCHAR(128) PRIMARY KEY,
        paused BOOLEAN NOT NULL,
        rate_micros BIGINT NULL,
        burst BIGINT NULL,
        max_in_flight BIGINT NULL,
        changed_at BIGINT NOT NULL
    )",
    ],
];

/// MySQL and MariaDB: each migration's statements, in order. Binary collation: ids and topics
/// compare byte for byte, as delayq compares them (`a` and `A` are two jobs).
pub const MYSQL: &[&[&str]] = &[
    // 1: the tables.
    &[
        "CREATE TABLE IF NOT EXISTS delayq_jobs (
        id VARCHAR(256) NOT NULL PRIMARY KEY,
        topic VARCHAR(128) NOT NULL,
        queue VARCHAR(140) NOT NULL,
        body LONGBLOB NOT NULL,
        run_at BIGINT NOT NULL,
        ttr_ms BIGINT NOT NULL,
        priority BIGINT NOT NULL,
        attempts BIGINT NOT NULL,
        max_attempts BIGINT NOT NULL,
        backoff_ms TEXT NOT NULL,
        callback_url TEXT NULL,
        callback_timeout_ms BIGINT NULL,
        state VARCHAR(16) NOT NULL,
        reserved_until BIGINT NULL,
        seq BIGINT NOT NULL,
        changed_at BIGINT NOT NULL,
        INDEX delayq_jobs_state (state, changed_at),
        INDEX delayq_jobs_queue (queue, state, changed_at)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TABLE IF NOT EXISTS delayq_job_events (
        seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        job_id VARCHAR(256) NOT NULL,
        from_state VARCHAR(16) NULL,
        to_state VARCHAR(16) NOT NULL,
        at BIGINT NOT NULL,
        instance VARCHAR(128) NOT NULL,
        INDEX delayq_job_events_at (at)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    ],
    // 2: no index on the columns transitions change; a B-tree on `job_id` (histories); a
    // publish job's target (job.rs `Publish::pack`), NULL for other jobs.
    &[
        "ALTER TABLE delayq_jobs DROP INDEX delayq_jobs_state, DROP INDEX delayq_jobs_queue",
        "ALTER TABLE delayq_job_events ADD INDEX delayq_job_events_job (job_id)",
        "ALTER TABLE delayq_jobs ADD COLUMN publish TEXT NULL",
    ],
    // 3: recurring schedules and topics' flow control settings, as PostgreSQL's 3.
    &[
        "CREATE TABLE IF NOT EXISTS delayq_schedules (
        id VARCHAR(256) NOT NULL PRIMARY KEY,
        spec LONGBLOB NOT NULL,
        version BIGINT NOT NULL,
        next_tick BIGINT NULL,
        last_tick BIGINT NULL,
        state VARCHAR(16) NOT NULL,
        changed_at BIGINT NOT NULL
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TABLE IF NOT EXISTS delayq_topic_settings (
        topic VARCHAR(128) NOT NULL PRIMARY KEY,
        paused BOOLEAN NOT NULL,
        rate_micros BIGINT NULL,
        burst BIGINT NULL,
        max_in_flight BIGINT NULL,
        changed_at BIGINT NOT NULL
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    ],
];
