//! Redis credentials and TLS, against real `redis-server` processes: a password
//! (`redis://:PASSWORD@host`) and an ACL user (`redis://USER:PASSWORD@host`) open the store when
//! right and give a clear `Unavailable` error, without the password, when wrong or missing, also
//! through `server::open_store` (what `delayq serve` calls). `rediss://` URLs reach a TLS
//! handshake: against a server whose certificate is self-signed, the connection is refused for
//! that reason (this build trusts the public web roots only, see README "Security").

use crate::support;
use support::free_port;

use support::process::DelayqProcess;

use delayq::config::Config;
use delayq::job::{JobId, JobSpec, Topic};
use delayq::store::redis::{RedisOptions, RedisStore, RedisTarget};
use delayq::store::{PushMode, Store, StoreError};
use std::path::Path;
use std::process::Command;
use support::redis_server::RedisServer;

const PASSWORD: &str = "pa55-w0rd-not-in-errors";
const USER_PASSWORD: &str = "acl-user-secret-7431";

/// Runs one command on the test server as the default user, before any password is set.
fn admin(server: &RedisServer, args: &[&str]) {
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<redis::Value>(&mut con).unwrap();
}

/// `redis://` URL of the server with `userinfo` (`user:password` or `:password`).
fn url_with(server: &RedisServer, userinfo: &str) -> String {
    format!("redis://{userinfo}@127.0.0.1:{}/", server.port())
}

async fn connect(url: &str) -> Result<RedisStore, StoreError> {
    RedisStore::connect(RedisOptions {
        target: RedisTarget::Server(url.to_string()),
        prefix: "delayq".into(),
        shards: 2,
    })
    .await
}

/// The store works: a push and a read through it.
async fn assert_usable(store: &RedisStore) {
    store.ping().await.unwrap();
    let id = JobId::parse("j1").unwrap();
    let spec = JobSpec::new(Topic::parse("t").unwrap(), id.clone(), "body", 0);
    store.push(spec, PushMode::Reject, 0).await.unwrap();
    let job = store.get(&id).await;
    assert!(job.is_ok(), "{job:?}");
}

/// A refused connection: `Unavailable`, without any password in its message.
fn assert_refused_without_secrets(r: Result<RedisStore, StoreError>, what: &str) -> String {
    let message = match r {
        Err(StoreError::Unavailable(m)) => m.to_string(),
        Err(other) => panic!("{what}: expected Unavailable, got {other:?}"),
        Ok(_) => panic!("{what}: connected"),
    };
    for secret in [PASSWORD, USER_PASSWORD, "wrong-password-123"] {
        assert!(!message.contains(secret), "{what}: {message}");
    }
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_opens_the_store_and_a_wrong_one_is_a_clear_error() {
    let server = RedisServer::start();
    admin(&server, &["CONFIG", "SET", "requirepass", PASSWORD]);

    let store = connect(&url_with(&server, &format!(":{PASSWORD}")))
        .await
        .unwrap();
    assert_usable(&store).await;

    let m = assert_refused_without_secrets(
        connect(&url_with(&server, ":wrong-password-123")).await,
        "wrong password",
    );
    assert!(m.contains("authentication failed"), "{m}");
    let m = assert_refused_without_secrets(connect(&server.url()).await, "no password");
    assert!(m.to_ascii_lowercase().contains("auth"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_opens_the_store_and_a_wrong_password_is_a_clear_error() {
    let server = RedisServer::start();
    // Only delayq's keys (`{PREFIX:SHARD}:...`) and its event channel (`PREFIX:events`).
    admin(
        &server,
        &[
            "ACL",
            "SETUSER",
            "delayq",
            "on",
            &format!(">{USER_PASSWORD}"),
            "~{delayq:*",
            "&delayq:*",
            "+@all",
        ],
    );
    admin(&server, &["ACL", "SETUSER", "default", "off"]);

    let store = connect(&url_with(&server, &format!("delayq:{USER_PASSWORD}")))
        .await
        .unwrap_or_else(|e| panic!("{e}; server log:\n{}", server.log()));
    assert_usable(&store).await;

    let m = assert_refused_without_secrets(
        connect(&url_with(&server, "delayq:wrong-password-123")).await,
        "wrong password",
    );
    assert!(m.contains("authentication failed"), "{m}");
    assert_refused_without_secrets(
        connect(&url_with(&server, &format!("nobody:{USER_PASSWORD}"))).await,
        "unknown user",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_names_the_redis_url_without_its_password() {
    let server = RedisServer::start();
    admin(&server, &["CONFIG", "SET", "requirepass", PASSWORD]);
    for url in [
        url_with(&server, ":wrong-password-123"),
        url_with(&server, &format!("someone:{PASSWORD}")),
        // Unparsable after the credentials: the URL error must not quote them either.
        format!("redis://u:{PASSWORD}@127.0.0.1:notaport/"),
    ] {
        let config = Config {
            redis: Some(url.clone()),
            ..Config::default()
        };
        let err = match delayq::server::open_store(&config).await {
            Err(e) => format!("{e:#}"),
            Ok(_) => panic!("{url}: connected"),
        };
        assert!(!err.contains(PASSWORD), "{err}");
        assert!(!err.contains("wrong-password-123"), "{err}");
        assert!(
            err.contains("cannot use Redis at redis://***@127.0.0.1:"),
            "{err}"
        );
    }
}

/// A private CA (`ca.pem`) and a server certificate for 127.0.0.1 signed by it (`cert.pem`,
/// `key.pem`) in `dir`, by `openssl`.
fn private_ca_and_server_cert(dir: &Path) {
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("could not run openssl (apt-get install -y openssl): {e}"));
        assert!(status.success(), "openssl {args:?} failed");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=delayq test CA",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        "-out",
        "cert.pem",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_url_speaks_tls_and_verifies_the_certificate() {
    let certs = tempfile::TempDir::new().unwrap();
    private_ca_and_server_cert(certs.path());
    let ca = certs.path().join("ca.pem");
    let cert = certs.path().join("cert.pem");
    let key = certs.path().join("key.pem");
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-key-file",
        key.to_str().unwrap(),
        "--tls-ca-cert-file",
        ca.to_str().unwrap(),
        "--tls-auth-clients",
        "no",
    ]);
    // The server really speaks TLS on that port, to a client that trusts its certificate.
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert", ca.to_str().unwrap()])
        .args(["-h", "127.0.0.1", "-p", &tls_port, "PING"])
        .output()
        .expect("run redis-cli");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "PONG",
        "{}; server log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );

    // delayq accepts the URL, shakes hands, and refuses a certificate from a CA it does not trust.
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let m = match connect(&url).await {
        Err(StoreError::Unavailable(m)) => m.to_string(),
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("connected to a self-signed server without trusting it"),
    };
    assert!(m.to_ascii_lowercase().contains("certificate"), "{m}");

    // `#insecure` (skip verification) is not built in: a clear error, not a silent downgrade.
    let insecure = format!("rediss://127.0.0.1:{tls_port}/#insecure");
    assert!(
        matches!(connect(&insecure).await, Err(StoreError::Unavailable(_))),
        "#insecure must not connect"
    );

    // Trust comes from the system's store, which `SSL_CERT_FILE` can name: a private CA works.
    let delayq = DelayqProcess::start_with_env(
        &["--redis", &url],
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    )
    .await;
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/jobs", delayq.base_url))
        .body(r#"{"topic":"tls","id":"over-tls"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "push over a TLS Redis");
    let r = http
        .get(format!("{}/v1/jobs/over-tls", delayq.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
