//! In-memory engine (stub).
