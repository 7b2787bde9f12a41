//! delayq's two HTTP APIs as bench connections: [`Seed`] (`/push`, `/pop`, `/finish`,
//! `/delete`; one job per request, whole-second delays) and [`V1`] (`/v1/jobs[/batch]`,
//! `/v1/reserve`, `/v1/finish`; batches, ms delays). Requests are serialised with serde from
//! borrowed structs; responses are parsed into the few fields the bench needs.

use super::{Delivered, Due, Endpoint, NewJob, due_secs, now_ms};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Request timeout beyond any long-poll the bench asks for.
const SLACK: Duration = Duration::from_secs(30);

async fn post<T: Serialize + ?Sized>(
    ep: &Endpoint,
    path: &str,
    body: &T,
    wait: Duration,
) -> Result<(reqwest::StatusCode, bytes::Bytes)> {
    let resp = ep
        .client
        .post(format!("http://{}{path}", ep.addr))
        .json(body)
        .timeout(wait + SLACK)
        .send()
        .await?;
    let status = resp.status();
    Ok((status, resp.bytes().await?))
}

fn refused(path: &str, status: reqwest::StatusCode, body: &[u8]) -> anyhow::Error {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    anyhow::anyhow!("{path}: HTTP {status}: {text}")
}

// ---------- seed API ----------

#[derive(Serialize)]
struct SeedPush<'a> {
    topic: &'a str,
    id: &'a str,
    delay: u64,
    ttr: u64,
    body: &'a str,
}

#[derive(Serialize)]
struct SeedPop<'a> {
    topic: &'a str,
    timeout: u64,
}

#[derive(Serialize)]
struct SeedId<'a> {
    id: &'a str,
}

#[derive(Deserialize)]
struct SeedResponse {
    code: serde_json::Value,
    #[serde(default)]
    message: String,
    #[serde(default)]
    data: Option<SeedJob>,
}

#[derive(Deserialize)]
struct SeedJob {
    id: String,
    #[serde(default)]
    body: String,
}

fn seed_ok(path: &str, status: reqwest::StatusCode, body: &[u8]) -> Result<SeedResponse> {
    if !status.is_success() {
        return Err(refused(path, status, body));
    }
    let r: SeedResponse = serde_json::from_slice(body).map_err(|e| {
        anyhow::anyhow!(
            "{path}: bad response ({e}): {}",
            String::from_utf8_lossy(body)
        )
    })?;
    if r.code != serde_json::json!(0) {
        bail!("{path}: code {} {}", r.code, r.message);
    }
    Ok(r)
}

/// A connection to the seed API.
pub struct Seed {
    ep: Arc<Endpoint>,
}

impl Seed {
    pub fn new(ep: Arc<Endpoint>) -> Seed {
        Seed { ep }
    }

    /// One `/push` per job (the seed API has no batch).
    pub async fn push(&mut self, jobs: &[NewJob]) -> Result<Vec<bool>> {
        let mut acked = Vec::with_capacity(jobs.len());
        for j in jobs {
            let req = SeedPush {
                topic: &self.ep.topic,
                id: &j.id,
                delay: due_secs(j.due, now_ms()),
                ttr: self.ep.ttr_s,
                body: &j.body,
            };
            let (st, b) = post(&self.ep, "/push", &req, Duration::ZERO).await?;
            seed_ok("/push", st, &b)?;
            acked.push(true);
        }
        Ok(acked)
    }

    /// `/pop` with `timeout` in whole seconds (at least 1, so an idle consumer does not spin).
    pub async fn reserve(&mut self, timeout_ms: u64) -> Result<Vec<Delivered>> {
        let timeout = timeout_ms.div_ceil(1000).max(1);
        let req = SeedPop {
            topic: &self.ep.topic,
            timeout,
        };
        let (st, b) = post(&self.ep, "/pop", &req, Duration::from_secs(timeout)).await?;
        let r = seed_ok("/pop", st, &b)?;
        Ok(r.data
            .map(|j| Delivered {
                handle: j.id,
                body: j.body,
            })
            .into_iter()
            .collect())
    }

    pub async fn finish(&mut self, ids: &[String]) -> Result<()> {
        for id in ids {
            let (st, b) = post(&self.ep, "/finish", &SeedId { id }, Duration::ZERO).await?;
            seed_ok("/finish", st, &b)?;
        }
        Ok(())
    }

    pub async fn delete(&mut self, ids: &[String]) -> Result<u64> {
        for id in ids {
            let (st, b) = post(&self.ep, "/delete", &SeedId { id }, Duration::ZERO).await?;
            seed_ok("/delete", st, &b)?;
        }
        Ok(ids.len() as u64)
    }
}

// ---------- /v1 API ----------

#[derive(Serialize)]
struct V1NewJob<'a> {
    topic: &'a str,
    id: &'a str,
    body: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_at_ms: Option<u64>,
    ttr_ms: u64,
}

#[derive(Serialize)]
struct V1Batch<'a> {
    jobs: Vec<V1NewJob<'a>>,
}

#[derive(Deserialize)]
struct V1BatchResults {
    results: Vec<V1PushResult>,
}

#[derive(Deserialize)]
struct V1PushResult {
    status: String,
}

#[derive(Serialize)]
struct V1Reserve<'a> {
    topics: [&'a str; 1],
    max: usize,
    timeout_ms: u64,
}

#[derive(Deserialize)]
struct V1Jobs {
    jobs: Vec<V1Job>,
}

#[derive(Deserialize)]
struct V1Job {
    id: String,
    #[serde(default)]
    body: String,
}

#[derive(Serialize)]
struct V1Ids<'a> {
    ids: &'a [String],
}

#[derive(Deserialize)]
struct V1Finished {
    finished: u64,
}

/// A connection to the /v1 API.
pub struct V1 {
    ep: Arc<Endpoint>,
    /// Whether `POST /v1/finish` removed delayed jobs the last time cleanup tried it; when it
    /// does not, cleanup deletes one id at a time.
    batch_delete_works: Option<bool>,
}

impl V1 {
    pub fn new(ep: Arc<Endpoint>) -> V1 {
        V1 {
            ep,
            batch_delete_works: None,
        }
    }

    fn job<'a>(&'a self, j: &'a NewJob) -> V1NewJob<'a> {
        let (delay_ms, run_at_ms) = match j.due {
            Due::DelayMs(d) => (Some(d), None),
            Due::RunAtMs(t) => (None, Some(t)),
        };
        V1NewJob {
            topic: &self.ep.topic,
            id: &j.id,
            body: &j.body,
            delay_ms,
            run_at_ms,
            ttr_ms: self.ep.ttr_s * 1000,
        }
    }

    /// `POST /v1/jobs` for one job, `POST /v1/jobs/batch` for more.
    pub async fn push(&mut self, jobs: &[NewJob]) -> Result<Vec<bool>> {
        if jobs.len() == 1 {
            let (st, b) = post(&self.ep, "/v1/jobs", &self.job(&jobs[0]), Duration::ZERO).await?;
            if !st.is_success() {
                return Err(refused("/v1/jobs", st, &b));
            }
            return Ok(vec![true]);
        }
        let req = V1Batch {
            jobs: jobs.iter().map(|j| self.job(j)).collect(),
        };
        let (st, b) = post(&self.ep, "/v1/jobs/batch", &req, Duration::ZERO).await?;
        if !st.is_success() {
            return Err(refused("/v1/jobs/batch", st, &b));
        }
        let r: V1BatchResults = serde_json::from_slice(&b)?;
        if r.results.len() != jobs.len() {
            bail!(
                "/v1/jobs/batch: {} results for {} jobs",
                r.results.len(),
                jobs.len()
            );
        }
        Ok(r.results.iter().map(|x| x.status != "exists").collect())
    }

    pub async fn reserve(&mut self, max: usize, timeout_ms: u64) -> Result<Vec<Delivered>> {
        let req = V1Reserve {
            topics: [&self.ep.topic],
            max: max.max(1),
            timeout_ms,
        };
        let (st, b) = post(
            &self.ep,
            "/v1/reserve",
            &req,
            Duration::from_millis(timeout_ms),
        )
        .await?;
        if !st.is_success() {
            return Err(refused("/v1/reserve", st, &b));
        }
        let r: V1Jobs = serde_json::from_slice(&b)?;
        Ok(r.jobs
            .into_iter()
            .map(|j| Delivered {
                handle: j.id,
                body: j.body,
            })
            .collect())
    }

    /// `POST /v1/jobs/{id}/finish` for one id, `POST /v1/finish` for more.
    pub async fn finish(&mut self, ids: &[String]) -> Result<()> {
        if ids.len() == 1 {
            let path = format!("/v1/jobs/{}/finish", ids[0]);
            let (st, b) = post(&self.ep, &path, &serde_json::json!({}), Duration::ZERO).await?;
            if !st.is_success() {
                return Err(refused(&path, st, &b));
            }
            return Ok(());
        }
        let (st, b) = post(&self.ep, "/v1/finish", &V1Ids { ids }, Duration::ZERO).await?;
        if !st.is_success() {
            return Err(refused("/v1/finish", st, &b));
        }
        Ok(())
    }

    /// Cleanup: `POST /v1/finish` with all ids when it removes delayed jobs, else
    /// `DELETE /v1/jobs/{id}` one at a time.
    pub async fn delete(&mut self, ids: &[String]) -> Result<u64> {
        if ids.len() > 1 && self.batch_delete_works != Some(false) {
            let (st, b) = post(&self.ep, "/v1/finish", &V1Ids { ids }, Duration::ZERO).await?;
            if st.is_success()
                && let Ok(r) = serde_json::from_slice::<V1Finished>(&b)
                && r.finished > 0
            {
                self.batch_delete_works = Some(true);
                return Ok(r.finished);
            }
            self.batch_delete_works = Some(false);
        }
        let mut removed = 0;
        for id in ids {
            let resp = self
                .ep
                .client
                .delete(format!("http://{}/v1/jobs/{id}", self.ep.addr))
                .timeout(SLACK)
                .send()
                .await?;
            let st = resp.status();
            if st.is_success() {
                removed += 1;
            } else if st != reqwest::StatusCode::NOT_FOUND {
                let b = resp.bytes().await?;
                return Err(refused("DELETE /v1/jobs/{id}", st, &b));
            }
        }
        Ok(removed)
    }

    /// How cleanup deleted, once it has: `Some(true)` batch, `Some(false)` per id.
    pub fn batch_delete(&self) -> Option<bool> {
        self.batch_delete_works
    }
}
