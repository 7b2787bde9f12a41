//! Real clients over the beanstalkd port: greenstalk (Python) and fivebeans (Node), on the
//! embedded store and on Redis, and greenstalk over a Unix socket.

use super::*;

async fn greenstalk(backend: Backend) {
    let python = support::python::with("greenstalk");
    let server = Server::start(backend).await;
    let args = vec![
        here()
            .join("greenstalk_conformance.py")
            .display()
            .to_string(),
        "--port".into(),
        server.beanstalk_port.to_string(),
        "--pid".into(),
        server.pid().to_string(),
        "--max-job-size".into(),
        MAX_JOB_SIZE.to_string(),
    ];
    let out = run_script(&python, &args, &[]).await;
    println!("{backend:?}:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greenstalk_behaves_as_against_beanstalkd_on_the_embedded_store() {
    greenstalk(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greenstalk_behaves_as_against_beanstalkd_on_redis() {
    greenstalk(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greenstalk_over_a_unix_socket() {
    let python = support::python::with("greenstalk");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("beanstalk.sock");
    let listen = format!("unix:{}", sock.display());
    let delayq = DelayqProcess::start(&["--memory", "--beanstalk-listen", &listen]).await;
    let args = vec![
        here()
            .join("greenstalk_conformance.py")
            .display()
            .to_string(),
        "--unix".into(),
        sock.display().to_string(),
        "--pid".into(),
        delayq.pid().to_string(),
        "--max-job-size".into(),
        (1 << 20).to_string(),
        "--only".into(),
        "test_basic_usage,test_ttr,test_binary_jobs,test_max_job_size".into(),
    ];
    run_script(&python, &args, &[]).await;
}

async fn fivebeans(backend: Backend) {
    let modules = support::node::with("fivebeans");
    let server = Server::start(backend).await;
    let args = vec![
        here().join("fivebeans_client.js").display().to_string(),
        server.beanstalk_port.to_string(),
    ];
    let out = run_script(
        Path::new("node"),
        &args,
        &[("NODE_PATH", modules.join("node_modules"))],
    )
    .await;
    assert!(out.contains("ok"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fivebeans_produces_and_works_on_the_embedded_store() {
    fivebeans(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fivebeans_produces_and_works_on_redis() {
    fivebeans(Backend::Redis).await;
}
