//! One beanstalkd connection: reads command lines and bodies (bounded), runs each command on
//! the store, writes the replies in order, and keeps what beanstalkd keeps per connection: the
//! tube used, the watch list, and the jobs it reserved (only those can be released, buried or
//! touched here; they are handed back when the connection closes, as beanstalkd does).
//!
//! Replies are written when no complete command is waiting in the buffer, so a client that
//! pipelines gets its replies in a few writes. A line longer than [`MAX_LINE`] is answered
//! `BAD_FORMAT` and the connection closed (its end cannot be found without reading all of it);
//! a line ending in `\n` without `\r` is answered `BAD_FORMAT` and the connection goes on. A
//! body without its `\r\n` is answered `EXPECTED_CRLF`; one larger than the limit is read and
//! dropped, then answered `JOB_TOO_BIG`, as beanstalkd does.

use super::Beanstalk;
use super::ids::{self, Ids};
use super::proto::{self, Command, MAX_LINE, Reply, Yaml};
use crate::dispatch::DispatchError;
use crate::job::{JobId, JobSpec, JobState, MAX_TTR_MS, Topic, UnixMillis};
use crate::store::{PushMode, Reschedule, StoreError};
use foldhash::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The safety margin of a reservation (beanstalkd's): in the last second of a job's TTR, a
/// `reserve` of the connection that holds it answers `DEADLINE_SOON` instead of waiting.
const SAFETY_MARGIN_MS: u64 = 1_000;
/// What `reserve-with-timeout` waits beyond its timeout: the timer makes a job ready within a
/// few milliseconds of its due time, and one due as the timeout ends is the client's (a
/// worker that released a job for 2 s and waits 1 s twice expects it the second time).
const TIMEOUT_GRACE: Duration = Duration::from_millis(25);
/// Longest single wait of a `reserve` before it looks at its reservations again.
const WAIT_SLICE: Duration = Duration::from_secs(60);
/// How long a connection closed for a line too long still reads (and drops) what comes.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read ahead while a `reserve` waits (pipelined commands).
const READ_AHEAD: usize = 64 * 1024;
/// Replies held before they are written even though commands are waiting.
const WRITE_BATCH: usize = 64 * 1024;
/// How many times a put draws another id when the one drawn exists already.
const PUT_TRIES: usize = 8;
/// Most ready jobs `stats` and `stats-tube` look at to count the urgent ones, per tube.
const URGENT_SCAN: usize = 10_000;
/// Jobs per listing page (`kick`'s delayed jobs, the urgent count).
const PAGE: usize = 1000;
/// Priorities below this are urgent (beanstalkd's `current-jobs-urgent`).
const URGENT_PRIORITY: u32 = 1024;

/// A job this connection reserved.
#[derive(Debug, Clone)]
struct Held {
    topic: Topic,
    /// The reservation's deadline as this connection last saw it.
    until: UnixMillis,
}

/// What a line read gave.
enum Input {
    /// A line, its `\r\n` taken off: where it lies in the read buffer.
    Line(std::ops::Range<usize>),
    /// Ended in `\n` without `\r`.
    NoCr,
    /// No end within [`MAX_LINE`].
    TooLong,
    Closed,
}

/// What to do after a command.
enum Step {
    Reply(Reply),
    Close,
}

struct Conn<S> {
    front: Arc<Beanstalk>,
    io: S,
    /// Bytes read; `buf[start..]` not consumed yet.
    buf: Vec<u8>,
    start: usize,
    /// Replies not written yet.
    out: Vec<u8>,
    used: Topic,
    watched: Vec<Topic>,
    reserved: HashMap<JobId, Held>,
    producer: bool,
    worker: bool,
    shutdown: CancellationToken,
}

/// Serves one connection until the client leaves, sends `quit` or breaks the protocol beyond
/// repair, or `shutdown` is cancelled; then hands back the jobs it holds.
pub(super) async fn serve<S>(front: Arc<Beanstalk>, io: S, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    front.connections.fetch_add(1, Ordering::Relaxed);
    front.total_connections.fetch_add(1, Ordering::Relaxed);
    let default = Topic::parse("default").expect("`default` is a valid topic");
    front.tube(&default, |t| {
        t.using += 1;
        t.watching += 1;
    });
    let mut conn = Conn {
        front: front.clone(),
        io,
        buf: Vec::with_capacity(4096),
        start: 0,
        out: Vec::with_capacity(4096),
        used: default.clone(),
        watched: vec![default],
        reserved: HashMap::default(),
        producer: false,
        worker: false,
        shutdown,
    };
    if let Err(e) = conn.run().await {
        tracing::debug!(error = %e, "beanstalkd: connection ended");
    }
    conn.close().await;
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Conn<S> {
    async fn run(&mut self) -> std::io::Result<()> {
        let shutdown = self.shutdown.clone();
        // One wait for the shutdown for the whole connection, not one per command: each would
        // join and leave the token's list of waiters.
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        loop {
            let input = tokio::select! {
                i = self.read_line() => i?,
                _ = &mut cancelled => return self.flush().await,
            };
            let line = match input {
                Input::Line(line) => line,
                Input::NoCr => {
                    self.reply(&Reply::Word(proto::BAD_FORMAT)).await?;
                    continue;
                }
                Input::TooLong => {
                    self.reply(&Reply::Word(proto::BAD_FORMAT)).await?;
                    self.flush().await?;
                    // Read what the client still sends for a moment, so that closing with
                    // unread bytes (a reset) does not destroy the reply on its way.
                    self.io.shutdown().await?;
                    let _ = tokio::time::timeout(LINGER, async {
                        loop {
                            self.start = self.buf.len();
                            if self.fill().await? == 0 {
                                return Ok::<(), std::io::Error>(());
                            }
                        }
                    })
                    .await;
                    return Ok(());
                }
                Input::Closed => return self.flush().await,
            };
            let cmd = match proto::parse(&self.buf[line.clone()]) {
                Ok(cmd) => cmd,
                Err(e) => {
                    tracing::debug!(line = %String::from_utf8_lossy(&self.buf[line]), error = ?e, "beanstalkd: line refused");
                    self.reply(&e.reply()).await?;
                    continue;
                }
            };
            self.front.count(cmd.counter());
            let step = match cmd {
                Command::Put {
                    pri,
                    delay_s,
                    ttr_s,
                    bytes,
                } => self.put(pri, delay_s, ttr_s, bytes).await?,
                Command::Reserve => self.reserve(None).await?,
                Command::ReserveWithTimeout(s) => {
                    self.reserve(Some(Duration::from_secs(u64::from(s))))
                        .await?
                }
                cmd => self.command(cmd).await,
            };
            match step {
                Step::Reply(r) => self.reply(&r).await?,
                Step::Close => return self.flush().await,
            }
        }
    }

    /// Queues a reply; writes the queue when no further command is buffered.
    async fn reply(&mut self, reply: &Reply) -> std::io::Result<()> {
        reply.encode(&mut self.out);
        if self.start >= self.buf.len() || self.out.len() >= WRITE_BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            self.io.write_all(&self.out).await?;
            self.io.flush().await?;
            self.out.clear();
        }
        Ok(())
    }

    /// Reads more bytes (writing pending replies first). 0 at the end of the stream.
    async fn fill(&mut self) -> std::io::Result<usize> {
        self.flush().await?;
        self.read_more().await
    }

    /// Reads more bytes. Cancellation-safe (a waiting `reserve` drops it when a job comes):
    /// nothing is appended but what was read.
    async fn read_more(&mut self) -> std::io::Result<usize> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.reserve(16 * 1024);
        self.io.read_buf(&mut self.buf).await
    }

    async fn read_line(&mut self) -> std::io::Result<Input> {
        let mut scanned = 0;
        loop {
            let pending = &self.buf[self.start..];
            if let Some(i) = pending[scanned..].iter().position(|&b| b == b'\n') {
                let i = scanned + i;
                if i + 1 > MAX_LINE {
                    return Ok(Input::TooLong);
                }
                let input = if i > 0 && pending[i - 1] == b'\r' {
                    Input::Line(self.start..self.start + i - 1)
                } else {
                    Input::NoCr
                };
                self.start += i + 1;
                return Ok(input);
            }
            scanned = pending.len();
            if scanned >= MAX_LINE {
                return Ok(Input::TooLong);
            }
            if self.fill().await? == 0 {
                return Ok(Input::Closed);
            }
        }
    }

    /// The next `n` bytes, or `None` at the end of the stream.
    async fn read_exact(&mut self, n: usize) -> std::io::Result<Option<Vec<u8>>> {
        while self.buf.len() - self.start < n {
            if self.fill().await? == 0 {
                return Ok(None);
            }
        }
        let out = self.buf[self.start..self.start + n].to_vec();
        self.start += n;
        Ok(Some(out))
    }

    /// Drops the next `n` bytes as they come; false at the end of the stream.
    async fn skip(&mut self, mut n: u64) -> std::io::Result<bool> {
        loop {
            let have = (self.buf.len() - self.start) as u64;
            if have >= n {
                self.start += n as usize;
                return Ok(true);
            }
            n -= have;
            self.start = self.buf.len();
            if self.fill().await? == 0 {
                return Ok(false);
            }
        }
    }

    async fn put(
        &mut self,
        pri: u32,
        delay_s: u32,
        ttr_s: u32,
        bytes: u64,
    ) -> std::io::Result<Step> {
        let front = self.front.clone();
        if bytes > front.options.max_job_bytes as u64 {
            if !self.skip(bytes.saturating_add(2)).await? {
                return Ok(Step::Close);
            }
            return Ok(Step::Reply(Reply::Word(proto::JOB_TOO_BIG)));
        }
        let Some(mut body) = self.read_exact(bytes as usize + 2).await? else {
            return Ok(Step::Close);
        };
        if !body.ends_with(b"\r\n") {
            return Ok(Step::Reply(Reply::Word(proto::EXPECTED_CRLF)));
        }
        body.truncate(bytes as usize);
        if front.is_draining() {
            return Ok(Step::Reply(Reply::Word(proto::DRAINING)));
        }
        if !self.producer {
            self.producer = true;
            front.producers.fetch_add(1, Ordering::Relaxed);
        }
        let at = front.clock.read();
        let now = at.millis();
        let mut n = front.ids.next(now);
        let mut spec = JobSpec::new(
            self.used.clone(),
            JobId::from_number(n),
            ids::body_to_store(body),
            at.due_after(u64::from(delay_s) * 1000),
        );
        spec.priority = pri;
        spec.ttr_ms = (u64::from(ttr_s.max(1)) * 1000).min(MAX_TTR_MS);
        for _ in 0..PUT_TRIES {
            match front.store.push(spec.clone(), PushMode::Reject, now).await {
                Ok(_) => {
                    front.tube(&self.used, |t| t.total_jobs += 1);
                    return Ok(Step::Reply(Reply::Number("INSERTED", n)));
                }
                // A job pushed over HTTP holds that number: the next one.
                Err(StoreError::Exists) => {
                    n = front.ids.next(now);
                    spec.id = JobId::from_number(n);
                }
                Err(e) => return Ok(Step::Reply(failed(e))),
            }
        }
        tracing::error!("beanstalkd: no free job id after {PUT_TRIES} tries");
        Ok(Step::Reply(Reply::Word(proto::INTERNAL_ERROR)))
    }

    /// `reserve` (`timeout` `None`) and `reserve-with-timeout`.
    async fn reserve(&mut self, timeout: Option<Duration>) -> std::io::Result<Step> {
        let front = self.front.clone();
        if !self.worker {
            self.worker = true;
            front.workers.fetch_add(1, Ordering::Relaxed);
        }
        // A job due at the deadline itself is handed out, not missed by the timer's latency.
        // 0 answers at once.
        let deadline = timeout.map(|t| {
            let grace = if t.is_zero() {
                Duration::ZERO
            } else {
                TIMEOUT_GRACE
            };
            Instant::now() + t + grace
        });
        loop {
            let now = front.clock.now();
            let margin = match self.deadline_soon(now).await {
                Ok(Soon::Now) => return Ok(Step::Reply(Reply::Word(proto::DEADLINE_SOON))),
                Ok(Soon::At(at)) => at,
                Err(e) => return Ok(Step::Reply(failed(e))),
            };
            let mut wait = WAIT_SLICE;
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            if let Some(m) = margin {
                wait = wait.min(Duration::from_millis(m.saturating_sub(now)));
            }
            let polled = self.poll(wait).await?;
            let jobs = match polled {
                Polled::Jobs(Ok(jobs)) => jobs,
                Polled::Jobs(Err(DispatchError::TooManyWaiters { .. })) => {
                    return Ok(Step::Reply(Reply::Word(proto::OUT_OF_MEMORY)));
                }
                Polled::Jobs(Err(DispatchError::Store(e))) => return Ok(Step::Reply(failed(e))),
                // A half-closed connection: beanstalkd answers TIMED_OUT.
                Polled::HalfClosed => return Ok(Step::Reply(Reply::Word(proto::TIMED_OUT))),
                Polled::Shutdown => return Ok(Step::Close),
            };
            if let Some(job) = jobs.into_iter().next() {
                let until = job.reserved_until.unwrap_or(now);
                let handle = front.ids.handle_of(&job.spec.id, now);
                let body = ids::body_from_store(&job.spec.body).into_owned();
                let held = Held {
                    topic: job.spec.topic.clone(),
                    until,
                };
                self.reserved.insert(job.spec.id, held);
                return Ok(Step::Reply(Reply::Job {
                    word: "RESERVED",
                    id: handle,
                    body,
                }));
            }
            if self.shutdown.is_cancelled() {
                return Ok(Step::Close);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Step::Reply(Reply::Word(proto::TIMED_OUT)));
            }
        }
    }

    /// One long poll of the watched tubes, reading ahead meanwhile so that a client that goes
    /// away is noticed (the poll is dropped, and the dispatcher hands back anything it had
    /// reserved for it).
    async fn poll(&mut self, wait: Duration) -> std::io::Result<Polled> {
        let front = self.front.clone();
        let topics = self.watched.clone();
        front.waiting.fetch_add(1, Ordering::Relaxed);
        for t in &topics {
            front.tube(t, |t| t.waiting += 1);
        }
        // Replies go out before the wait: the loop below only reads.
        self.flush().await?;
        let poll = front.dispatch.poll(topics.clone(), 1, wait);
        tokio::pin!(poll);
        let shutdown = self.shutdown.clone();
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        let out = loop {
            let room = self.buf.len() - self.start < READ_AHEAD;
            tokio::select! {
                r = &mut poll => break Ok(Polled::Jobs(r)),
                n = self.read_more(), if room => match n {
                    Ok(0) => break Ok(Polled::HalfClosed),
                    Ok(_) => continue,
                    Err(e) => break Err(e),
                },
                _ = &mut cancelled => break Ok(Polled::Shutdown),
            }
        };
        front.waiting.fetch_sub(1, Ordering::Relaxed);
        for t in &topics {
            front.tube(t, |t| t.waiting = t.waiting.saturating_sub(1));
        }
        out
    }

    /// Whether a job this connection holds is in its safety margin, else when the first
    /// margin starts. Jobs whose TTR ran out are no longer held.
    async fn deadline_soon(&mut self, now: UnixMillis) -> Result<Soon, StoreError> {
        self.reserved.retain(|_, h| h.until > now);
        let soon: Vec<JobId> = self
            .reserved
            .iter()
            .filter(|(_, h)| h.until.saturating_sub(now) <= SAFETY_MARGIN_MS)
            .map(|(id, _)| id.clone())
            .collect();
        for id in soon {
            // Touched or finished elsewhere (over HTTP) since: what the store says holds.
            match self.front.store.get(&id).await {
                Ok(job) if job.state == JobState::Reserved => {
                    let until = job.reserved_until.unwrap_or(0);
                    if until.saturating_sub(now) <= SAFETY_MARGIN_MS {
                        return Ok(Soon::Now);
                    }
                    if let Some(h) = self.reserved.get_mut(&id) {
                        h.until = until;
                    }
                }
                Ok(_) | Err(StoreError::NotFound) => {
                    self.reserved.remove(&id);
                }
                Err(e) => return Err(e),
            }
        }
        let first = self.reserved.values().map(|h| h.until).min();
        Ok(Soon::At(first.map(|u| u - SAFETY_MARGIN_MS)))
    }

    /// Whether this connection holds `id`: reserved here, its TTR not run out (after that the
    /// job may be another consumer's).
    fn holds(&mut self, id: &JobId, now: UnixMillis) -> bool {
        match self.reserved.get(id) {
            Some(h) if h.until > now => true,
            Some(_) => {
                self.reserved.remove(id);
                false
            }
            None => false,
        }
    }

    /// Every command but put and reserve: no input beyond the line.
    async fn command(&mut self, cmd: Command) -> Step {
        let front = self.front.clone();
        let now = front.clock.now();
        let reply = match cmd {
            Command::Use(t) => {
                front.tube(&self.used, |t| t.using = t.using.saturating_sub(1));
                front.tube(&t, |t| t.using += 1);
                self.used = t.clone();
                Reply::Using(t)
            }
            Command::Watch(t) => {
                if !self.watched.contains(&t) {
                    front.tube(&t, |t| t.watching += 1);
                    self.watched.push(t);
                }
                Reply::Number("WATCHING", self.watched.len() as u64)
            }
            Command::Ignore(t) => {
                if self.watched == [t.clone()] {
                    Reply::Word(proto::NOT_IGNORED)
                } else {
                    if let Some(i) = self.watched.iter().position(|w| *w == t) {
                        self.watched.remove(i);
                        front.tube(&t, |t| t.watching = t.watching.saturating_sub(1));
                    }
                    Reply::Number("WATCHING", self.watched.len() as u64)
                }
            }
            Command::ReserveJob(n) => self.reserve_job(n, now).await,
            Command::Delete(n) => self.delete(n).await,
            Command::Release { id, pri, delay_s } => self.release(id, pri, delay_s).await,
            Command::Bury { id, pri } => {
                let id = front.ids.id_of(id);
                if !self.holds(&id, now) {
                    return Step::Reply(Reply::Word(proto::NOT_FOUND));
                }
                self.reserved.remove(&id);
                match front.store.bury(&id, Some(pri), now).await {
                    Ok(_) => Reply::Word(proto::BURIED),
                    Err(e) => failed(e),
                }
            }
            Command::Touch(n) => {
                let id = front.ids.id_of(n);
                if !self.holds(&id, now) {
                    return Step::Reply(Reply::Word(proto::NOT_FOUND));
                }
                match front.store.touch(&id, now).await {
                    Ok(job) => {
                        if let Some(h) = self.reserved.get_mut(&id) {
                            h.until = job.reserved_until.unwrap_or(h.until);
                        }
                        Reply::Word(proto::TOUCHED)
                    }
                    Err(e) => {
                        self.reserved.remove(&id);
                        failed(e)
                    }
                }
            }
            Command::Peek(n) => match front.store.get(&front.ids.id_of(n)).await {
                Ok(job) => found(n, &job.spec.body),
                Err(e) => failed(e),
            },
            Command::PeekReady => self.peek(JobState::Ready, now).await,
            Command::PeekDelayed => self.peek(JobState::Delayed, now).await,
            Command::PeekBuried => self.peek(JobState::Dead, now).await,
            Command::Kick(bound) => self.kick(u64::from(bound), now).await,
            Command::KickJob(n) => {
                let id = front.ids.id_of(n);
                match front.store.get(&id).await {
                    Ok(job) if job.state == JobState::Dead => {
                        match front.store.kick(&id, now).await {
                            Ok(_) => Reply::Word(proto::KICKED),
                            Err(e) => failed(e),
                        }
                    }
                    Ok(job) if job.state == JobState::Delayed => {
                        match front.store.reschedule(&id, due_now(now), now).await {
                            Ok(_) => Reply::Word(proto::KICKED),
                            Err(e) => failed(e),
                        }
                    }
                    Ok(_) => Reply::Word(proto::NOT_FOUND),
                    Err(e) => failed(e),
                }
            }
            Command::StatsJob(n) => match front.store.get(&front.ids.id_of(n)).await {
                Ok(job) => {
                    let state = match job.state {
                        JobState::Dead => "buried",
                        s => s.as_str(),
                    };
                    let drawn = Ids::drawn_at(n, now);
                    let left_ms = match job.state {
                        JobState::Delayed => job.spec.run_at.saturating_sub(now),
                        JobState::Reserved => job.reserved_until.unwrap_or(now).saturating_sub(now),
                        _ => 0,
                    };
                    let delay = drawn.map_or(0, |d| job.spec.run_at.saturating_sub(d) / 1000);
                    Yaml::new()
                        .field("id", n)
                        .field("tube", &job.spec.topic)
                        .field("state", state)
                        .field("pri", job.spec.priority)
                        .field("age", drawn.map_or(0, |d| (now - d) / 1000))
                        .field("delay", delay)
                        .field("ttr", job.spec.ttr_ms.div_ceil(1000))
                        .field("time-left", left_ms / 1000)
                        .field("file", 0)
                        .field("reserves", job.attempts)
                        .field("timeouts", 0)
                        .field("releases", 0)
                        .field("buries", 0)
                        .field("kicks", 0)
                        .reply()
                }
                Err(e) => failed(e),
            },
            Command::StatsTube(t) => self.stats_tube(t).await,
            Command::Stats => self.stats().await,
            Command::ListTubes => match self.tube_names().await {
                Ok(names) => names
                    .into_iter()
                    .fold(Yaml::new(), |y, t| y.item(t))
                    .reply(),
                Err(e) => failed(e),
            },
            Command::ListTubeUsed => Reply::Using(self.used.clone()),
            Command::ListTubesWatched => self
                .watched
                .iter()
                .fold(Yaml::new(), |y, t| y.item(t))
                .reply(),
            Command::PauseTube(t, secs) => match self.tube_exists(&t).await {
                Ok(true) => match front.pause(&t, secs).await {
                    Ok(()) => Reply::Word(proto::PAUSED),
                    Err(e) => failed(e),
                },
                Ok(false) => Reply::Word(proto::NOT_FOUND),
                Err(e) => failed(e),
            },
            Command::Quit => return Step::Close,
            // Handled by `run`.
            Command::Put { .. } | Command::Reserve | Command::ReserveWithTimeout(_) => {
                Reply::Word(proto::INTERNAL_ERROR)
            }
        };
        Step::Reply(reply)
    }

    async fn reserve_job(&mut self, n: u64, now: UnixMillis) -> Reply {
        let front = self.front.clone();
        let id = front.ids.id_of(n);
        // A job delayq delivers itself (callback, publish) is no consumer's.
        match front.store.get(&id).await {
            Ok(job) if job.spec.is_pushed() || job.state == JobState::Reserved => {
                return Reply::Word(proto::NOT_FOUND);
            }
            Ok(_) => {}
            Err(e) => return failed(e),
        }
        match front.store.reserve_job(&id, now).await {
            Ok(job) => {
                let held = Held {
                    topic: job.spec.topic.clone(),
                    until: job.reserved_until.unwrap_or(now),
                };
                self.reserved.insert(id, held);
                found_as("RESERVED", n, &job.spec.body)
            }
            Err(e) => failed(e),
        }
    }

    /// beanstalkd deletes a job this connection reserved, or one not reserved at all.
    async fn delete(&mut self, n: u64) -> Reply {
        let front = self.front.clone();
        let id = front.ids.id_of(n);
        let now = front.clock.now();
        let held = if self.holds(&id, now) {
            self.reserved.remove(&id)
        } else {
            None
        };
        let (result, topic) = if let Some(held) = held {
            (front.store.finish(&id).await, held.topic)
        } else {
            match front.store.get(&id).await {
                Ok(job) if job.state == JobState::Reserved => {
                    return Reply::Word(proto::NOT_FOUND);
                }
                Ok(job) => (front.store.delete(&id).await, job.spec.topic),
                Err(e) => return failed(e),
            }
        };
        match result {
            Ok(_) => {
                front.ids.forget(&id);
                front.tube(&topic, |t| t.cmd_delete += 1);
                Reply::Word(proto::DELETED)
            }
            Err(e) => failed(e),
        }
    }

    async fn release(&mut self, n: u64, pri: u32, delay_s: u32) -> Reply {
        let front = self.front.clone();
        let id = front.ids.id_of(n);
        let at = front.clock.read();
        if !self.holds(&id, at.millis()) {
            return Reply::Word(proto::NOT_FOUND);
        }
        self.reserved.remove(&id);
        let delay_ms = u64::from(delay_s) * 1000;
        // As the /v1 API: a delay runs from the instant rounded up.
        let now = if delay_ms > 0 {
            at.millis_ceil()
        } else {
            at.millis()
        };
        let job = match front.store.release(&id, Some(delay_ms), now).await {
            Ok(job) => job,
            Err(e) => return failed(e),
        };
        if job.state == JobState::Dead {
            // Out of its attempts (a job pushed over HTTP with `max_attempts`).
            return Reply::Word(proto::BURIED);
        }
        if job.spec.priority != pri {
            let change = Reschedule {
                run_at: job.spec.run_at,
                body: None,
                priority: Some(pri),
            };
            // Taken meanwhile: it keeps its priority, as if the release came first.
            match front.store.reschedule(&id, change, at.millis()).await {
                Ok(_) | Err(StoreError::WrongState(_)) | Err(StoreError::NotFound) => {}
                Err(e) => return failed(e),
            }
        }
        Reply::Word(proto::RELEASED)
    }

    /// `peek-ready`, `peek-delayed`, `peek-buried`: the first job of the used tube in that
    /// state, in the order it leaves the state.
    async fn peek(&mut self, state: JobState, now: UnixMillis) -> Reply {
        let front = self.front.clone();
        match front.store.list(&self.used, state, None, 1).await {
            Ok(page) => match page.jobs.first() {
                Some(job) => found(front.ids.handle_of(&job.spec.id, now), &job.spec.body),
                None => Reply::Word(proto::NOT_FOUND),
            },
            Err(e) => failed(e),
        }
    }

    /// `kick`: the used tube's buried jobs if it has any, else its delayed ones.
    async fn kick(&mut self, bound: u64, now: UnixMillis) -> Reply {
        let front = self.front.clone();
        match front.store.kick_topic(&self.used, bound, now).await {
            Ok(0) => {}
            Ok(n) => return Reply::Number("KICKED", n),
            Err(e) => return failed(e),
        }
        let mut kicked = 0;
        let mut after = None;
        while kicked < bound {
            let limit = (bound - kicked).min(PAGE as u64) as usize;
            let page = match front
                .store
                .list(&self.used, JobState::Delayed, after.as_ref(), limit)
                .await
            {
                Ok(page) => page,
                Err(e) => return failed(e),
            };
            for job in &page.jobs {
                match front
                    .store
                    .reschedule(&job.spec.id, due_now(now), now)
                    .await
                {
                    Ok(_) => kicked += 1,
                    Err(StoreError::NotFound | StoreError::WrongState(_)) => {}
                    Err(e) => return failed(e),
                }
                if kicked >= bound {
                    break;
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Reply::Number("KICKED", kicked)
    }

    /// Tubes: the store's topics with pull jobs, and those some connection here names.
    async fn tube_names(&self) -> Result<Vec<Topic>, StoreError> {
        let stats = self.front.store.stats().await?;
        let mut names: Vec<Topic> = stats.topics.into_keys().collect();
        names.extend(self.front.tubes().keys().cloned());
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn tube_exists(&self, t: &Topic) -> Result<bool, StoreError> {
        if self.front.tubes().contains_key(t) {
            return Ok(true);
        }
        let stats = self.front.store.stats().await?;
        Ok(stats.topics.get(t).is_some_and(|c| c.total() > 0))
    }

    /// Ready jobs of `t` with a priority below 1024, counted up to [`URGENT_SCAN`].
    async fn urgent(&self, t: &Topic) -> Result<u64, StoreError> {
        let mut n = 0;
        let mut after = None;
        while n < URGENT_SCAN as u64 {
            let page = self
                .front
                .store
                .list(t, JobState::Ready, after.as_ref(), PAGE)
                .await?;
            for job in &page.jobs {
                if job.spec.priority >= URGENT_PRIORITY {
                    return Ok(n);
                }
                n += 1;
            }
            match page.next {
                Some(next) if !page.jobs.is_empty() => after = Some(next),
                _ => break,
            }
        }
        Ok(n)
    }

    async fn stats_tube(&self, t: Topic) -> Reply {
        let front = &self.front;
        let stats = match front.store.stats().await {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let counts = stats.topics.get(&t).copied();
        let local = front.tubes().get(&t).cloned();
        if counts.is_none_or(|c| c.total() == 0) && local.is_none() {
            return Reply::Word(proto::NOT_FOUND);
        }
        let counts = counts.unwrap_or_default();
        let urgent = if counts.ready > 0 {
            match self.urgent(&t).await {
                Ok(n) => n,
                Err(e) => return failed(e),
            }
        } else {
            0
        };
        let local = local.unwrap_or_default();
        let (pause, left) = local.pause.map_or((0, 0), |p| {
            let left = p.until.saturating_duration_since(Instant::now());
            (p.secs, left.as_secs())
        });
        Yaml::new()
            .field("name", &t)
            .field("current-jobs-urgent", urgent)
            .field("current-jobs-ready", counts.ready)
            .field("current-jobs-reserved", counts.reserved)
            .field("current-jobs-delayed", counts.delayed)
            .field("current-jobs-buried", counts.dead)
            .field("total-jobs", local.total_jobs)
            .field("current-using", local.using)
            .field("current-watching", local.watching)
            .field("current-waiting", local.waiting)
            .field("cmd-delete", local.cmd_delete)
            .field("cmd-pause-tube", local.cmd_pause)
            .field("pause", pause)
            .field("pause-time-left", left)
            .reply()
    }

    async fn stats(&self) -> Reply {
        let front = &self.front;
        let stats = match front.store.stats().await {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let mut sum = crate::store::TopicCounts::default();
        let mut urgent = 0;
        for (t, c) in &stats.topics {
            sum.ready += c.ready;
            sum.reserved += c.reserved;
            sum.delayed += c.delayed;
            sum.dead += c.dead;
            if c.ready > 0 {
                match self.urgent(t).await {
                    Ok(n) => urgent += n,
                    Err(e) => return failed(e),
                }
            }
        }
        let tubes = {
            let mut names: Vec<&Topic> = stats.topics.keys().collect();
            let local = front.tubes();
            let local: Vec<Topic> = local.keys().cloned().collect();
            names.extend(local.iter());
            names.sort();
            names.dedup();
            names.len()
        };
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut y = Yaml::new()
            .field("current-jobs-urgent", urgent)
            .field("current-jobs-ready", sum.ready)
            .field("current-jobs-reserved", sum.reserved)
            .field("current-jobs-delayed", sum.delayed)
            .field("current-jobs-buried", sum.dead);
        for (name, n) in proto::COMMAND_NAMES.iter().zip(&front.commands) {
            if *name != "quit" {
                y = y.field(&format!("cmd-{name}"), load(n));
            }
        }
        let (utime, stime) = cpu_times();
        y.field("job-timeouts", front.metrics.expired_total())
            .field("total-jobs", front.metrics.pushed_total())
            .field("max-job-size", front.options.max_job_bytes)
            .field("current-tubes", tubes)
            .field("current-connections", load(&front.connections))
            .field("current-producers", load(&front.producers))
            .field("current-workers", load(&front.workers))
            .field("current-waiting", load(&front.waiting))
            .field("total-connections", load(&front.total_connections))
            .field("pid", std::process::id())
            .quoted("version", env!("CARGO_PKG_VERSION"))
            .field("rusage-utime", utime)
            .field("rusage-stime", stime)
            .field("uptime", front.started.elapsed().as_secs())
            .field("binlog-oldest-index", 0)
            .field("binlog-current-index", 0)
            .field("binlog-records-migrated", 0)
            .field("binlog-records-written", 0)
            .field("binlog-max-size", 0)
            .field("draining", front.is_draining())
            .field("id", &front.instance)
            .field("hostname", hostname())
            .field("os", std::env::consts::OS)
            .field("platform", std::env::consts::ARCH)
            .reply()
    }

    /// Hands back the jobs this connection still holds (as beanstalkd does when a client
    /// leaves) and forgets what it named.
    async fn close(&mut self) {
        let _ = self.flush().await;
        let front = self.front.clone();
        for (id, held) in std::mem::take(&mut self.reserved) {
            let now = front.clock.now();
            // Only if still ours: its TTR may have run out and another consumer hold it.
            match front.store.get(&id).await {
                Ok(job)
                    if job.state == JobState::Reserved
                        && job.reserved_until == Some(held.until) =>
                {
                    if let Err(e) = front.store.release(&id, Some(0), now).await {
                        tracing::debug!(error = %e, "beanstalkd: job not handed back");
                    }
                }
                _ => {}
            }
        }
        front.tube(&self.used, |t| t.using = t.using.saturating_sub(1));
        for t in std::mem::take(&mut self.watched) {
            front.tube(&t, |t| t.watching = t.watching.saturating_sub(1));
        }
        front.connections.fetch_sub(1, Ordering::Relaxed);
        if self.producer {
            front.producers.fetch_sub(1, Ordering::Relaxed);
        }
        if self.worker {
            front.workers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

enum Soon {
    /// A held job is in its safety margin.
    Now,
    /// When the first margin starts, if any job is held.
    At(Option<UnixMillis>),
}

enum Polled {
    Jobs(Result<Vec<crate::job::Job>, DispatchError>),
    HalfClosed,
    Shutdown,
}

fn due_now(now: UnixMillis) -> Reschedule {
    Reschedule {
        run_at: now,
        body: None,
        priority: None,
    }
}

fn found(n: u64, body: &str) -> Reply {
    found_as("FOUND", n, body)
}

fn found_as(word: &'static str, n: u64, body: &str) -> Reply {
    Reply::Job {
        word,
        id: n,
        body: ids::body_from_store(body).into_owned(),
    }
}

/// The reply to a store error: `NOT_FOUND` for a job that is not there or not in a state the
/// command applies to, else `INTERNAL_ERROR` (logged).
fn failed(e: StoreError) -> Reply {
    match e {
        StoreError::NotFound | StoreError::WrongState(_) => Reply::Word(proto::NOT_FOUND),
        e => {
            tracing::error!(error = %e, "beanstalkd: store call failed");
            Reply::Word(proto::INTERNAL_ERROR)
        }
    }
}

/// This process's user and system CPU time, `seconds.microseconds` (from /proc; 0 elsewhere).
fn cpu_times() -> (String, String) {
    let fmt = |ticks: u64| {
        // Linux reports in clock ticks of 1/100 s (USER_HZ).
        format!("{}.{:06}", ticks / 100, (ticks % 100) * 10_000)
    };
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (fmt(tick(11)), fmt(tick(12)))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
