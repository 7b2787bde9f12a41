//! A PostgreSQL server of the test's own, for tests that stop the database: `initdb` in a
//! temporary directory, `pg_ctl` on a free loopback port, run as the `postgres` system user
//! (PostgreSQL refuses to run as root). Stopped and deleted on drop; the machine's own
//! PostgreSQL is never touched.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    pub port: u16,
    bin: PathBuf,
}

/// The directory of `initdb` and `pg_ctl`: the newest of /usr/lib/postgresql/*/bin.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    dirs.sort();
    dirs.pop().unwrap_or_else(|| {
        panic!("no /usr/lib/postgresql/*/bin/pg_ctl: apt-get install postgresql")
    })
}

/// Runs a PostgreSQL tool as the `postgres` user (as root) or as this user.
fn run_as_postgres(program: &Path, args: &[&str]) {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let mut cmd = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    let out = cmd.args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {program:?} ({e}): apt-get install postgresql util-linux")
    });
    assert!(
        out.status.success(),
        "{program:?} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("delayq-pg-")
            .tempdir()
            .unwrap();
        // The postgres user must own its directory.
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status();
        let data = dir.path().join("data");
        run_as_postgres(
            &bin.join("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        let pg = PrivatePostgres {
            port: crate::support::process::free_port(),
            dir,
            bin,
        };
        pg.up();
        pg
    }

    /// The URL of database `postgres` on it.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn up(&self) {
        let data = self.dir.path().join("data");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        run_as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &options,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        );
    }

    /// Stops the server at once (open connections are cut).
    pub fn down(&self) {
        let data = self.dir.path().join("data");
        run_as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args([
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .output();
    }
}
