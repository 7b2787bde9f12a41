//! The RabbitMQ bridge against the machine's real RabbitMQ (127.0.0.1:5672, guest/guest;
//! `apt-get install rabbitmq-server`): publish jobs pushed through /v1, the intake queue,
//! unroutable targets, bad input, the broker's connection cut (through a loopback proxy, the
//! shared broker is never restarted), kill -9 of delayq, and two instances on one Redis. Every
//! test uses its own queue and exchange names (a random suffix; queues expire on their own if
//! a test dies before deleting them). Run with `cargo test -p delayq --test amqp`.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod bridge;
mod faults;
mod rabbit;
