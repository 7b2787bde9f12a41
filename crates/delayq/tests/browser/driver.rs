//! Headless Chromium over WebDriver: a private `chromedriver` on a free loopback port (its own
//! process group, killed with its browser when dropped), one fantoccini session, and waiting
//! helpers that poll a condition in the page (never a fixed sleep as an assertion).

use crate::support::process::free_port;
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a condition in the page may take (slow CI machines, cold browser).
pub const PATIENCE: Duration = Duration::from_secs(30);

const INSTALL: &str =
    "chromium and chromedriver are needed: apt-get install chromium chromium-driver";

/// `name` on the PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a fresh profile.
    pub async fn start() -> Browser {
        Browser::start_with(&[]).await
    }

    /// As [`Browser::start`], with more Chromium switches (e.g. `--host-resolver-rules=...`).
    pub async fn start_with(switches: &[String]) -> Browser {
        let (Some(chromium), Some(chromedriver)) = (on_path("chromium"), on_path("chromedriver"))
        else {
            panic!("{INSTALL}");
        };
        let port = free_port();
        let driver = {
            use std::os::unix::process::CommandExt;
            Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // Its own process group, so Drop ends chromedriver and the browser together.
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}; {INSTALL}", chromedriver.display()))
        };
        let profile = tempfile::tempdir().unwrap();
        let browser = Browser {
            client: connect(port, &chromium, profile.path(), switches).await,
            driver,
            _profile: profile,
        };
        browser.client.set_window_size(1280, 860).await.unwrap();
        browser
    }

    /// Opens `url` and waits for the page's script to have run.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
        self.wait("the page to load", || async {
            self.eval("return document.readyState === 'complete'", vec![])
                .await
                .as_bool()
                .unwrap_or(false)
                .then_some(())
        })
        .await;
    }

    /// Runs `script` in the page (a function body; `arguments[i]` are `args`).
    pub async fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap()
    }

    /// The text of the first element matching `css`, if any.
    pub async fn text(&self, css: &str) -> Option<String> {
        self.eval(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null",
            vec![json!(css)],
        )
        .await
        .as_str()
        .map(str::to_string)
    }

    /// Whether an element matching `css` exists and is displayed (not in a hidden subtree).
    pub async fn visible(&self, css: &str) -> bool {
        self.eval(
            "const e = document.querySelector(arguments[0]); \
             return !!e && e.getClientRects().length > 0",
            vec![json!(css)],
        )
        .await
        .as_bool()
        .unwrap_or(false)
    }

    /// Polls `check` until it returns `Some`, for at most [`PATIENCE`]; panics naming `what`.
    pub async fn wait<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if start.elapsed() > PATIENCE {
                let shown = self.eval("return document.body.innerText", vec![]).await;
                panic!(
                    "waited {PATIENCE:?} for {what}; the page shows:\n{}",
                    shown.as_str().unwrap_or("?")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the element `css` has the text `want`.
    pub async fn wait_text(&self, css: &str, want: &str) {
        self.wait(&format!("{css} to read {want:?}"), || async {
            (self.text(css).await.as_deref() == Some(want)).then_some(())
        })
        .await
    }

    /// Waits for `css` to be displayed, then clicks it. An element the page re-rendered between
    /// finding and clicking it (stale) is found again.
    pub async fn click(&self, css: &str) {
        self.wait(&format!("{css} to be shown and clicked"), || async {
            if !self.visible(css).await {
                return None;
            }
            let e = not_stale(css, self.client.find(Locator::Css(css)).await)?;
            not_stale(css, e.click().await)
        })
        .await
    }

    /// Waits for the input `css` to be displayed, then replaces its text with `text`. An
    /// element the page re-rendered meanwhile (stale) is found again and filled again.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.wait(&format!("{css} to be shown and filled"), || async {
            if !self.visible(css).await {
                return None;
            }
            let e = not_stale(css, self.client.find(Locator::Css(css)).await)?;
            not_stale(css, e.clear().await)?;
            not_stale(css, e.send_keys(text).await)
        })
        .await
    }

    /// Clicks the confirmation dialog's "Confirm" button once it is open.
    pub async fn confirm(&self) {
        self.wait("the confirmation dialog", || async {
            self.eval("return document.getElementById('confirm').open", vec![])
                .await
                .as_bool()
                .unwrap_or(false)
                .then_some(())
        })
        .await;
        self.click("#confirm-ok").await;
    }

    /// With `DELAYQ_SCREENSHOTS=<dir>` set (relative to the workspace root), saves a PNG of the
    /// window as `<dir>/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("DELAYQ_SCREENSHOTS") else {
            return;
        };
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the session (the browser quits).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and any browser it started.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.driver.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.wait();
    }
}

/// A session on the chromedriver at `port`, once it answers.
async fn connect(port: u16, chromium: &Path, profile: &Path, switches: &[String]) -> Client {
    let mut args = vec![
        "--headless=new".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--no-first-run".into(),
        "--disable-crash-reporter".into(),
        "--disable-breakpad".into(),
        "--hide-scrollbars".into(),
        "--force-device-scale-factor=1".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend_from_slice(switches);
    let mut caps = Capabilities::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": chromium, "args": args}),
    );
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    loop {
        match ClientBuilder::new(HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => return c,
            Err(e) if start.elapsed() > PATIENCE => {
                panic!("no WebDriver session from chromedriver on {url}: {e}; {INSTALL}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// `Some` of a WebDriver command's result, `None` when its element went stale (the page
/// re-rendered it: find it again); any other error panics, naming `css`.
fn not_stale<T>(css: &str, r: Result<T, fantoccini::error::CmdError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if e.is_stale_element_reference() => None,
        Err(e) => panic!("{css}: {e:?}"),
    }
}
