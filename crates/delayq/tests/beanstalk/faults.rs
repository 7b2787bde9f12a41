//! kill -9 under puts on the embedded store (an acknowledged put is fsynced: none lost), and
//! three instances on one Redis (each job reserved by one consumer at a time).

use super::*;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Connections putting at once.
const PUTTERS: usize = 8;
/// How long they put before the kill.
const PUT_FOR: Duration = Duration::from_secs(3);

/// The puts answered `INSERTED`: id and body.
type Acked = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_8_connections_of_puts_loses_no_acknowledged_put() {
    let mut server = Server::start(Backend::Embedded).await;
    let port = server.beanstalk_port;
    let acked: Acked = Arc::default();
    let mut putters = Vec::new();
    for p in 0..PUTTERS {
        let acked = acked.clone();
        putters.push(tokio::spawn(async move {
            let mut b = Bean::connect(port).await;
            b.send(b"use crash\r\n").await;
            if b.line().await != "USING crash" {
                return;
            }
            for i in 0u64.. {
                let body = format!("putter {p} job {i}").into_bytes();
                let mut msg = format!("put 0 0 60 {}\r\n", body.len()).into_bytes();
                msg.extend_from_slice(&body);
                msg.extend_from_slice(b"\r\n");
                if b.w.write_all(&msg).await.is_err() {
                    return;
                }
                let mut line = String::new();
                match b.r.read_line(&mut line).await {
                    Ok(n) if n > 0 => {}
                    _ => return,
                }
                match line.trim_end().strip_prefix("INSERTED ") {
                    Some(id) => acked.lock().unwrap().push((id.parse().unwrap(), body)),
                    None => panic!("put answered {line:?}"),
                }
            }
        }));
    }
    tokio::time::sleep(PUT_FOR).await;
    server.delayq.kill();
    for p in putters {
        p.await.unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert!(acked.len() > 100, "only {} puts acknowledged", acked.len());
    server.delayq.restart().await;
    let mut b = server.connect().await;
    for (id, body) in &acked {
        let (got, got_body) = b.job(&format!("peek {id}"), "FOUND").await;
        assert_eq!((got, &got_body), (*id, body), "acknowledged put {id}");
    }
    let distinct: HashSet<u64> = acked.iter().map(|(id, _)| *id).collect();
    assert_eq!(distinct.len(), acked.len(), "every put got its own id");
    println!(
        "kill -9 after {PUT_FOR:?} of {PUTTERS} connections of puts: {} acknowledged, all there \
         after the restart",
        acked.len()
    );
}

/// Jobs in the three-instance test.
const JOBS: usize = 300;
/// Consumers per instance.
const CONSUMERS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_redis_reserve_each_job_once_at_a_time() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let delayq = DelayqProcess::start(&["--redis", &url, "--beanstalk-listen", &listen]).await;
        servers.push((delayq, port, dir));
    }
    // Puts spread over the instances; ids unique across them.
    let mut put_ids = HashSet::new();
    for i in 0..JOBS {
        let port = servers[i % 3].1;
        let mut b = Bean::connect(port).await;
        assert_eq!(b.cmd("use shared").await, "USING shared");
        let id = b.put(0, 0, 120, format!("job {i}").as_bytes()).await;
        assert!(put_ids.insert(id), "id {id} given twice");
    }
    // Consumers on every instance reserve with a TTR far beyond the test: a job handed out
    // twice would be reserved by two consumers at once.
    let reserved: Arc<Mutex<HashMap<u64, Vec<String>>>> = Arc::default();
    let started = Instant::now();
    let mut consumers = Vec::new();
    for (s, (_, port, _)) in servers.iter().enumerate() {
        for c in 0..CONSUMERS {
            let (port, reserved) = (*port, reserved.clone());
            consumers.push(tokio::spawn(async move {
                let mut b = Bean::connect(port).await;
                assert_eq!(b.cmd("watch shared").await, "WATCHING 2");
                loop {
                    let reply = b.cmd("reserve-with-timeout 1").await;
                    if reply == "TIMED_OUT" {
                        // Kept open: closing it would hand back the jobs it holds, as
                        // beanstalkd does, for another consumer to take.
                        return b;
                    }
                    let parts: Vec<&str> = reply.split(' ').collect();
                    assert_eq!(parts[0], "RESERVED", "{reply}");
                    let id: u64 = parts[1].parse().unwrap();
                    b.body(parts[2].parse().unwrap()).await;
                    reserved
                        .lock()
                        .unwrap()
                        .entry(id)
                        .or_default()
                        .push(format!("instance {s} consumer {c}"));
                }
            }));
        }
    }
    let mut connections = Vec::new();
    for c in consumers {
        connections.push(c.await.unwrap());
    }
    let reserved = reserved.lock().unwrap();
    for (id, by) in reserved.iter() {
        assert_eq!(by.len(), 1, "job {id} reserved by {by:?} within its TTR");
    }
    let got: HashSet<u64> = reserved.keys().copied().collect();
    assert_eq!(got, put_ids, "every job reserved");
    println!(
        "3 instances on one Redis, {} consumers: {JOBS} jobs each reserved once in {:?}",
        3 * CONSUMERS,
        started.elapsed()
    );
    drop(connections);
}
