//! Embedded store (stub).
