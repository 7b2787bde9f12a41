//! Wiring: opens the store, starts the dispatcher, serves HTTP until shutdown.
