//! One publish attempt of a reserved publish job: published through the RabbitMQ bridge
//! ([`crate::amqp`]) within its publish timeout, counted and logged.
//!
//! Not here: the publish itself (amqp/publish.rs), what the outcome does to the job
//! (delivery/mod.rs).

use super::{Ended, Shared};
use crate::amqp::{PublishAnswer, PublishOutcome};
use crate::job::{self, Job};

/// One AMQP publish of a reserved publish job, counted.
pub(super) async fn attempt(shared: &Shared, job: &Job, target: &job::Publish) -> Option<Ended> {
    let answer = match &shared.amqp {
        None => PublishAnswer::not_configured(),
        Some(broker) => {
            let limit = u64::try_from(broker.publish_timeout().as_millis()).unwrap_or(u64::MAX);
            if !super::hold_for(shared, job, limit).await {
                return None;
            }
            broker.publish(job, target).await
        }
    };
    let late_ms = shared.clock.now().saturating_sub(job.spec.run_at);
    shared
        .metrics
        .amqp_publish(answer.outcome.label(), answer.took, late_ms);
    match answer.outcome {
        PublishOutcome::Confirmed => {}
        // The bridge logs the connection's loss and return once, not once per job.
        PublishOutcome::ConnectionError => tracing::debug!(
            job_id = %job.spec.id,
            attempt = job.attempts,
            reason = %answer.reason,
            "publish failed"
        ),
        _ => tracing::warn!(
            job_id = %job.spec.id,
            topic = %job.spec.topic,
            attempt = job.attempts,
            outcome = answer.outcome.label(),
            reason = %answer.reason,
            "publish failed"
        ),
    }
    Some(Ended {
        finished: answer.outcome.finished(),
        retry_after_ms: None,
    })
}
