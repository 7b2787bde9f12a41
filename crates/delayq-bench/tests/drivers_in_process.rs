//! The bench binary's /v1 and compat drivers end to end: delayq's own router and dispatcher over a
//! `MemoryStore`, served on a loopback port inside this test, driven by the real `delayq-bench`
//! binary. Small runs (hundreds of jobs) that check the accounting, not the speed: nothing lost,
//! nothing twice, nothing early, and cleanup removes every pending job. `delayq serve` itself is
//! exercised by `bench/compare.sh`, not here.

use delayq::api;
use delayq::clock::SystemClock;
use delayq::config::Config;
use delayq::delivery::allow::AllowList;
use delayq::server::App;
use delayq::store::memory::MemoryStore;
use serde_json::Value;
use std::sync::Arc;

async fn serve_in_process() -> String {
    let config = Config {
        // The callback workload's receiver is on loopback.
        callback_allow: AllowList::parse(&["127.0.0.1".to_string()]).unwrap(),
        ..Config::default()
    };
    let app = App::new(Arc::new(MemoryStore::new()), Arc::new(SystemClock), config);
    // The timer that promotes due jobs and the callbacks' deliverer; they live as long as the
    // test's runtime.
    let stop = tokio_util::sync::CancellationToken::new();
    app.state.dispatch.start(stop.clone());
    app.callbacks.start(stop);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let service =
        axum::ServiceExt::<axum::extract::Request>::into_make_service(api::router(app.state));
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

async fn bench(args: &[&str]) -> Value {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_delayq-bench"))
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "delayq-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn metric(r: &Value, name: &str) -> f64 {
    r["metrics"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no metric {name} in {r}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_over_v1_batches_loses_nothing_and_delivers_once() {
    let addr = serve_in_process().await;
    let r = bench(&[
        "w1",
        "--api",
        "v1",
        "--addr",
        &addr,
        "--jobs",
        "400",
        "--max-delay-s",
        "1",
        "--producers",
        "2",
        "--consumers",
        "2",
        "--batch",
        "10",
        "--drain-timeout-s",
        "5",
        "--json",
    ])
    .await;
    assert_eq!(r["workload"], "w1");
    assert_eq!(r["api"], "v1");
    assert_eq!(metric(&r, "acked"), 400.0, "{r}");
    assert_eq!(metric(&r, "delivered"), 400.0, "{r}");
    assert_eq!(metric(&r, "lost"), 0.0, "{r}");
    assert_eq!(metric(&r, "duplicates"), 0.0, "{r}");
    assert_eq!(metric(&r, "early"), 0.0, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_over_single_job_requests_loses_nothing() {
    let addr = serve_in_process().await;
    let r = bench(&[
        "w1",
        "--api",
        "v1",
        "--addr",
        &addr,
        "--jobs",
        "100",
        "--max-delay-s",
        "0",
        "--producers",
        "2",
        "--consumers",
        "2",
        "--drain-timeout-s",
        "5",
        "--json",
    ])
    .await;
    assert_eq!(metric(&r, "lost"), 0.0, "{r}");
    assert_eq!(metric(&r, "duplicates"), 0.0, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_run_pushes_then_deletes_every_pending_job() {
    let addr = serve_in_process().await;
    let r = bench(&[
        "w2",
        "--api",
        "v1",
        "--addr",
        &addr,
        "--pending",
        "500",
        "--producers",
        "2",
        "--batch",
        "50",
        "--json",
    ])
    .await;
    assert_eq!(metric(&r, "pending"), 500.0, "{r}");
    assert_eq!(metric(&r, "deleted"), 500.0, "{r}");
    assert_eq!(metric(&r, "cleanup_errors"), 0.0, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_over_the_compat_api_loses_nothing_and_delivers_once() {
    let addr = serve_in_process().await;
    let r = bench(&[
        "w1",
        "--api",
        "compat",
        "--addr",
        &addr,
        "--jobs",
        "200",
        "--max-delay-s",
        "1",
        "--producers",
        "2",
        "--consumers",
        "2",
        "--drain-timeout-s",
        "5",
        "--json",
    ])
    .await;
    assert_eq!(r["api"], "compat");
    assert_eq!(metric(&r, "delivered"), 200.0, "{r}");
    assert_eq!(metric(&r, "lost"), 0.0, "{r}");
    assert_eq!(metric(&r, "duplicates"), 0.0, "{r}");
    assert_eq!(metric(&r, "early"), 0.0, "{r}");
    // How busy the machine was over the run, whatever else runs on it.
    for share in ["machine_idle_pct", "machine_steal_pct"] {
        assert!((0.0..=100.0).contains(&metric(&r, share)), "{share}: {r}");
    }
    assert!(metric(&r, "bench_cpu_pct") >= 0.0, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_of_every_shape_reach_the_receiver_once_and_never_early() {
    let addr = serve_in_process().await;
    for shape in [
        &["--shape", "burst", "--jobs", "300", "--lead-s", "2"][..],
        &[
            "--shape",
            "lifecycle",
            "--jobs",
            "300",
            "--max-delay-s",
            "1",
        ],
        &[
            "--shape",
            "steady",
            "--rate",
            "200",
            "--duration-s",
            "1",
            "--fire-delay-s",
            "1",
        ],
    ] {
        let mut args = vec!["callback", "--api", "v1", "--addr", &addr, "--batch", "10"];
        args.extend_from_slice(shape);
        args.extend_from_slice(&["--producers", "2", "--drain-timeout-s", "5", "--json"]);
        let r = bench(&args).await;
        assert_eq!(r["workload"], format!("callback-{}", shape[1]), "{r}");
        for (m, want) in [
            ("acked", if shape[1] == "steady" { 200.0 } else { 300.0 }),
            ("lost", 0.0),
            ("duplicates", 0.0),
            ("early", 0.0),
            ("unexpected", 0.0),
            ("retried_calls", 0.0),
        ] {
            assert_eq!(metric(&r, m), want, "{shape:?} {m}: {r}");
        }
        assert_eq!(metric(&r, "delivered"), metric(&r, "acked"), "{r}");
        if shape[1] != "steady" {
            assert!(metric(&r, "callbacks_per_s") > 0.0, "{r}");
        }
    }
}
