//! docs/beanstalkd.md's "Try it", as written: its `sh` block is the server's command (run here
//! with a free port in place of 11300), its `python` block runs with greenstalk against it.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_try_it_of_docs_beanstalkd_md_works_as_written() {
    let python = support::python::with("greenstalk");
    let text = std::fs::read_to_string(workspace().join("docs/beanstalkd.md")).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Try it"))
        .expect("docs/beanstalkd.md has a Try it section");
    let block = |lang: &str| {
        let start = format!("```{lang}\n");
        let from = section
            .find(&start)
            .unwrap_or_else(|| panic!("no {lang} block"))
            + start.len();
        let len = section[from..].find("```").expect("block end");
        section[from..from + len].to_string()
    };
    let run = block("sh");
    let args: Vec<&str> = run.split_whitespace().collect();
    assert_eq!(&args[..2], ["delayq", "serve"], "{run}");
    assert!(run.contains("127.0.0.1:11300"), "{run}");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args: Vec<&str> = args[2..]
        .iter()
        .map(|a| {
            if *a == "127.0.0.1:11300" {
                listen.as_str()
            } else {
                a
            }
        })
        .collect();
    let _delayq = DelayqProcess::start(&args).await;
    let script = block("python").replace("11300", &port.to_string());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("try_it.py");
    std::fs::write(&path, script).unwrap();
    let out = run_script(&python, &[path.display().to_string()], &[]).await;
    assert!(out.contains("put, reserved and deleted job"), "{out}");
}
