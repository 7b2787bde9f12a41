//! The command line of the `delayq` binary: `serve`, and the client verbs (`push`, `reserve`,
//! `finish`, ...) that talk to a running server over /v1 through `delayq-client`.
//!
//! This file parses arguments and turns each verb into one or a few client calls, printing the
//! answer as text (`output.rs`) or, with `--json`, as the server's JSON. It holds no queue
//! logic and no HTTP: the server decides everything, the client crate speaks the protocol.

use anyhow::Context as _;
use clap::{ArgGroup, Args, Parser, Subcommand};
use delayq::config::{AuthToken, Config, LogFormat, ServeArgs};
use delayq_client::{
    Client, ClientError, FinishResult, Job, NewJob, NewSchedule, Reschedule, Rescheduled, Schedule,
    SettingsChange,
};
use serde::Serialize;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::output;

/// Where the client verbs look for a server when neither `--server` nor `DELAYQ_SERVER` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:9277";

/// What `delayq --version` prints after the name: the version and the commit built from
/// (build.rs; `unknown` outside a git checkout).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("DELAYQ_COMMIT"), ")");

/// Most ids sent in one `POST /v1/finish`: the server's default `max_batch`.
const FINISH_CHUNK: usize = delayq::config::DEFAULT_MAX_BATCH;

#[derive(Debug, Parser)]
#[command(
    name = "delayq",
    version = VERSION,
    about = "A delay queue: jobs that become ready at a given time",
    after_help = "Durations: 15s, 3m, 1h, 2d, 250ms, or a bare number of milliseconds.\n\
                  Times (--run-at): Unix milliseconds."
)]
pub struct Cli {
    /// Base URL of the server the client verbs talk to
    #[arg(
        long,
        global = true,
        env = "DELAYQ_SERVER",
        default_value = DEFAULT_SERVER,
        value_name = "URL"
    )]
    pub server: String,
    /// Bearer token for a server that requires one (its --auth-token); prefer DELAYQ_TOKEN:
    /// flags show in `ps`
    #[arg(
        long,
        global = true,
        env = "DELAYQ_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<AuthToken>,
    /// Print the server's JSON answer (one line) instead of text, for scripts
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (settings: flags, DELAYQ_* variables, --config FILE)
    // Boxed: the settings are many, and every other verb would carry their size.
    Serve(Box<ServeArgs>),
    /// Push a job
    Push(PushArgs),
    /// Reserve ready jobs, waiting up to --timeout for one
    Reserve(ReserveArgs),
    /// Finish jobs: they are done and removed
    Finish {
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
    /// Delete jobs, whatever their state
    Delete {
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
    /// Show a job
    Get { id: String },
    /// Job counts per topic and state
    Stats,
    /// Give a reserved job back, ready now or after --delay
    Release {
        id: String,
        /// Ready after this long instead of now (overrides the job's backoff)
        #[arg(long, value_parser = duration, value_name = "DURATION")]
        delay: Option<u64>,
    },
    /// Extend a reservation by the job's TTR
    Touch { id: String },
    /// Move a job to dead
    Bury { id: String },
    /// Make a dead job ready again
    Kick { id: String },
    /// Make dead jobs of a topic ready again
    KickTopic {
        topic: String,
        /// Most jobs to kick
        #[arg(long, default_value_t = 100, value_name = "N")]
        max: u64,
    },
    /// Change the due time (and optionally body and priority) of a delayed or ready job
    Reschedule(RescheduleArgs),
    /// A topic's flow control: pause, resume, limits (docs/flow-control.md)
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Recurring schedules: a job pushed at every tick of a cron expression or an interval
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Write a consistent copy of the server's embedded store into DIR while it serves (a
    /// server run with --backup-dir; DIR is on the server's machine, under that directory)
    Backup {
        /// A new or empty directory under the server's backup_dir: relative to it, or
        /// absolute inside it. `delayq serve --data-dir DIR` serves the copy
        #[arg(value_name = "DIR")]
        dir: String,
    },
    /// Put back the journaled jobs the server's store lost (a server run with --journal)
    Restore {
        /// Leave out jobs already due (and record that, so no later restore brings them back)
        /// instead of making them ready at once
        #[arg(long)]
        skip_overdue: bool,
        /// Only this job
        #[arg(long, value_name = "ID")]
        id: Option<String>,
    },
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell)
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page delayq(1) (roff: `delayq man | man -l -`), or write one page per
    /// verb too with --dir
    Man {
        /// Write delayq.1 and delayq-VERB.1 for every verb into this directory
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Hand out nothing of the topic (pull, callbacks, publishes) until it is resumed
    Pause { topic: String },
    /// Hand out the topic's jobs again
    Resume { topic: String },
    /// Set or remove the topic's limits; limits not named are unchanged
    #[command(group(ArgGroup::new("any").required(true).multiple(true)))]
    Limit(LimitArgs),
    /// The topic's flow control in force
    Show { topic: String },
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    pub topic: String,
    /// Hand-outs per second (fractions allowed), shared by every instance
    #[arg(long, value_name = "N", group = "any", conflicts_with = "no_rate")]
    pub rate: Option<f64>,
    /// The rate's burst (default: the rate, at least 1)
    #[arg(long, value_name = "N", group = "any")]
    pub burst: Option<u64>,
    /// At most this many of the topic's jobs reserved or being delivered at once
    #[arg(
        long,
        value_name = "N",
        group = "any",
        conflicts_with = "no_max_in_flight"
    )]
    pub max_in_flight: Option<u64>,
    /// Remove the rate limit (and its burst)
    #[arg(long, group = "any", conflicts_with = "burst")]
    pub no_rate: bool,
    /// Remove the limit on jobs in flight
    #[arg(long, group = "any")]
    pub no_max_in_flight: bool,
}

/// What a job is made of, for `push` and for the job of each tick of `schedule put`.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// Topic of the job
    #[arg(long)]
    pub topic: String,
    /// Time to run: how long a consumer may hold the job [server default: 60s]
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub ttr: Option<u64>,
    /// 0 is the most urgent [server default: 1024]
    #[arg(long, value_name = "N")]
    pub priority: Option<u32>,
    /// Deliveries before the job is dead; 0 = unlimited [server default: 0]
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Delays before the 1st, 2nd, ... redelivery; the last repeats (e.g. 15s,3m,10m)
    #[arg(long, value_parser = duration, value_delimiter = ',', value_name = "DURATIONS")]
    pub backoff: Option<Vec<u64>>,
    /// Make it a callback job: delayq POSTs the body to this URL when due instead of handing
    /// the job to consumers
    #[arg(long, value_name = "URL")]
    pub callback: Option<String>,
    /// How long one call may take [server default: 30s]
    #[arg(long, value_parser = duration, value_name = "DURATION", requires = "callback")]
    pub callback_timeout: Option<u64>,
    /// The body; '-' reads it from stdin [default: empty]
    #[arg(conflicts_with = "body_file")]
    pub body: Option<String>,
    /// Read the body from this file
    #[arg(long, value_name = "FILE")]
    pub body_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PushArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Job id (default: a new UUIDv7 chosen by the server)
    #[arg(long)]
    pub id: Option<String>,
    /// Due this long from now
    #[arg(long, value_parser = duration, value_name = "DURATION", conflicts_with = "run_at")]
    pub delay: Option<u64>,
    /// Due at this Unix time in milliseconds
    #[arg(long, value_name = "MS")]
    pub run_at: Option<u64>,
    /// Replace an existing job with this id instead of failing
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create or replace a schedule; each tick pushes the job `<ID>@<tick in Unix ms>`
    // Boxed: the other verbs carry only an id.
    Put(Box<SchedulePutArgs>),
    /// List the schedules
    List,
    /// Show a schedule, its next runs and its last tick
    Get { id: String },
    /// Delete a schedule (the jobs it pushed stay)
    Delete { id: String },
    /// Stop a schedule's ticks until it is resumed
    Pause { id: String },
    /// Start a paused schedule's ticks again, from now on
    Resume { id: String },
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("rule").required(true).args(["cron", "every"])))]
pub struct SchedulePutArgs {
    pub id: String,
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with
    /// seconds first; names (MON-FRI, JAN); @hourly, @daily, @weekly, @monthly
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// A fixed interval instead of --cron (at least 1s)
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub every: Option<u64>,
    /// The IANA time zone of --cron [server default: UTC]
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// No tick before this Unix time in milliseconds
    #[arg(long, value_name = "MS")]
    pub start_at: Option<u64>,
    /// No tick after this Unix time in milliseconds
    #[arg(long, value_name = "MS")]
    pub end_at: Option<u64>,
    /// Ticks missed while no instance could fire them: latest, none or all [server default:
    /// latest]
    #[arg(long, value_parser = ["latest", "none", "all"], value_name = "POLICY")]
    pub catch_up: Option<String>,
    /// skip: no job for a tick while the previous tick's job still exists [server default:
    /// allow]
    #[arg(long, value_parser = ["allow", "skip"], value_name = "POLICY")]
    pub overlap: Option<String>,
    /// Create it paused
    #[arg(long)]
    pub paused: bool,
    /// The job each tick pushes
    #[command(flatten)]
    pub job: JobArgs,
}

#[derive(Debug, Args)]
pub struct ReserveArgs {
    /// Topics to reserve from, preferred in this order (a,b or repeated)
    #[arg(long, required = true, value_delimiter = ',', value_name = "TOPICS")]
    pub topic: Vec<String>,
    /// Most jobs to reserve
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub max: u32,
    /// How long to wait when no job is ready (0: do not wait)
    #[arg(long, value_parser = duration, default_value = "0", value_name = "DURATION")]
    pub timeout: u64,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("due").required(true).args(["delay", "run_at"])))]
pub struct RescheduleArgs {
    pub id: String,
    /// Due this long from now
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub delay: Option<u64>,
    /// Due at this Unix time in milliseconds
    #[arg(long, value_name = "MS")]
    pub run_at: Option<u64>,
    /// Replace the body
    #[arg(long)]
    pub body: Option<String>,
    /// Change the priority
    #[arg(long, value_name = "N")]
    pub priority: Option<u32>,
}

/// clap value parser for durations, with `delayq::job::parse_duration_ms`'s syntax.
fn duration(s: &str) -> Result<u64, String> {
    delayq::job::parse_duration_ms(s).ok_or_else(|| {
        format!("{s:?} is not a duration (use e.g. 15s, 3m, 1h, 2d, 250ms, or milliseconds)")
    })
}

/// The command line, parsed, with clap's usage errors, `--help` and `--version` handled (printed;
/// exit 2 or 0).
pub fn parse() -> Cli {
    use clap::FromArgMatches as _;
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The command line's definition. The client's options (`--server`, `--token`, `--json`) are
/// global, so they may follow any verb, but `serve --help` does not list them: the server
/// does not read them. `serve` has hidden options of the same names instead (clap does not
/// give a subcommand a global option it defines itself).
fn command() -> clap::Command {
    use clap::{Arg, ArgAction, CommandFactory as _};
    Cli::command().mut_subcommand("serve", |serve| {
        serve
            .arg(Arg::new("server").long("server").hide(true))
            .arg(Arg::new("token").long("token").hide(true))
            .arg(
                Arg::new("json")
                    .long("json")
                    .action(ArgAction::SetTrue)
                    .hide(true),
            )
    })
}

/// A parsed command line, as main runs it: `serve` with its settings already resolved (main
/// sizes the runtime by one of them, `worker_threads`), or any other verb.
pub enum Launch {
    Serve(Box<Config>),
    Other(Box<Cli>),
}

/// Resolves `serve`'s settings (flags, `DELAYQ_*` variables, the file; `Err` for a bad one);
/// any other verb goes on as parsed.
pub fn launch(cli: Cli) -> anyhow::Result<Launch> {
    Ok(match cli.command {
        Command::Serve(args) => Launch::Serve(Box::new(Config::from_args(*args)?)),
        _ => Launch::Other(Box::new(cli)),
    })
}

/// Runs a command line. Failures of a whole verb come back as `Err` (main prints them and
/// exits 1); a verb over several ids prints each failure itself and returns exit code 1.
pub async fn run(launch: Launch) -> anyhow::Result<ExitCode> {
    let Cli {
        server,
        token,
        json,
        command,
    } = match launch {
        Launch::Serve(config) => return serve(*config).await.map(|()| ExitCode::SUCCESS),
        Launch::Other(cli) => *cli,
    };
    match command {
        Command::Completions { shell } => {
            let mut script = Vec::new();
            completions(shell, &mut script);
            return print_all(&script).map(|()| ExitCode::SUCCESS);
        }
        Command::Man { dir } => return man(dir).map(|()| ExitCode::SUCCESS),
        _ => {}
    }
    let mut client = Client::new(&server)?;
    if let Some(token) = token {
        client = client.with_token(token.as_str());
    }
    run_client(&client, json, command)
        .await
        .map_err(|e| with_hint(e, &server))
}

/// `e`, with what to do next when it is that no server answers at `server`.
fn with_hint(e: anyhow::Error, server: &str) -> anyhow::Error {
    match e.downcast_ref::<ClientError>() {
        Some(ClientError::Connect { .. }) => anyhow::anyhow!(
            "{e} (no delayq server at {server}: start one with `delayq serve`, or name yours \
             with --server URL or DELAYQ_SERVER)"
        ),
        _ => e,
    }
}

/// The client verbs: one or a few calls, then the answer printed.
async fn run_client(client: &Client, json: bool, command: Command) -> anyhow::Result<ExitCode> {
    let out = Output { json };
    match command {
        Command::Serve(_) | Command::Completions { .. } | Command::Man { .. } => {
            unreachable!("handled by launch and run")
        }
        Command::Push(args) => {
            let job = client.push(new_job(args)?).await?;
            out.print(&job, || {
                format!(
                    "pushed {}: {}\n",
                    job.id,
                    output::state_summary(&job, now_ms())
                )
            });
        }
        Command::Reserve(args) => {
            let jobs = client.reserve(&args.topic, args.max, args.timeout).await?;
            out.print(&serde_json::json!({ "jobs": jobs }), || {
                jobs.iter()
                    .map(|j| output::format_job(j, now_ms()))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            if jobs.is_empty() && !json {
                eprintln!(
                    "no job became ready within {}",
                    output::format_duration_ms(args.timeout)
                );
            }
        }
        Command::Finish { ids } => {
            let mut result = FinishResult::default();
            for chunk in ids.chunks(FINISH_CHUNK) {
                let r = client.finish_batch(chunk.iter().cloned()).await?;
                result.finished += r.finished;
                result.missing.extend(r.missing);
            }
            out.print(&result, || format!("finished {}\n", result.finished));
            if !result.missing.is_empty() {
                eprintln!(
                    "error: {} not found: {}",
                    if result.missing.len() == 1 {
                        "job"
                    } else {
                        "jobs"
                    },
                    result.missing.join(", ")
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Delete { ids } => {
            let mut failed = false;
            for id in &ids {
                match client.delete(id).await {
                    Ok(()) if !json => println!("deleted {id}"),
                    Ok(()) => {}
                    Err(e) => {
                        eprintln!("error: {id}: {e}");
                        failed = true;
                    }
                }
            }
            if failed {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Get { id } => {
            let job = client.get(&id).await?;
            out.print(&job, || output::format_job(&job, now_ms()));
        }
        Command::Stats => {
            let stats = client.stats().await?;
            out.print(&stats, || output::format_stats(&stats, now_ms()));
        }
        Command::Release { id, delay } => {
            let job = client.release(&id, delay).await?;
            out.print_transition("released", &job);
        }
        Command::Touch { id } => {
            let job = client.touch(&id).await?;
            out.print_transition("touched", &job);
        }
        Command::Bury { id } => {
            let job = client.bury(&id).await?;
            out.print_transition("buried", &job);
        }
        Command::Kick { id } => {
            let job = client.kick(&id).await?;
            out.print_transition("kicked", &job);
        }
        Command::Backup { dir } => {
            let r = client.backup(&dir).await?;
            out.print(&r, || {
                format!(
                    "backed up {} jobs and {} schedules into {} ({} bytes, {} ms)\n",
                    r.jobs, r.schedules, r.dir, r.bytes, r.took_ms
                )
            });
        }
        Command::Restore { skip_overdue, id } => {
            let r = client.restore(skip_overdue, id.as_deref()).await?;
            out.print(&r, || {
                format!(
                    "restored {}, already present {}, skipped overdue {}, skipped finished {}; \
                     schedules restored {}, already present {}; topic settings restored {}, \
                     already present {}\n",
                    r.restored,
                    r.already_present,
                    r.skipped_overdue,
                    r.skipped_finished,
                    r.schedules_restored,
                    r.schedules_already_present,
                    r.settings_restored,
                    r.settings_already_present
                )
            });
        }
        Command::KickTopic { topic, max } => {
            let kicked = client.kick_topic(&topic, max).await?;
            out.print(&serde_json::json!({ "kicked": kicked }), || {
                format!("kicked {kicked} dead jobs of {topic}\n")
            });
        }
        Command::Topic(cmd) => {
            let (topic, change) = match cmd {
                TopicCommand::Show { topic } => {
                    let s = client.settings(&topic).await?;
                    out.print(&s, || output::format_settings(&topic, &s));
                    return Ok(ExitCode::SUCCESS);
                }
                TopicCommand::Pause { topic } => (
                    topic,
                    SettingsChange {
                        paused: Some(true),
                        ..SettingsChange::default()
                    },
                ),
                TopicCommand::Resume { topic } => (
                    topic,
                    SettingsChange {
                        paused: Some(false),
                        ..SettingsChange::default()
                    },
                ),
                TopicCommand::Limit(a) => {
                    let change = SettingsChange {
                        paused: None,
                        rate_per_s: if a.no_rate {
                            Some(None)
                        } else {
                            a.rate.map(Some)
                        },
                        burst: a.burst.map(Some),
                        max_in_flight: if a.no_max_in_flight {
                            Some(None)
                        } else {
                            a.max_in_flight.map(Some)
                        },
                    };
                    (a.topic, change)
                }
            };
            let s = client.set_settings(&topic, &change).await?;
            out.print(&s, || output::format_settings(&topic, &s));
        }
        Command::Schedule(cmd) => return schedule(client, &out, cmd).await,
        Command::Reschedule(args) => {
            let mut change = match (args.delay, args.run_at) {
                (Some(delay), _) => Reschedule::delay_ms(delay),
                (None, Some(run_at)) => Reschedule::run_at_ms(run_at),
                (None, None) => unreachable!("clap requires --delay or --run-at"),
            };
            change.body = args.body;
            change.priority = args.priority;
            let (job, previous_state) = client.reschedule(&args.id, change).await?;
            let answer = Rescheduled {
                job,
                previous_state,
            };
            out.print(&answer, || {
                format!(
                    "rescheduled {}: {} (was {})\n",
                    answer.job.id,
                    output::state_summary(&answer.job, now_ms()),
                    answer.previous_state
                )
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The `schedule` verbs.
async fn schedule(client: &Client, out: &Output, cmd: ScheduleCommand) -> anyhow::Result<ExitCode> {
    let shown = |s: &Schedule| out.print(s, || output::format_schedule(s, now_ms()));
    match cmd {
        ScheduleCommand::Put(args) => {
            let id = args.id.clone();
            let schedule = new_schedule(*args)?;
            shown(&client.put_schedule(&id, &schedule).await?);
        }
        ScheduleCommand::List => {
            let mut all = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let page = client.list_schedules(1000, cursor.as_deref()).await?;
                all.extend(page.schedules);
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            out.print(&serde_json::json!({ "schedules": all }), || {
                all.iter()
                    .map(|s| output::format_schedule(s, now_ms()))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        ScheduleCommand::Get { id } => shown(&client.get_schedule(&id).await?),
        ScheduleCommand::Delete { id } => {
            client.delete_schedule(&id).await?;
            if !out.json {
                println!("deleted schedule {id}");
            }
        }
        ScheduleCommand::Pause { id } => shown(&client.pause_schedule(&id).await?),
        ScheduleCommand::Resume { id } => shown(&client.resume_schedule(&id).await?),
    }
    Ok(ExitCode::SUCCESS)
}

/// The schedule `delayq schedule put` sends: its job built as `push` builds one.
fn new_schedule(args: SchedulePutArgs) -> anyhow::Result<NewSchedule> {
    let job = job_of(args.job)?;
    Ok(NewSchedule {
        cron: args.cron,
        every_ms: args.every,
        tz: args.tz,
        job,
        start_at_ms: args.start_at,
        end_at_ms: args.end_at,
        catch_up: args.catch_up,
        overlap: args.overlap,
        paused: args.paused,
    })
}

/// How to print an answer: the server's JSON shape on one line, or text.
struct Output {
    json: bool,
}

impl Output {
    fn print<T: Serialize>(&self, value: &T, text: impl FnOnce() -> String) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string(value).expect("API types serialise")
            );
        } else {
            print!("{}", text());
        }
    }

    fn print_transition(&self, verb: &str, job: &Job) {
        self.print(job, || {
            format!(
                "{verb} {}: {}\n",
                job.id,
                output::state_summary(job, now_ms())
            )
        });
    }
}

/// The job `delayq push` sends: [`job_of`] its job flags, with its id, due time and
/// replacement.
fn new_job(args: PushArgs) -> anyhow::Result<NewJob> {
    let mut job = job_of(args.job)?.replace(args.replace);
    job.id = args.id;
    job.delay_ms = args.delay;
    job.run_at_ms = args.run_at;
    Ok(job)
}

/// A job made of its flags, with its body from the argument, a file or stdin; only what was
/// given is set, so the server's defaults apply to the rest.
fn job_of(args: JobArgs) -> anyhow::Result<NewJob> {
    let body = match (args.body.as_deref(), &args.body_file) {
        (Some("-"), _) => {
            let mut body = String::new();
            std::io::stdin()
                .read_to_string(&mut body)
                .context("cannot read the body from stdin (it must be UTF-8)")?;
            body
        }
        (Some(body), _) => body.to_string(),
        (None, Some(path)) => std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the body from {} (it must be UTF-8)",
                path.display()
            )
        })?,
        (None, None) => String::new(),
    };
    let mut job = NewJob::new(args.topic, body);
    job.ttr_ms = args.ttr;
    job.priority = args.priority;
    job.max_attempts = args.max_attempts;
    job.backoff_ms = args.backoff;
    if let Some(url) = args.callback {
        job = job.callback(url, args.callback_timeout);
    }
    Ok(job)
}

/// `delayq completions SHELL`: the shell's completion script for every verb and option.
fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut command(), "delayq", out);
}

/// `delayq man`: delayq(1) on stdout, or with `dir` delayq.1 and a page per verb there
/// (delayq-serve.1 lists every setting).
fn man(dir: Option<PathBuf>) -> anyhow::Result<()> {
    // No page for `help`, which only repeats the others. Built (as `generate_to` does), so that
    // the version and the global options reach every page as they reach `--help`.
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    match dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .context("cannot render the manual page")?;
            print_all(&page)
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("cannot write the manual pages to {}", dir.display()))
        }
    }
}

/// Writes `bytes` to stdout. A reader that stopped reading (`| head`) is not an error.
fn print_all(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to stdout")
        }
        _ => Ok(()),
    }
}

/// `delayq serve`: settings, logging, then the server until it stops.
async fn serve(config: Config) -> anyhow::Result<()> {
    init_tracing(config.log_format)?;
    delayq::server::serve(config).await.context("server failed")
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as text or one JSON object per line
/// (`log_format`). A `RUST_LOG` that does not parse is an error rather than silently ignored.
/// The AMQP client's log of returned messages is always off: it shows their bodies (delayq logs
/// the return itself, without the body).
fn init_tracing(format: LogFormat) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        // The parse error repeats itself as its own source: print it once, not as a chain.
        Ok(spec) => EnvFilter::try_new(&spec)
            .map_err(|e| anyhow::anyhow!("invalid RUST_LOG {spec:?}: {e}"))?,
        Err(std::env::VarError::NotPresent) => EnvFilter::new("info"),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("RUST_LOG is not UTF-8"),
    };
    let filter = filter.add_directive(
        "lapin::returned_messages=off"
            .parse()
            .map_err(|e| anyhow::anyhow!("log filter: {e}"))?,
    );
    use std::io::IsTerminal as _;
    let colour = log_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => logs.with_ansi(colour).try_init(),
        // The event's fields (`message` among them) at the top level of each object, beside
        // `timestamp`, `level`, `target` and the spans it happened in.
        LogFormat::Json => logs.json().flatten_event(true).with_ansi(false).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// Whether log lines are coloured: only on a terminal (a log file or a journal gets plain
/// text), and never when `NO_COLOR` is set to anything but the empty string (no-color.org).
fn log_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("delayq").chain(args.iter().copied()))
    }

    fn command(args: &[&str]) -> Command {
        parse(args).unwrap().command
    }

    #[test]
    fn cli_definition_is_consistent() {
        super::command().debug_assert();
    }

    #[test]
    fn serve_help_lists_no_client_option() {
        let mut cli = super::command();
        // As parsing does: global options reach the subcommands when the command is built.
        cli.build();
        let help = cli
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("--listen"), "{help}");
        for client_only in ["--server", "--token ", "--json", "DELAYQ_SERVER"] {
            assert!(!help.contains(client_only), "{client_only} in: {help}");
        }
        // The client verbs still list them.
        let push = cli
            .find_subcommand_mut("push")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(
            push.contains("--server") && push.contains("--json"),
            "{push}"
        );
    }

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(log_colour(true, None));
        assert!(!log_colour(false, None), "a file or a pipe");
        assert!(!log_colour(true, Some(OsStr::new("1"))));
        assert!(
            log_colour(true, Some(OsStr::new(""))),
            "empty NO_COLOR is unset"
        );
    }

    #[test]
    fn server_and_json_are_global_with_a_default_server() {
        let cli = parse(&["stats"]).unwrap();
        // DELAYQ_SERVER may be set where the tests run; the flag always wins over it.
        if std::env::var_os("DELAYQ_SERVER").is_none() {
            assert_eq!(cli.server, DEFAULT_SERVER);
        }
        assert!(!cli.json);
        let cli = parse(&["get", "j1", "--server", "http://q:1", "--json"]).unwrap();
        assert_eq!(cli.server, "http://q:1");
        assert!(cli.json);
    }

    #[test]
    fn token_is_global_and_hidden_from_debug() {
        let cli = parse(&["stats", "--token", "tok-0123456789abcdef"]).unwrap();
        assert_eq!(
            cli.token.as_ref().map(AuthToken::as_str),
            Some("tok-0123456789abcdef")
        );
        assert!(!format!("{cli:?}").contains("tok-0123456789abcdef"));
    }

    #[test]
    fn push_takes_every_job_field_with_durations() {
        let Command::Push(p) = command(&[
            "push",
            "--topic=orders",
            "--id=o-42",
            "--delay=15s",
            "--ttr=1m",
            "--priority=0",
            "--max-attempts=3",
            "--backoff=15s,3m,10m",
            "--replace",
            r#"{"order":42}"#,
        ]) else {
            panic!("not push");
        };
        assert_eq!(p.delay, Some(15_000));
        assert_eq!(p.job.ttr, Some(60_000));
        assert_eq!(p.job.backoff, Some(vec![15_000, 180_000, 600_000]));
        assert_eq!(p.job.body.as_deref(), Some(r#"{"order":42}"#));
        let job = new_job(p).unwrap();
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            serde_json::json!({
                "topic": "orders", "id": "o-42", "body": "{\"order\":42}", "delay_ms": 15000,
                "ttr_ms": 60000, "priority": 0, "max_attempts": 3,
                "backoff_ms": [15000, 180000, 600000], "replace": true
            })
        );
    }

    #[test]
    fn push_with_a_callback_sends_it() {
        let Command::Push(p) = command(&[
            "push",
            "--topic=orders",
            "--callback=https://hooks.example.com/due",
            "--callback-timeout=10s",
        ]) else {
            panic!("not push");
        };
        let job = new_job(p).unwrap();
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            serde_json::json!({
                "topic": "orders", "body": "",
                "callback": {"url": "https://hooks.example.com/due", "timeout_ms": 10000}
            })
        );
        let Command::Push(p) = command(&["push", "--topic=o", "--callback=https://h.example/"])
        else {
            panic!("not push");
        };
        let job = serde_json::to_value(new_job(p).unwrap()).unwrap();
        assert_eq!(
            job["callback"],
            serde_json::json!({"url": "https://h.example/"})
        );
    }

    #[test]
    fn push_without_options_leaves_them_to_the_server() {
        let Command::Push(p) = command(&["push", "--topic", "t"]) else {
            panic!("not push");
        };
        assert_eq!(
            serde_json::to_value(new_job(p).unwrap()).unwrap(),
            serde_json::json!({"topic": "t", "body": ""})
        );
    }

    #[test]
    fn push_reads_the_body_from_a_file() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, b"from file\n").unwrap();
        let Command::Push(p) = command(&[
            "push",
            "--topic=t",
            "--body-file",
            f.path().to_str().unwrap(),
        ]) else {
            panic!("not push");
        };
        assert_eq!(new_job(p).unwrap().body, "from file\n");
    }

    #[test]
    fn push_accepts_dash_as_the_stdin_body() {
        let Command::Push(p) = command(&["push", "--topic=t", "-"]) else {
            panic!("not push");
        };
        assert_eq!(p.job.body.as_deref(), Some("-"));
    }

    #[test]
    fn push_refuses_contradictions_and_bad_durations() {
        for args in [
            &["push", "--topic=t", "--delay=1s", "--run-at=5"][..],
            &["push", "--topic=t", "--body-file=f", "body"],
            &["push", "--topic=t", "--delay=soon"],
            &["push", "--topic=t", "--backoff=1s,x"],
            &["push", "--topic=t", "--priority=-1"],
            &["push", "body-without-topic"],
        ] {
            assert!(parse(args).is_err(), "{args:?} should be refused");
        }
        let e = parse(&["push", "--topic=t", "--ttr=1y"]).unwrap_err();
        assert!(e.to_string().contains("not a duration"), "{e}");
    }

    #[test]
    fn reserve_splits_topics_and_parses_the_timeout() {
        let Command::Reserve(r) = command(&["reserve", "--topic", "a,b", "--timeout", "30s"])
        else {
            panic!("not reserve");
        };
        assert_eq!(r.topic, ["a", "b"]);
        assert_eq!((r.max, r.timeout), (1, 30_000));
        let Command::Reserve(r) = command(&["reserve", "--topic=a", "--topic=b", "--max=5"]) else {
            panic!("not reserve");
        };
        assert_eq!(r.topic, ["a", "b"]);
        assert_eq!((r.max, r.timeout), (5, 0));
        assert!(parse(&["reserve"]).is_err(), "a topic is required");
    }

    #[test]
    fn finish_and_delete_take_one_or_more_ids() {
        let Command::Finish { ids } = command(&["finish", "a", "b"]) else {
            panic!("not finish");
        };
        assert_eq!(ids, ["a", "b"]);
        let Command::Delete { ids } = command(&["delete", "a"]) else {
            panic!("not delete");
        };
        assert_eq!(ids, ["a"]);
        assert!(parse(&["finish"]).is_err());
        assert!(parse(&["delete"]).is_err());
    }

    #[test]
    fn single_job_verbs_take_an_id() {
        assert!(matches!(command(&["get", "j"]), Command::Get { id } if id == "j"));
        assert!(matches!(command(&["touch", "j"]), Command::Touch { id } if id == "j"));
        assert!(matches!(command(&["bury", "j"]), Command::Bury { id } if id == "j"));
        assert!(matches!(command(&["kick", "j"]), Command::Kick { id } if id == "j"));
        assert!(matches!(
            command(&["release", "j", "--delay", "5s"]),
            Command::Release { id, delay: Some(5000) } if id == "j"
        ));
        assert!(matches!(
            command(&["release", "j"]),
            Command::Release { delay: None, .. }
        ));
        assert!(parse(&["get"]).is_err());
    }

    #[test]
    fn kick_topic_defaults_to_100() {
        assert!(matches!(
            command(&["kick-topic", "orders"]),
            Command::KickTopic { topic, max: 100 } if topic == "orders"
        ));
        assert!(matches!(
            command(&["kick-topic", "orders", "--max", "7"]),
            Command::KickTopic { max: 7, .. }
        ));
    }

    #[test]
    fn backup_takes_the_directory() {
        assert!(matches!(
            command(&["backup", "nightly/2026-11-26"]),
            Command::Backup { dir } if dir == "nightly/2026-11-26"
        ));
        assert!(parse(&["backup"]).is_err());
    }

    #[test]
    fn restore_fires_overdue_jobs_unless_told_to_skip_them() {
        assert!(matches!(
            command(&["restore"]),
            Command::Restore {
                skip_overdue: false,
                id: None
            }
        ));
        assert!(matches!(
            command(&["restore", "--skip-overdue", "--id", "j"]),
            Command::Restore { skip_overdue: true, id: Some(id) } if id == "j"
        ));
    }

    #[test]
    fn reschedule_needs_exactly_one_due_time() {
        let Command::Reschedule(r) =
            command(&["reschedule", "j", "--delay=1m", "--body=b", "--priority=3"])
        else {
            panic!("not reschedule");
        };
        assert_eq!(
            (r.delay, r.run_at, r.body.as_deref(), r.priority),
            (Some(60_000), None, Some("b"), Some(3))
        );
        assert!(matches!(
            command(&["reschedule", "j", "--run-at", "1767225600000"]),
            Command::Reschedule(RescheduleArgs {
                run_at: Some(1_767_225_600_000),
                ..
            })
        ));
        assert!(parse(&["reschedule", "j"]).is_err());
        assert!(parse(&["reschedule", "j", "--delay=1s", "--run-at=5"]).is_err());
    }

    #[test]
    fn serve_takes_the_config_flags() {
        let Command::Serve(args) = command(&["serve", "--listen", "0.0.0.0:9277", "--shards=4"])
        else {
            panic!("not serve");
        };
        assert_eq!(args.listen.as_deref(), Some("0.0.0.0:9277"));
        assert_eq!(args.shards, Some(4));
    }

    #[test]
    fn completions_offer_every_verb_and_the_settings_of_serve() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            completions(shell, &mut out);
            let script = String::from_utf8(out).unwrap();
            for word in [
                "serve",
                "push",
                "reserve",
                "schedule",
                "listen",
                "log-format",
            ] {
                assert!(script.contains(word), "{shell}: no {word}");
            }
        }
        // The bash script is valid bash.
        let mut out = Vec::new();
        completions(clap_complete::Shell::Bash, &mut out);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delayq.bash");
        std::fs::write(&path, out).unwrap();
        let status = std::process::Command::new("bash")
            .arg("-n")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn man_writes_a_page_per_verb_with_its_options() {
        let dir = tempfile::tempdir().unwrap();
        man(Some(dir.path().join("man"))).unwrap();
        let page = |name: &str| std::fs::read_to_string(dir.path().join("man").join(name)).unwrap();
        let main = page("delayq.1");
        assert!(main.contains(".TH delayq 1"), "{main}");
        assert!(
            main.contains("delayq\\-serve(1)") || main.contains("serve"),
            "{main}"
        );
        let serve = page("delayq-serve.1");
        for option in ["listen", "data\\-dir", "DELAYQ_LISTEN", "log\\-format"] {
            assert!(serve.contains(option), "no {option} in {serve}");
        }
        assert!(page("delayq-push.1").contains("topic"));
        assert!(page("delayq-topic-pause.1").contains("topic"));
        let help_pages = std::fs::read_dir(dir.path().join("man"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains("help")
            })
            .count();
        assert_eq!(help_pages, 0);
    }

    #[test]
    fn version_flag_prints_the_version() {
        let e = parse(&["--version"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
        let printed = e.to_string();
        let expected = format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("DELAYQ_COMMIT"));
        assert!(printed.contains(&expected), "{printed}");
    }
}
