//! A small beanstalkd client for the bench: `use`/`put`, `watch`/`reserve-with-timeout`,
//! `delete`, over one TCP connection. Batches are pipelined (all commands written, then all
//! replies read). Delays are whole seconds, as the protocol has them. The reply parser is pure;
//! it knows only the replies these commands can produce.

use super::{Delivered, NewJob, due_secs, now_ms};
use anyhow::{Context, Result, bail};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Priority given to every job (beanstalkd's conventional default).
const PRIORITY: u32 = 1024;

/// How long a reply may take beyond any wait the command asked for. The client does not rely
/// on the server to bound a read: one `reserve-with-timeout 1` went unanswered for minutes in a
/// comparison run.
const REPLY_SLACK: Duration = Duration::from_secs(10);

/// A reply line from beanstalkd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Inserted(u64),
    /// Inserted but buried (server out of memory for the ready heap).
    Buried(u64),
    Using(String),
    Watching(u32),
    /// A job follows: its id and body length (the body and `\r\n` come next).
    Reserved {
        id: u64,
        bytes: usize,
    },
    TimedOut,
    DeadlineSoon,
    Deleted,
    NotFound,
    /// Any error reply (`OUT_OF_MEMORY`, `BAD_FORMAT`, `JOB_TOO_BIG`, `DRAINING`, ...).
    Error(String),
}

/// Parses one reply line (without or with its trailing `\r\n`).
pub fn parse_reply(line: &str) -> Result<Reply> {
    let line = line.trim_end_matches(['\r', '\n']);
    let mut w = line.split(' ');
    let word = w.next().unwrap_or("");
    let num = |x: Option<&str>| -> Result<u64> {
        x.context("missing number")?
            .parse::<u64>()
            .with_context(|| format!("bad number in {line:?}"))
    };
    Ok(match word {
        "INSERTED" => Reply::Inserted(num(w.next())?),
        "BURIED" => Reply::Buried(num(w.next())?),
        "USING" => Reply::Using(w.next().context("USING without tube")?.to_string()),
        "WATCHING" => Reply::Watching(num(w.next())? as u32),
        "RESERVED" => Reply::Reserved {
            id: num(w.next())?,
            bytes: num(w.next())? as usize,
        },
        "TIMED_OUT" => Reply::TimedOut,
        "DEADLINE_SOON" => Reply::DeadlineSoon,
        "DELETED" => Reply::Deleted,
        "NOT_FOUND" => Reply::NotFound,
        "" => bail!("empty reply"),
        _ => Reply::Error(line.to_string()),
    })
}

/// The `put` command for a body: `put <pri> <delay> <ttr> <bytes>\r\n<body>\r\n`.
pub fn put_command(delay_s: u64, ttr_s: u64, body: &str) -> String {
    format!(
        "put {PRIORITY} {delay_s} {ttr_s} {}\r\n{body}\r\n",
        body.len()
    )
}

/// One connection, using and watching the run's tube.
pub struct Beanstalkd {
    rd: BufReader<OwnedReadHalf>,
    wr: BufWriter<OwnedWriteHalf>,
    ttr_s: u64,
    line: String,
    /// Server ids of the last push, "" for jobs not inserted.
    last_ids: Vec<String>,
}

impl Beanstalkd {
    pub async fn connect(addr: &str, tube: &str, ttr_s: u64) -> Result<Beanstalkd> {
        let s = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to beanstalkd at {addr}"))?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        let mut c = Beanstalkd {
            rd: BufReader::new(r),
            wr: BufWriter::new(w),
            ttr_s,
            line: String::new(),
            last_ids: Vec::new(),
        };
        c.wr.write_all(format!("use {tube}\r\nwatch {tube}\r\nignore default\r\n").as_bytes())
            .await?;
        c.wr.flush().await?;
        match c.reply().await? {
            Reply::Using(_) => {}
            r => bail!("use {tube}: {r:?}"),
        }
        for _ in 0..2 {
            match c.reply().await? {
                Reply::Watching(_) => {}
                r => bail!("watch {tube}: {r:?}"),
            }
        }
        Ok(c)
    }

    async fn reply(&mut self) -> Result<Reply> {
        self.reply_within(REPLY_SLACK).await
    }

    /// Reads one reply line, failing after `limit` (the connection is then out of step: drop it).
    async fn reply_within(&mut self, limit: Duration) -> Result<Reply> {
        self.line.clear();
        match tokio::time::timeout(limit, self.rd.read_line(&mut self.line)).await {
            Err(_) => bail!("no reply from beanstalkd within {limit:?}"),
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(0)) => bail!("beanstalkd closed the connection"),
            Ok(Ok(_)) => {}
        }
        parse_reply(&self.line)
    }

    /// Pipelined `put`s; returns which were inserted (a buried job counts as not).
    pub async fn push(&mut self, jobs: &[NewJob]) -> Result<Vec<bool>> {
        let now = now_ms();
        for j in jobs {
            let cmd = put_command(due_secs(j.due, now), self.ttr_s, &j.body);
            self.wr.write_all(cmd.as_bytes()).await?;
        }
        self.wr.flush().await?;
        self.last_ids.clear();
        let mut acked = Vec::with_capacity(jobs.len());
        let mut err = None;
        for _ in jobs {
            match self.reply().await? {
                Reply::Inserted(id) => {
                    acked.push(true);
                    self.last_ids.push(id.to_string());
                }
                r => {
                    acked.push(false);
                    self.last_ids.push(String::new());
                    err.get_or_insert(r);
                }
            }
        }
        if let Some(r) = err
            && !acked.iter().any(|a| *a)
        {
            bail!("put: {r:?}");
        }
        Ok(acked)
    }

    pub fn last_ids(&self) -> &[String] {
        &self.last_ids
    }

    /// `reserve-with-timeout` (whole seconds, at least 1 so an idle consumer does not spin).
    pub async fn reserve(&mut self, timeout_ms: u64) -> Result<Vec<Delivered>> {
        let secs = timeout_ms.div_ceil(1000).max(1);
        self.wr
            .write_all(format!("reserve-with-timeout {secs}\r\n").as_bytes())
            .await?;
        self.wr.flush().await?;
        match self
            .reply_within(Duration::from_secs(secs) + REPLY_SLACK)
            .await?
        {
            Reply::Reserved { id, bytes } => {
                let mut buf = vec![0u8; bytes + 2];
                self.rd.read_exact(&mut buf).await?;
                buf.truncate(bytes);
                Ok(vec![Delivered {
                    handle: id.to_string(),
                    body: String::from_utf8(buf).context("job body is not UTF-8")?,
                }])
            }
            Reply::TimedOut | Reply::DeadlineSoon => Ok(vec![]),
            r => bail!("reserve: {r:?}"),
        }
    }

    /// Pipelined `delete`s; fails unless every one was deleted.
    pub async fn delete(&mut self, ids: &[String]) -> Result<()> {
        let n = self.delete_count(ids).await?;
        if n != ids.len() as u64 {
            bail!(
                "delete: {} of {} not found",
                ids.len() as u64 - n,
                ids.len()
            );
        }
        Ok(())
    }

    /// Pipelined `delete`s; returns how many were deleted.
    pub async fn delete_count(&mut self, ids: &[String]) -> Result<u64> {
        for id in ids {
            self.wr
                .write_all(format!("delete {id}\r\n").as_bytes())
                .await?;
        }
        self.wr.flush().await?;
        let mut n = 0;
        for _ in ids {
            match self.reply().await? {
                Reply::Deleted => n += 1,
                Reply::NotFound => {}
                r => bail!("delete: {r:?}"),
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_parsed() {
        assert_eq!(parse_reply("INSERTED 42\r\n").unwrap(), Reply::Inserted(42));
        assert_eq!(parse_reply("BURIED 7\r\n").unwrap(), Reply::Buried(7));
        assert_eq!(
            parse_reply("USING bench-x\r\n").unwrap(),
            Reply::Using("bench-x".into())
        );
        assert_eq!(parse_reply("WATCHING 2\r\n").unwrap(), Reply::Watching(2));
        assert_eq!(
            parse_reply("RESERVED 9 30\r\n").unwrap(),
            Reply::Reserved { id: 9, bytes: 30 }
        );
        assert_eq!(parse_reply("TIMED_OUT\r\n").unwrap(), Reply::TimedOut);
        assert_eq!(
            parse_reply("DEADLINE_SOON\r\n").unwrap(),
            Reply::DeadlineSoon
        );
        assert_eq!(parse_reply("DELETED\r\n").unwrap(), Reply::Deleted);
        assert_eq!(parse_reply("NOT_FOUND").unwrap(), Reply::NotFound);
    }

    #[test]
    fn error_replies_keep_their_text() {
        assert_eq!(
            parse_reply("JOB_TOO_BIG\r\n").unwrap(),
            Reply::Error("JOB_TOO_BIG".into())
        );
        assert_eq!(
            parse_reply("OUT_OF_MEMORY\r\n").unwrap(),
            Reply::Error("OUT_OF_MEMORY".into())
        );
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert!(parse_reply("").is_err());
        assert!(parse_reply("INSERTED\r\n").is_err());
        assert!(parse_reply("RESERVED x 3\r\n").is_err());
    }

    #[test]
    fn put_command_carries_the_body_length() {
        assert_eq!(
            put_command(3, 3600, "12:0:xx"),
            "put 1024 3 3600 7\r\n12:0:xx\r\n"
        );
    }
}
