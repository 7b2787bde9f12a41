//! A database of its own for each test, on the machine's PostgreSQL (127.0.0.1:5432, user
//! `postgres`, trust) or MariaDB (127.0.0.1:3306, `root`, no password): created under a unique
//! name and dropped when the test ends, whatever its outcome. `journal_tests!` runs each
//! listed test once per database.

use sqlx::Connection;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    MariaDb,
}

/// A database created for one test; dropped on drop.
pub struct TestDb {
    pub kind: Kind,
    pub name: String,
    /// The journal URL of this database.
    pub url: String,
}

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const MY_ADMIN: &str = "mysql://root@127.0.0.1:3306/";

fn install_hint(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => {
            "PostgreSQL must listen on 127.0.0.1:5432 with trust for user postgres \
             (apt-get install postgresql)"
        }
        Kind::MariaDb => {
            "MariaDB must listen on 127.0.0.1:3306 for root without a password \
             (apt-get install mariadb-server)"
        }
    }
}

/// Runs one admin statement.
async fn admin(kind: Kind, sql: &str) -> Result<(), sqlx::Error> {
    match kind {
        Kind::Postgres => {
            let mut c = sqlx::PgConnection::connect(PG_ADMIN).await?;
            sqlx::query(sql).execute(&mut c).await?;
            c.close().await
        }
        Kind::MariaDb => {
            let mut c = sqlx::MySqlConnection::connect(MY_ADMIN).await?;
            sqlx::query(sql).execute(&mut c).await?;
            c.close().await
        }
    }
}

impl TestDb {
    pub async fn create(kind: Kind) -> TestDb {
        let name = format!(
            "delayq_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        if let Err(e) = admin(kind, &format!("CREATE DATABASE {name}")).await {
            panic!("{} ({e})", install_hint(kind));
        }
        let url = match kind {
            Kind::Postgres => format!("postgres://postgres@127.0.0.1:5432/{name}"),
            Kind::MariaDb => format!("mysql://root@127.0.0.1:3306/{name}"),
        };
        TestDb { kind, name, url }
    }

    /// Runs one statement in this database.
    pub async fn execute(&self, sql: &str) {
        match self.kind {
            Kind::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
            }
            Kind::MariaDb => {
                let mut c = sqlx::MySqlConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
            }
        }
    }

    /// The first column of a one-row, one-column query, as an integer.
    pub async fn count(&self, sql: &str) -> i64 {
        use sqlx::Row;
        match self.kind {
            Kind::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql)
                    .fetch_one(&mut c)
                    .await
                    .unwrap()
                    .get::<i64, _>(0)
            }
            Kind::MariaDb => {
                let mut c = sqlx::MySqlConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql)
                    .fetch_one(&mut c)
                    .await
                    .unwrap()
                    .get::<i64, _>(0)
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (kind, name) = (self.kind, self.name.clone());
        let sql = match kind {
            Kind::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            Kind::MariaDb => format!("DROP DATABASE IF EXISTS {name}"),
        };
        // Its own thread and runtime: drop may run inside (or after) the test's runtime.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(admin(kind, &sql))
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

/// `journal_tests!(a, b)` expects `async fn a(db: &TestDb)` etc. in the calling module and
/// generates `postgres::a` and `mariadb::a`.
#[macro_export]
macro_rules! journal_tests {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::db::TestDb::create($crate::db::Kind::Postgres).await;
                    super::$name(&db).await;
                }
            )*
        }
        mod mariadb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::db::TestDb::create($crate::db::Kind::MariaDb).await;
                    super::$name(&db).await;
                }
            )*
        }
    };
}
