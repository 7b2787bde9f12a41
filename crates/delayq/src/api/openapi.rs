//! The OpenAPI document of /v1 (STUB).
