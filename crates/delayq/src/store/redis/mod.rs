//! Redis store (stub).
