use super::*;
use clap::{Args, Command, FromArgMatches};
use std::collections::BTreeMap;
use std::path::Path;

/// Parses `delayq serve` arguments as the binary does, except that environment lookups are
/// answered from `env` instead of the process environment: each `DELAYQ_*` value found in
/// `env` becomes the argument's fallback, below the flag, which is exactly where clap puts
/// an environment value. Keeps tests deterministic and free of `set_var`.
fn parse(argv: &[&str], env: &[(&str, &str)]) -> Result<ServeArgs, clap::Error> {
    let env: BTreeMap<&str, &str> = env.iter().copied().collect();
    let cmd = ServeArgs::augment_args(Command::new("serve")).mut_args(|arg| {
        let injected = arg
            .get_env()
            .and_then(|name| name.to_str())
            .and_then(|name| env.get(name).copied());
        let arg = arg.env(None);
        match injected {
            // clap keeps `&'static str` defaults (without its `string` feature); a few bytes
            // leaked per test.
            Some(value) => arg.default_value(&*Box::leak(value.to_string().into_boxed_str())),
            None => arg,
        }
    });
    let argv = std::iter::once("serve").chain(argv.iter().copied());
    let matches = cmd.try_get_matches_from(argv)?;
    ServeArgs::from_arg_matches(&matches)
}

pub(super) fn load(argv: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_args(parse(argv, env).unwrap())
}

fn toml_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f
}

fn invalid_setting(e: ConfigError) -> (&'static str, String) {
    match e {
        ConfigError::Invalid {
            setting, origin, ..
        } => (setting, origin),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn nothing_given_is_the_default_config() {
    assert_eq!(load(&[], &[]).unwrap(), Config::default());
}

#[test]
fn every_flag_has_its_delayq_env_variable() {
    let cmd = ServeArgs::augment_args(Command::new("serve"));
    for arg in cmd.get_arguments() {
        let long = arg.get_long().unwrap();
        let expected = match long {
            // Given once per token; its variable holds the list.
            "auth-token" => "DELAYQ_AUTH_TOKENS".to_string(),
            _ => format!("DELAYQ_{}", long.replace('-', "_").to_ascii_uppercase()),
        };
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some(expected.as_str()),
            "--{long}"
        );
    }
}

#[test]
fn every_setting_is_read_from_flags() {
    let c = load(
        &[
            "--listen=0.0.0.0:1",
            "--allowed-hosts=queue.example,*.corp.example",
            "--redis=redis://r:6379/0",
            "--data-dir=/d",
            "--backup-dir=/b",
            "--prefix=p",
            "--shards=2",
            "--max-body-bytes=3",
            "--compat-pop-timeout=4",
            "--max-wait=5",
            "--max-batch=6",
            "--max-waiters=7",
            "--auth-token=0123456789abcdef",
            "--auth-token=fedcba9876543210",
            "--request-timeout=8",
            "--idle-timeout=9",
            "--max-connections=14",
            "--worker-threads=15",
            "--log-format=json",
            "--callback-secret=whsec_YWFhYQ==",
            "--callback-secret=whsec_YmJiYg==",
            "--callback-allow=10.0.0.0/8,hooks.example.com",
            "--callback-max-in-flight=10",
            "--callback-max-in-flight-per-host=11",
            "--journal=mysql://u@h:3306/db",
            "--journal-mode=async",
            "--journal-retention=120",
            "--amqp=amqp://u:p@mq:5672/%2f",
            "--amqp-intake=in",
            "--amqp-publish-timeout=12",
            "--amqp-prefetch=13",
            "--beanstalk-listen=0.0.0.0:11300",
            "--memory-window=3600",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(
        c,
        Config {
            listen: "0.0.0.0:1".parse().unwrap(),
            beanstalk_listen: Some(BeanstalkListen::Tcp("0.0.0.0:11300".parse().unwrap())),
            allowed_hosts: Some(
                AllowedHosts::parse(&["queue.example".into(), "*.corp.example".into()]).unwrap()
            ),
            redis: Some("redis://r:6379/0".into()),
            redis_cluster: None,
            memory: false,
            data_dir: "/d".into(),
            memory_window_secs: Some(3600),
            backup_dir: Some("/b".into()),
            prefix: "p".into(),
            shards: 2,
            max_body_bytes: 3,
            compat_pop_timeout_secs: 4,
            max_wait_secs: 5,
            max_batch: 6,
            max_waiters: 7,
            auth_tokens: vec!["0123456789abcdef".into(), "fedcba9876543210".into()],
            request_timeout_secs: 8,
            idle_timeout_secs: 9,
            max_connections: Some(14),
            worker_threads: Some(15),
            log_format: LogFormat::Json,
            callback_secrets: vec![
                WebhookSecret::parse("whsec_YWFhYQ==").unwrap(),
                WebhookSecret::parse("whsec_YmJiYg==").unwrap(),
            ],
            callback_allow: AllowList::parse(&["10.0.0.0/8".into(), "hooks.example.com".into()])
                .unwrap(),
            callback_max_in_flight: 10,
            callback_max_in_flight_per_host: 11,
            journal: Some("mysql://u@h:3306/db".into()),
            journal_mode: crate::journal::JournalMode::Async,
            journal_retention_secs: 120,
            amqp: Some("amqp://u:p@mq:5672/%2f".into()),
            amqp_intake: "in".into(),
            amqp_publish_timeout_secs: 12,
            amqp_prefetch: 13,
        }
    );
}

#[test]
fn a_bad_callback_secret_or_destination_is_refused_naming_the_setting_not_the_secret() {
    let e = load(&["--callback-secret=whsec_not*base64"], &[]).unwrap_err();
    let text = e.to_string();
    assert_eq!(invalid_setting(e).0, "callback_secret");
    assert!(!text.contains("not*base64"), "{text}");
    let e = load(&[], &[("DELAYQ_CALLBACK_ALLOW", "http://x/")]).unwrap_err();
    let text = e.to_string();
    let (setting, origin) = invalid_setting(e);
    assert_eq!(setting, "callback_allow");
    assert!(
        origin.contains("DELAYQ_CALLBACK_ALLOW"),
        "{origin} / {text}"
    );
    // The default refuses the metadata address.
    let c = load(&[], &[]).unwrap();
    assert!(
        c.callback_allow
            .check_url("http://169.254.169.254/")
            .is_err()
    );
}

#[test]
fn every_setting_is_read_from_the_file() {
    let f = toml_file(
        r#"
        listen = "0.0.0.0:1"
        redis = "rediss://r:6380"
        data_dir = "/d"
        prefix = "p"
        shards = 2
        max_body_bytes = 3
        compat_pop_timeout = 4
        max_wait = 5
        max_batch = 6
        auth_tokens = ["0123456789abcdef"]
        request_timeout = 7
        idle_timeout = 8
        allowed_hosts = ["queue.example", "*"]
        max_connections = 9
        worker_threads = 3
        journal = "postgres://u@h/db"
        journal_mode = "sync"
        journal_retention = 3600
        log_format = "json"
        beanstalk_listen = "unix:/run/delayq/beanstalk.sock"
        "#,
    );
    let c = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
    assert_eq!(c.listen, "0.0.0.0:1".parse().unwrap());
    assert_eq!(c.redis.as_deref(), Some("rediss://r:6380"));
    assert_eq!(c.data_dir, PathBuf::from("/d"));
    assert_eq!((c.prefix.as_str(), c.shards, c.max_body_bytes), ("p", 2, 3));
    assert_eq!(
        (c.compat_pop_timeout_secs, c.max_wait_secs, c.max_batch),
        (4, 5, 6)
    );
    assert_eq!(c.auth_tokens, vec![AuthToken::from("0123456789abcdef")]);
    assert_eq!((c.request_timeout_secs, c.idle_timeout_secs), (7, 8));
    let hosts = AllowedHosts::parse(&["queue.example".into(), "*".into()]).unwrap();
    assert_eq!((c.allowed_hosts, c.max_connections), (Some(hosts), Some(9)));
    assert_eq!(c.worker_threads, Some(3));
    assert_eq!(c.journal.as_deref(), Some("postgres://u@h/db"));
    let sync = crate::journal::JournalMode::Sync;
    assert_eq!((c.journal_mode, c.journal_retention_secs), (sync, 3600));
    assert_eq!(
        c.beanstalk_listen,
        Some(BeanstalkListen::Unix("/run/delayq/beanstalk.sock".into()))
    );
    assert_eq!(c.log_format, LogFormat::Json);
}

#[test]
fn log_format_is_text_or_json_from_any_source() {
    assert_eq!(load(&[], &[]).unwrap().log_format, LogFormat::Text);
    let c = load(&[], &[("DELAYQ_LOG_FORMAT", "json")]).unwrap();
    assert_eq!(c.log_format, LogFormat::Json);
    let e = load(&["--log-format=xml"], &[]).unwrap_err();
    let text = e.to_string();
    assert_eq!(invalid_setting(e).0, "log_format");
    assert!(text.contains("`text` or `json`"), "{text}");
}

#[test]
fn a_bad_journal_url_or_mode_is_an_error_naming_the_setting() {
    for (args, key) in [
        (["--journal", "redis://h/0"], "journal"),
        (["--journal", "postgres://u:pw@[::1"], "journal"),
        (["--journal-mode", "later"], "journal_mode"),
    ] {
        let e = load(&args, &[]).unwrap_err().to_string();
        assert!(e.contains(key), "{args:?}: {e}");
        assert!(!e.contains("pw@"), "{args:?}: the password is shown: {e}");
    }
}

#[test]
fn flag_beats_env_beats_file_beats_default() {
    let f = toml_file("shards = 3\nprefix = \"file\"\nmax_batch = 30\n");
    let path = f.path().to_str().unwrap();
    let env = [
        ("DELAYQ_SHARDS", "2"),
        ("DELAYQ_PREFIX", "env"),
        ("DELAYQ_CONFIG", path),
    ];
    let c = load(&["--shards", "1"], &env).unwrap();
    assert_eq!(c.shards, 1, "flag over env and file");
    assert_eq!(c.prefix, "env", "env over file");
    assert_eq!(c.max_batch, 30, "file over default");
    assert_eq!(c.max_wait_secs, 300, "default when nothing is given");
}

#[test]
fn config_file_can_come_from_the_environment() {
    let f = toml_file("max_wait = 7\ncompat_pop_timeout = 7\n");
    let c = load(&[], &[("DELAYQ_CONFIG", f.path().to_str().unwrap())]).unwrap();
    assert_eq!(c.max_wait_secs, 7);
}

#[test]
fn unknown_key_in_the_file_is_an_error_naming_it() {
    let f = toml_file("listen = \"127.0.0.1:1\"\nshard = 4\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    let text = e.to_string();
    match e {
        ConfigError::File { key, message, path } => {
            assert_eq!(key.as_deref(), Some("shard"));
            assert!(message.contains("shard"), "{message}");
            assert!(message.contains("line 2"), "{message}");
            assert_eq!(path, f.path());
        }
        other => panic!("{other:?}"),
    }
    assert!(text.contains(f.path().to_str().unwrap()), "{text}");
}

#[test]
fn table_in_the_file_is_an_unknown_key() {
    let f = toml_file("[redis]\nurl = \"redis://x\"\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    match e {
        ConfigError::File { key, .. } => assert_eq!(key.as_deref(), Some("redis")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_type_in_the_file_names_the_key() {
    let f = toml_file("prefix = \"a\"\nshards = \"eight\"\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    match e {
        ConfigError::File { key, .. } => assert_eq!(key.as_deref(), Some("shards")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn file_that_is_not_toml_or_missing_is_an_error_naming_it() {
    let f = toml_file("shards = = 4\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    assert!(matches!(e, ConfigError::File { .. }), "{e:?}");
    let e = load(&["--config", "/nonexistent/delayq.toml"], &[]).unwrap_err();
    assert!(matches!(e, ConfigError::ReadFile { .. }), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/delayq.toml"));
}

#[test]
fn invalid_values_name_the_setting_and_where_they_came_from() {
    let cases: &[(&[&str], &str)] = &[
        (&["--shards=0"], "shards"),
        (&["--shards=1025"], "shards"),
        (&["--prefix="], "prefix"),
        (&["--prefix=a{b}"], "prefix"),
        (&["--prefix=a b"], "prefix"),
        (&["--max-body-bytes=0"], "max_body_bytes"),
        (&["--max-body-bytes=67108865"], "max_body_bytes"),
        (&["--max-batch=0"], "max_batch"),
        (&["--max-batch=10001"], "max_batch"),
        (&["--listen=localhost"], "listen"),
        (&["--listen=127.0.0.1"], "listen"),
        (&["--redis=localhost:6379"], "redis"),
        (
            &["--max-wait=10", "--compat-pop-timeout=11"],
            "compat_pop_timeout",
        ),
        // The default compat timeout (178 s) does not fit a lower max_wait either.
        (&["--max-wait=60"], "compat_pop_timeout"),
        (&["--max-wait=86401"], "max_wait"),
        (&["--request-timeout=0"], "request_timeout"),
        (&["--request-timeout=86401"], "request_timeout"),
        (&["--idle-timeout=0"], "idle_timeout"),
        (&["--idle-timeout=86401"], "idle_timeout"),
        (&["--auth-token=short"], "auth_tokens"),
        (
            &["--auth-token=0123456789abcdef", "--auth-token="],
            "auth_tokens",
        ),
        (&["--auth-token=0123456789 abcdef"], "auth_tokens"),
        (
            &["--auth-token-file=/nonexistent/tokens"],
            "auth_token_file",
        ),
    ];
    for (argv, setting) in cases {
        let e = load(argv, &[]).expect_err(&format!("{argv:?} should be refused"));
        let text = e.to_string();
        let (named, origin) = invalid_setting(e);
        assert_eq!(named, *setting, "{argv:?}: {text}");
        assert!(text.contains(setting), "{text}");
        if *argv != ["--max-wait=60"] {
            assert!(origin.starts_with("--"), "{argv:?}: {origin}");
        }
    }
}

#[test]
fn limits_themselves_are_accepted() {
    let c = load(
        &[
            "--shards=1024",
            "--max-body-bytes=67108864",
            "--max-batch=10000",
            "--max-wait=0",
            "--compat-pop-timeout=0",
            "--listen=[::1]:0",
            "--redis=unix:///run/redis.sock",
        ],
        &[],
    )
    .unwrap();
    assert_eq!((c.shards, c.max_batch, c.max_wait_secs), (1024, 10_000, 0));
}

#[test]
fn invalid_env_value_names_the_setting() {
    let e = load(&[], &[("DELAYQ_SHARDS", "0")]).unwrap_err();
    let text = e.to_string();
    assert_eq!(invalid_setting(e).0, "shards");
    assert!(text.contains("DELAYQ_SHARDS"), "{text}");
    // Not a number at all: clap refuses it, naming the flag.
    let e = parse(&[], &[("DELAYQ_MAX_BATCH", "lots")]).unwrap_err();
    assert!(e.to_string().contains("--max-batch"), "{e}");
}

#[test]
fn invalid_file_value_names_the_setting_and_the_file() {
    let f = toml_file("max_batch = -1\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    let text = e.to_string();
    let (setting, origin) = invalid_setting(e);
    assert_eq!(setting, "max_batch");
    assert!(origin.contains(f.path().to_str().unwrap()), "{origin}");
    assert!(text.contains("negative"), "{text}");

    let f = toml_file("prefix = \"\"\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    assert_eq!(invalid_setting(e).0, "prefix");
}

fn token_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f
}

#[test]
fn auth_tokens_come_from_a_comma_separated_variable() {
    let c = load(
        &[],
        &[("DELAYQ_AUTH_TOKENS", "0123456789abcdef,fedcba9876543210")],
    )
    .unwrap();
    assert_eq!(
        c.auth_tokens,
        vec![
            AuthToken::from("0123456789abcdef"),
            AuthToken::from("fedcba9876543210")
        ]
    );
    // The flag replaces the variable, like every setting.
    let c = load(
        &["--auth-token=aaaaaaaaaaaaaaaa"],
        &[("DELAYQ_AUTH_TOKENS", "0123456789abcdef")],
    )
    .unwrap();
    assert_eq!(c.auth_tokens, vec![AuthToken::from("aaaaaaaaaaaaaaaa")]);
}

#[test]
fn token_file_lines_are_tokens_without_blanks_and_comments() {
    let f = token_file(
        "# rotated 2025-01\n\n  0123456789abcdef  \n#old-old-old-old-old\nfedcba9876543210\n",
    );
    let path = f.path().to_str().unwrap();
    let c = load(&["--auth-token-file", path], &[]).unwrap();
    assert_eq!(
        c.auth_tokens,
        vec![
            AuthToken::from("0123456789abcdef"),
            AuthToken::from("fedcba9876543210")
        ]
    );
    // Tokens from the flag and from the file are all accepted.
    let c = load(
        &["--auth-token=aaaaaaaaaaaaaaaa"],
        &[("DELAYQ_AUTH_TOKEN_FILE", path)],
    )
    .unwrap();
    assert_eq!(c.auth_tokens.len(), 3);
    // And from the TOML file.
    let conf = toml_file(&format!(
        "auth_token_file = {path:?}\nauth_tokens = [\"bbbbbbbbbbbbbbbb\"]\n"
    ));
    let c = load(&["--config", conf.path().to_str().unwrap()], &[]).unwrap();
    assert_eq!(c.auth_tokens[0], AuthToken::from("bbbbbbbbbbbbbbbb"));
    assert_eq!(c.auth_tokens.len(), 3);
}

#[test]
fn token_file_without_a_token_or_unreadable_is_an_error_naming_it() {
    let f = token_file("# nothing yet\n\n");
    let path = f.path().to_str().unwrap();
    let e = load(&["--auth-token-file", path], &[]).unwrap_err();
    let text = e.to_string();
    assert_eq!(invalid_setting(e).0, "auth_token_file");
    assert!(text.contains(path) && text.contains("no token"), "{text}");

    let e = load(&["--auth-token-file=/nonexistent/tokens"], &[]).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/tokens"), "{e}");
}

#[test]
fn bad_tokens_are_refused_without_being_echoed() {
    let f = token_file("0123456789abcdef\nsecret-but-short\x01\n");
    let e = load(&["--auth-token-file", f.path().to_str().unwrap()], &[]).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("line 2"), "{text}");
    assert!(!text.contains("secret"), "{text}");

    let e = load(&["--auth-token=tinysecret"], &[]).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("at least 16"), "{text}");
    assert!(
        text.contains("--auth-token or DELAYQ_AUTH_TOKENS"),
        "{text}"
    );
    assert!(!text.contains("tinysecret"), "{text}");
}

#[test]
fn debug_output_hides_tokens() {
    let c = load(&["--auth-token=0123456789abcdef"], &[]).unwrap();
    let args = parse(&["--auth-token=0123456789abcdef"], &[]).unwrap();
    for dump in [format!("{c:?}"), format!("{args:?}")] {
        assert!(!dump.contains("0123456789abcdef"), "{dump}");
        assert!(dump.contains("AuthToken(***)"), "{dump}");
    }
}

#[test]
fn shards_default_to_one_on_a_server_and_eight_on_a_cluster() {
    let server = load(&["--redis", "redis://127.0.0.1:6379"], &[]).unwrap();
    assert_eq!(server.shards, 1);
    let cluster = load(&["--redis-cluster", "redis://127.0.0.1:7000"], &[]).unwrap();
    assert_eq!(cluster.shards, 8);
    let chosen = load(
        &["--redis-cluster", "redis://127.0.0.1:7000", "--shards", "3"],
        &[],
    );
    assert_eq!(chosen.unwrap().shards, 3);
}

#[test]
fn redis_cluster_seeds_come_from_flag_env_or_file() {
    let want = Some(vec![
        "redis://127.0.0.1:7000".to_string(),
        "redis://127.0.0.1:7001".to_string(),
    ]);
    let joined = "redis://127.0.0.1:7000,redis://127.0.0.1:7001";
    let c = load(&["--redis-cluster", joined], &[]).unwrap();
    assert_eq!((c.redis_cluster, c.redis), (want.clone(), None));
    let c = load(&[], &[("DELAYQ_REDIS_CLUSTER", joined)]).unwrap();
    assert_eq!(c.redis_cluster, want);
    let f = toml_file(&format!("redis_cluster = \"{joined}\"\n"));
    let c = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
    assert_eq!(c.redis_cluster, want);
    let f = toml_file("redis_cluster = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"]\n");
    let c = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
    assert_eq!(c.redis_cluster, want);
}

#[test]
fn redis_and_redis_cluster_together_are_refused_naming_both() {
    let e = load(&["--redis=redis://a:1", "--redis-cluster=redis://b:2"], &[]).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("redis_cluster") && text.contains("--redis "),
        "{text}"
    );
    let f = toml_file("redis = \"redis://a:1\"\n");
    let e = load(
        &[
            "--config",
            f.path().to_str().unwrap(),
            "--redis-cluster=redis://b:2",
        ],
        &[],
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("redis_cluster") && text.contains("`redis`"),
        "{text}"
    );
}

#[test]
fn bad_redis_cluster_seeds_are_refused() {
    for argv in [
        "--redis-cluster=",
        "--redis-cluster=redis://a:1,,redis://b:2",
        "--redis-cluster=unix:///run/redis.sock",
        "--redis-cluster=a:1",
    ] {
        let e = load(&[argv], &[]).expect_err(argv);
        assert_eq!(invalid_setting(e).0, "redis_cluster", "{argv}");
    }
    let e = load(&["--redis-cluster=http://user:secret@host"], &[]).unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[test]
fn beanstalk_listen_is_off_by_default_and_a_bad_one_is_refused() {
    assert_eq!(load(&[], &[]).unwrap().beanstalk_listen, None);
    let c = load(&[], &[("DELAYQ_BEANSTALK_LISTEN", "127.0.0.1:11300")]).unwrap();
    assert_eq!(
        c.beanstalk_listen,
        Some(BeanstalkListen::Tcp("127.0.0.1:11300".parse().unwrap()))
    );
    for argv in [
        "--beanstalk-listen=",
        "--beanstalk-listen=unix:",
        "--beanstalk-listen=localhost:11300",
        "--beanstalk-listen=11300",
    ] {
        let e = load(&[argv], &[]).expect_err(argv);
        assert_eq!(invalid_setting(e).0, "beanstalk_listen", "{argv}");
    }
}

#[test]
fn redis_url_is_not_echoed_in_errors() {
    let e = load(&["--redis=http://user:secret@host"], &[]).unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[test]
fn memory_comes_from_the_flag_its_variable_or_the_file() {
    assert!(!load(&[], &[]).unwrap().memory, "off by default");
    assert!(load(&["--memory"], &[]).unwrap().memory, "the flag alone");
    assert!(load(&["--memory=true"], &[]).unwrap().memory);
    assert!(!load(&["--memory=false"], &[]).unwrap().memory);
    for (value, want) in [("true", true), ("1", true), ("false", false), ("0", false)] {
        let c = load(&[], &[("DELAYQ_MEMORY", value)]).unwrap();
        assert_eq!(c.memory, want, "DELAYQ_MEMORY={value}");
    }
    let f = toml_file("memory = true\n");
    let path = f.path().to_str().unwrap();
    assert!(load(&["--config", path], &[]).unwrap().memory, "the file");
    // The variable can turn the file's switch off, and the flag the variable's.
    let c = load(&["--config", path], &[("DELAYQ_MEMORY", "false")]).unwrap();
    assert!(!c.memory, "variable over file");
    let c = load(&["--memory=false"], &[("DELAYQ_MEMORY", "true")]).unwrap();
    assert!(!c.memory, "flag over variable");
}

#[test]
fn memory_that_is_not_a_boolean_is_refused_naming_it() {
    let e = parse(&[], &[("DELAYQ_MEMORY", "maybe")]).unwrap_err();
    assert!(e.to_string().contains("--memory"), "{e}");
    let e = parse(&["--memory=maybe"], &[]).unwrap_err();
    assert!(e.to_string().contains("--memory"), "{e}");
    let f = toml_file("memory = \"yes\"\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    match e {
        ConfigError::File { key, .. } => assert_eq!(key.as_deref(), Some("memory")),
        other => panic!("{other:?}"),
    }
}

/// The setting a refused configuration names, where its value came from, and the message.
fn refusal(argv: &[&str], env: &[(&str, &str)]) -> (&'static str, String, String) {
    let e = load(argv, env).expect_err(&format!("{argv:?} {env:?} should be refused"));
    let text = e.to_string();
    let (setting, origin) = invalid_setting(e);
    (setting, origin, text)
}

#[test]
fn memory_with_redis_or_redis_cluster_is_refused_naming_both() {
    let (setting, origin, text) = refusal(&["--memory", "--redis=redis://a:1"], &[]);
    assert_eq!(
        (setting, origin.as_str()),
        ("memory", "--memory or DELAYQ_MEMORY")
    );
    assert!(
        text.contains("with redis (from --redis or DELAYQ_REDIS)"),
        "{text}"
    );

    let (setting, _, text) = refusal(&["--memory", "--redis-cluster=redis://b:2"], &[]);
    assert_eq!(setting, "memory");
    let cluster = "with redis_cluster (from --redis-cluster or DELAYQ_REDIS_CLUSTER)";
    assert!(text.contains(cluster), "{text}");

    let f = toml_file("memory = true\n");
    let path = f.path().to_str().unwrap();
    let (_, origin, text) = refusal(&["--config", path, "--redis=redis://a:1"], &[]);
    assert!(origin.starts_with("`memory` in"), "{origin}");
    assert!(text.contains("with redis (from --redis "), "{text}");

    // Switched off, it excludes nothing.
    let c = load(&["--memory=false", "--redis=redis://a:1"], &[]).unwrap();
    assert_eq!((c.memory, c.redis.as_deref()), (false, Some("redis://a:1")));
}

#[test]
fn memory_with_a_data_dir_given_is_refused_but_not_with_the_default_one() {
    let (setting, origin, text) = refusal(&["--memory", "--data-dir=/d"], &[]);
    assert_eq!(
        (setting, origin.as_str()),
        ("data_dir", "--data-dir or DELAYQ_DATA_DIR")
    );
    let named = "not used with memory (from --memory or DELAYQ_MEMORY)";
    assert!(text.contains(named), "{text}");
    assert_eq!(
        refusal(&["--memory"], &[("DELAYQ_DATA_DIR", "/d")]).0,
        "data_dir"
    );
    let f = toml_file("data_dir = \"/d\"\n");
    let path = f.path().to_str().unwrap();
    assert_eq!(refusal(&["--memory", "--config", path], &[]).0, "data_dir");

    let c = load(&["--memory"], &[]).unwrap();
    assert_eq!((c.memory, c.data_dir), (true, Config::default().data_dir));
    let c = load(&["--memory=false", "--data-dir=/d"], &[]).unwrap();
    assert_eq!((c.memory, c.data_dir), (false, PathBuf::from("/d")));
}

/// The settings table of docs/operations.md, as the definitions give it: one row per setting
/// in `settings!` order, then `--config`.
fn settings_table() -> String {
    let cell = |text: &str| text.replace('|', "\\|");
    let mut table =
        String::from("| flag | env | TOML key | default | meaning |\n|---|---|---|---|---|\n");
    for s in settings() {
        let key = if s.key == define::CONFIG_FILE.key {
            "–".to_string()
        } else {
            format!("`{}`", s.key)
        };
        table.push_str(&format!(
            "| `--{} {}` | `{}` | {key} | {} | {} |\n",
            s.flag,
            s.value_name,
            s.env,
            cell(s.default.as_deref().unwrap_or("none")),
            cell(&s.meaning()),
        ));
    }
    table
}

/// docs/operations.md's settings table (between `<!-- settings table: ... -->` and
/// `<!-- end of settings table -->`) is the one the definitions give. To update it after
/// changing a setting, run `DELAYQ_BLESS=1 cargo test -p delayq --lib config`: the test then
/// rewrites the table instead of failing.
#[test]
fn docs_settings_table_matches_the_definitions() {
    const START: &str = "<!-- settings table:";
    const END: &str = "<!-- end of settings table -->";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let marker = doc
        .find(START)
        .expect("docs/operations.md lost its start marker");
    let start = marker + doc[marker..].find('\n').unwrap() + 1;
    let end = doc
        .find(END)
        .expect("docs/operations.md lost its end marker");
    let (documented, defined) = (&doc[start..end], settings_table());
    if documented == defined {
        return;
    }
    if std::env::var("DELAYQ_BLESS").as_deref() == Ok("1") {
        let updated = format!("{}{defined}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        documented, defined,
        "docs/operations.md's settings table disagrees with config/mod.rs; \
         `DELAYQ_BLESS=1 cargo test -p delayq --lib config` rewrites it"
    );
}

/// The `-h` and `--help` texts of one flag of `delayq serve`.
fn help_of(flag: &str) -> (String, String) {
    let cmd = ServeArgs::augment_args(Command::new("serve"));
    let arg = cmd
        .get_arguments()
        .find(|a| a.get_long() == Some(flag))
        .unwrap();
    let text = |help: Option<&clap::builder::StyledStr>| help.unwrap().to_string();
    (text(arg.get_help()), text(arg.get_long_help()))
}

/// A `--help` text on one line.
fn flat(text: &str) -> String {
    text.replace('\n', " ")
}

#[test]
fn help_shows_each_default_and_range() {
    let (short, long) = help_of("max-batch");
    assert!(short.ends_with(" [default: 1000]"), "{short}");
    assert!(flat(&long).ends_with("; 1–10000 [default: 1000]"), "{long}");
    let (short, long) = help_of("shards");
    assert!(
        short.ends_with(" [default: 1 (8 with --redis-cluster)]"),
        "{short}"
    );
    assert!(
        flat(&long).ends_with("; 1–1024 [default: 1 (8 with --redis-cluster)]"),
        "{long}"
    );
    assert!(help_of("max-body-bytes").0.contains("[default: 1048576]"));
    assert!(help_of("listen").0.contains("[default: 127.0.0.1:9277]"));
    let (_, long) = help_of("auth-token");
    assert!(
        flat(&long).contains("at least 16 printable ASCII"),
        "{long}"
    );
    // Markdown stays in the docs; lines fit a terminal.
    let (short, long) = help_of("max-waiters");
    assert!(!short.contains('`') && !long.contains('`'), "{long}");
    assert!(long.lines().all(|l| l.chars().count() <= 70), "{long}");
    let (short, long) = help_of("memory");
    assert!(short.ends_with(" [default: false]"), "{short}");
    assert!(flat(&long).contains("the flag alone is true"), "{long}");
    // Unset by default: no default shown.
    assert!(
        !help_of("redis").1.contains("[default"),
        "{}",
        help_of("redis").1
    );
}

#[test]
fn defaults_as_documented_are_accepted_and_are_the_defaults() {
    let mut argv = Vec::new();
    for s in settings() {
        // A default that is one code span is the value itself; others (shards) explain.
        let Some(value) = s
            .default
            .as_deref()
            .and_then(|d| d.strip_prefix('`')?.strip_suffix('`'))
            .filter(|v| !v.contains('`'))
        else {
            continue;
        };
        argv.push(format!("--{}={value}", s.flag));
    }
    assert!(argv.len() >= 10, "{argv:?}");
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    assert_eq!(load(&argv, &[]).unwrap(), Config::default(), "{argv:?}");
}

#[test]
fn the_file_accepts_exactly_the_settings_keys() {
    let f = toml_file("no_such_setting = 1\n");
    let e = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap_err();
    let ConfigError::File { message, .. } = e else {
        panic!("{e:?}");
    };
    for s in settings() {
        let listed = message.contains(&format!("`{}`", s.key));
        assert_eq!(listed, s.key != "config", "{}: {message}", s.key);
    }
}

#[test]
fn allowed_hosts_and_max_connections_are_checked_and_unset_by_default() {
    let c = load(&[], &[]).unwrap();
    assert_eq!((c.allowed_hosts, c.max_connections), (None, None));
    let e = load(&["--allowed-hosts=localhost:9277"], &[]).unwrap_err();
    let text = e.to_string();
    assert_eq!(invalid_setting(e).0, "allowed_hosts");
    assert!(text.contains("port"), "{text}");
    let e = load(&[], &[("DELAYQ_ALLOWED_HOSTS", "a.example,,b.example")]).unwrap_err();
    assert_eq!(invalid_setting(e).0, "allowed_hosts");
    let e = load(&["--max-connections=0"], &[]).unwrap_err();
    assert_eq!(invalid_setting(e).0, "max_connections");
}

#[test]
fn worker_threads_are_one_per_core_unless_given() {
    let c = load(&[], &[]).unwrap();
    assert_eq!(c.worker_threads, None);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(super::worker_threads(&c), cores);
    let c = load(&[], &[("DELAYQ_WORKER_THREADS", "1")]).unwrap();
    assert_eq!(super::worker_threads(&c), 1);
    for bad in ["--worker-threads=0", "--worker-threads=1025"] {
        match load(&[bad], &[]) {
            Err(e) => assert_eq!(invalid_setting(e).0, "worker_threads", "{bad}"),
            Ok(c) => panic!("{bad} was taken: {:?}", c.worker_threads),
        }
    }
}
