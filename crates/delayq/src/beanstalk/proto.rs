//! The beanstalkd protocol's text, without I/O: a command line into a [`Command`] (or the
//! error beanstalkd's doc/protocol.txt gives for it), and a [`Reply`] into the bytes sent back.
//! The YAML of the `stats*` and `list-tubes*` replies is written here too ([`Yaml`]).
//!
//! Not here: reading lines and bodies off a connection, and what a command does (`conn.rs`).

use crate::job::Topic;

/// Longest command line, `\r\n` included (beanstalkd's `LINE_BUF_SIZE`): room for a tube
/// name of [`MAX_TUBE_BYTES`] and the longest command.
pub const MAX_LINE: usize = 224;
/// Longest tube name in bytes, as beanstalkd allows. delayq's topics allow fewer characters
/// (`job::MAX_TOPIC_CHARS`): a longer name is refused with `BAD_FORMAT`.
pub const MAX_TUBE_BYTES: usize = 200;

/// One command, its arguments checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `put <pri> <delay> <ttr> <bytes>`; the body follows.
    Put {
        pri: u32,
        delay_s: u32,
        ttr_s: u32,
        bytes: u64,
    },
    Use(Topic),
    Reserve,
    ReserveWithTimeout(u32),
    ReserveJob(u64),
    Delete(u64),
    Release {
        id: u64,
        pri: u32,
        delay_s: u32,
    },
    Bury {
        id: u64,
        pri: u32,
    },
    Touch(u64),
    Watch(Topic),
    Ignore(Topic),
    Peek(u64),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick(u32),
    KickJob(u64),
    StatsJob(u64),
    StatsTube(Topic),
    Stats,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube(Topic, u32),
    Quit,
}

/// Why a command line was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineError {
    /// A known command with arguments missing, extra or malformed: `BAD_FORMAT`.
    BadFormat,
    /// `UNKNOWN_COMMAND`.
    UnknownCommand,
}

impl LineError {
    pub fn reply(self) -> Reply {
        match self {
            LineError::BadFormat => Reply::Word(BAD_FORMAT),
            LineError::UnknownCommand => Reply::Word(UNKNOWN_COMMAND),
        }
    }
}

/// The commands' names, as counted in `stats` (`cmd-<name>`), in beanstalkd's order.
pub const COMMAND_NAMES: [&str; 25] = [
    "put",
    "peek",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "reserve",
    "reserve-with-timeout",
    "delete",
    "release",
    "use",
    "watch",
    "ignore",
    "bury",
    "kick",
    "touch",
    "stats",
    "stats-job",
    "stats-tube",
    "list-tubes",
    "list-tube-used",
    "list-tubes-watched",
    "pause-tube",
    "kick-job",
    "reserve-job",
    "quit",
];

impl Command {
    /// Its index in [`COMMAND_NAMES`].
    pub fn counter(&self) -> usize {
        match self {
            Command::Put { .. } => 0,
            Command::Peek(_) => 1,
            Command::PeekReady => 2,
            Command::PeekDelayed => 3,
            Command::PeekBuried => 4,
            Command::Reserve => 5,
            Command::ReserveWithTimeout(_) => 6,
            Command::Delete(_) => 7,
            Command::Release { .. } => 8,
            Command::Use(_) => 9,
            Command::Watch(_) => 10,
            Command::Ignore(_) => 11,
            Command::Bury { .. } => 12,
            Command::Kick(_) => 13,
            Command::Touch(_) => 14,
            Command::Stats => 15,
            Command::StatsJob(_) => 16,
            Command::StatsTube(_) => 17,
            Command::ListTubes => 18,
            Command::ListTubeUsed => 19,
            Command::ListTubesWatched => 20,
            Command::PauseTube(..) => 21,
            Command::KickJob(_) => 22,
            Command::ReserveJob(_) => 23,
            Command::Quit => 24,
        }
    }
}

/// Parses a command line, its `\r\n` taken off.
pub fn parse(line: &[u8]) -> Result<Command, LineError> {
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let name = words.next().ok_or(LineError::UnknownCommand)?;
    // No command takes more than 4 arguments: a fifth is counted, never kept.
    let mut args: [&[u8]; 4] = [&[]; 4];
    let mut count = 0;
    for w in words {
        if let Some(slot) = args.get_mut(count) {
            *slot = w;
        }
        count += 1;
    }
    let n = |want: usize| {
        if count == want {
            Ok(())
        } else {
            Err(LineError::BadFormat)
        }
    };
    let cmd = match name {
        b"put" => {
            n(4)?;
            Command::Put {
                pri: int(args[0])?,
                delay_s: int(args[1])?,
                ttr_s: int(args[2])?,
                bytes: int(args[3])?,
            }
        }
        b"use" => {
            n(1)?;
            Command::Use(tube(args[0])?)
        }
        b"reserve" => {
            n(0)?;
            Command::Reserve
        }
        b"reserve-with-timeout" => {
            n(1)?;
            Command::ReserveWithTimeout(int(args[0])?)
        }
        b"reserve-job" => {
            n(1)?;
            Command::ReserveJob(int(args[0])?)
        }
        b"delete" => {
            n(1)?;
            Command::Delete(int(args[0])?)
        }
        b"release" => {
            n(3)?;
            Command::Release {
                id: int(args[0])?,
                pri: int(args[1])?,
                delay_s: int(args[2])?,
            }
        }
        b"bury" => {
            n(2)?;
            Command::Bury {
                id: int(args[0])?,
                pri: int(args[1])?,
            }
        }
        b"touch" => {
            n(1)?;
            Command::Touch(int(args[0])?)
        }
        b"watch" => {
            n(1)?;
            Command::Watch(tube(args[0])?)
        }
        b"ignore" => {
            n(1)?;
            Command::Ignore(tube(args[0])?)
        }
        b"peek" => {
            n(1)?;
            Command::Peek(int(args[0])?)
        }
        b"peek-ready" => {
            n(0)?;
            Command::PeekReady
        }
        b"peek-delayed" => {
            n(0)?;
            Command::PeekDelayed
        }
        b"peek-buried" => {
            n(0)?;
            Command::PeekBuried
        }
        b"kick" => {
            n(1)?;
            Command::Kick(int(args[0])?)
        }
        b"kick-job" => {
            n(1)?;
            Command::KickJob(int(args[0])?)
        }
        b"stats-job" => {
            n(1)?;
            Command::StatsJob(int(args[0])?)
        }
        b"stats-tube" => {
            n(1)?;
            Command::StatsTube(tube(args[0])?)
        }
        b"stats" => {
            n(0)?;
            Command::Stats
        }
        b"list-tubes" => {
            n(0)?;
            Command::ListTubes
        }
        b"list-tube-used" => {
            n(0)?;
            Command::ListTubeUsed
        }
        b"list-tubes-watched" => {
            n(0)?;
            Command::ListTubesWatched
        }
        b"pause-tube" => {
            n(2)?;
            Command::PauseTube(tube(args[0])?, int(args[1])?)
        }
        b"quit" => {
            n(0)?;
            Command::Quit
        }
        _ => return Err(LineError::UnknownCommand),
    };
    Ok(cmd)
}

/// A decimal integer of the protocol: digits only, within the type.
fn int<T: TryFrom<u64>>(word: &[u8]) -> Result<T, LineError> {
    if word.is_empty() {
        return Err(LineError::BadFormat);
    }
    let mut n = 0u64;
    for &b in word {
        if !b.is_ascii_digit() {
            return Err(LineError::BadFormat);
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .ok_or(LineError::BadFormat)?;
    }
    T::try_from(n).map_err(|_| LineError::BadFormat)
}

/// A tube name: beanstalkd's characters (letters, digits, `-+/;.$_()`), not starting with a
/// hyphen, at most [`MAX_TUBE_BYTES`], and a valid topic.
pub fn tube(word: &[u8]) -> Result<Topic, LineError> {
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(b);
    if word.is_empty()
        || word.len() > MAX_TUBE_BYTES
        || word[0] == b'-'
        || !word.iter().all(allowed)
    {
        return Err(LineError::BadFormat);
    }
    let name = std::str::from_utf8(word).map_err(|_| LineError::BadFormat)?;
    Topic::parse(name).map_err(|_| LineError::BadFormat)
}

pub const OUT_OF_MEMORY: &str = "OUT_OF_MEMORY";
pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";
pub const BAD_FORMAT: &str = "BAD_FORMAT";
pub const UNKNOWN_COMMAND: &str = "UNKNOWN_COMMAND";
pub const EXPECTED_CRLF: &str = "EXPECTED_CRLF";
pub const JOB_TOO_BIG: &str = "JOB_TOO_BIG";
pub const DRAINING: &str = "DRAINING";
pub const DEADLINE_SOON: &str = "DEADLINE_SOON";
pub const TIMED_OUT: &str = "TIMED_OUT";
pub const NOT_FOUND: &str = "NOT_FOUND";
pub const NOT_IGNORED: &str = "NOT_IGNORED";
pub const DELETED: &str = "DELETED";
pub const RELEASED: &str = "RELEASED";
pub const BURIED: &str = "BURIED";
pub const TOUCHED: &str = "TOUCHED";
pub const KICKED: &str = "KICKED";
pub const PAUSED: &str = "PAUSED";

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A word alone: `DELETED`, `NOT_FOUND`, an error, ...
    Word(&'static str),
    /// A word and a number: `INSERTED <id>`, `WATCHING <count>`, `KICKED <count>`.
    Number(&'static str, u64),
    /// `USING <tube>`.
    Using(Topic),
    /// `RESERVED <id> <bytes>` or `FOUND <id> <bytes>`, and the body.
    Job {
        word: &'static str,
        id: u64,
        body: Vec<u8>,
    },
    /// `OK <bytes>` and a YAML document.
    Ok(Vec<u8>),
}

impl Reply {
    /// Appends the reply's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        // Every reply is on every job's path: numbers are written with itoa, not `fmt`.
        let mut digits = itoa::Buffer::new();
        match self {
            Reply::Word(w) => out.extend_from_slice(w.as_bytes()),
            Reply::Number(w, n) => {
                out.extend_from_slice(w.as_bytes());
                out.push(b' ');
                out.extend_from_slice(digits.format(*n).as_bytes());
            }
            Reply::Using(t) => {
                out.extend_from_slice(b"USING ");
                out.extend_from_slice(t.as_str().as_bytes());
            }
            Reply::Job { word, id, body } => {
                out.extend_from_slice(word.as_bytes());
                out.push(b' ');
                out.extend_from_slice(digits.format(*id).as_bytes());
                out.push(b' ');
                out.extend_from_slice(digits.format(body.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(body);
            }
            Reply::Ok(data) => {
                out.extend_from_slice(b"OK ");
                out.extend_from_slice(digits.format(data.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(data);
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A YAML document as beanstalkd writes it: `---`, then `key: value` or `- item` lines.
#[derive(Debug, Default)]
pub struct Yaml(Vec<u8>);

impl Yaml {
    pub fn new() -> Yaml {
        Yaml(b"---\n".to_vec())
    }

    /// `key: value` (a number, or a word beanstalkd leaves unquoted).
    pub fn field(mut self, key: &str, value: impl std::fmt::Display) -> Yaml {
        use std::io::Write;
        let _ = writeln!(self.0, "{key}: {value}");
        self
    }

    /// `key: "value"` (beanstalkd quotes `version`).
    pub fn quoted(mut self, key: &str, value: &str) -> Yaml {
        use std::io::Write;
        let _ = writeln!(self.0, "{key}: \"{value}\"");
        self
    }

    /// `- item`.
    pub fn item(mut self, item: impl std::fmt::Display) -> Yaml {
        use std::io::Write;
        let _ = writeln!(self.0, "- {item}");
        self
    }

    pub fn reply(self) -> Reply {
        Reply::Ok(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(s: &str) -> Topic {
        Topic::parse(s).unwrap()
    }

    fn encoded(r: Reply) -> String {
        let mut out = Vec::new();
        r.encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_command_of_the_protocol_parses() {
        let cases: Vec<(&str, Command)> = vec![
            (
                "put 1 2 3 4",
                Command::Put {
                    pri: 1,
                    delay_s: 2,
                    ttr_s: 3,
                    bytes: 4,
                },
            ),
            ("use emails", Command::Use(topic("emails"))),
            ("reserve", Command::Reserve),
            ("reserve-with-timeout 0", Command::ReserveWithTimeout(0)),
            ("reserve-job 7", Command::ReserveJob(7)),
            ("delete 7", Command::Delete(7)),
            (
                "release 7 9 3",
                Command::Release {
                    id: 7,
                    pri: 9,
                    delay_s: 3,
                },
            ),
            ("bury 7 9", Command::Bury { id: 7, pri: 9 }),
            ("touch 7", Command::Touch(7)),
            ("watch a-b", Command::Watch(topic("a-b"))),
            ("ignore default", Command::Ignore(topic("default"))),
            ("peek 18446744073709551615", Command::Peek(u64::MAX)),
            ("peek-ready", Command::PeekReady),
            ("peek-delayed", Command::PeekDelayed),
            ("peek-buried", Command::PeekBuried),
            ("kick 10", Command::Kick(10)),
            ("kick-job 7", Command::KickJob(7)),
            ("stats-job 7", Command::StatsJob(7)),
            ("stats-tube x(1)", Command::StatsTube(topic("x(1)"))),
            ("stats", Command::Stats),
            ("list-tubes", Command::ListTubes),
            ("list-tube-used", Command::ListTubeUsed),
            ("list-tubes-watched", Command::ListTubesWatched),
            ("pause-tube t 30", Command::PauseTube(topic("t"), 30)),
            ("quit", Command::Quit),
        ];
        let mut counters = std::collections::BTreeSet::new();
        for (line, want) in cases {
            let got = parse(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e:?}"));
            assert_eq!(got, want, "{line}");
            let name = line.split(' ').next().unwrap();
            assert_eq!(COMMAND_NAMES[got.counter()], name);
            counters.insert(got.counter());
        }
        assert_eq!(counters.len(), 25);
    }

    #[test]
    fn unknown_commands_and_empty_lines_are_unknown() {
        for line in [
            "",
            "   ",
            "PUT 1 2 3 4",
            "frobnicate",
            "stats-jobs 1",
            "peeks",
        ] {
            assert_eq!(
                parse(line.as_bytes()),
                Err(LineError::UnknownCommand),
                "{line:?}"
            );
        }
    }

    #[test]
    fn malformed_arguments_are_bad_format() {
        for line in [
            "put 1 2 3",
            "put 1 2 3 4 5",
            "put -1 0 0 1",
            "put 4294967296 0 1 1",
            "put a 0 1 1",
            "put 1 0 1 +1",
            "reserve now",
            "reserve-with-timeout",
            "reserve-with-timeout -1",
            "delete",
            "delete x",
            "delete 18446744073709551616",
            "release 1 2",
            "bury 1",
            "use",
            "use -tube",
            "use tube,x",
            "use tüb",
            "watch a*b",
            "stats extra",
            "peek",
            "kick",
            "pause-tube t",
            "quit now",
        ] {
            assert_eq!(
                parse(line.as_bytes()),
                Err(LineError::BadFormat),
                "{line:?}"
            );
        }
    }

    #[test]
    fn tube_names_follow_beanstalkd_and_the_topic_limit() {
        assert!(tube(b"Az09-+/;.$_()").is_ok());
        assert_eq!(tube(&[b'a'; 128]).unwrap().as_str().len(), 128);
        // beanstalkd allows 200 bytes; a topic has at most 128 characters.
        assert_eq!(tube(&[b'a'; 129]), Err(LineError::BadFormat));
        assert_eq!(tube(&[b'a'; 201]), Err(LineError::BadFormat));
        assert_eq!(tube(b""), Err(LineError::BadFormat));
    }

    #[test]
    fn replies_are_encoded_as_the_protocol_says() {
        assert_eq!(encoded(Reply::Word(NOT_FOUND)), "NOT_FOUND\r\n");
        assert_eq!(encoded(Reply::Number("INSERTED", 42)), "INSERTED 42\r\n");
        assert_eq!(encoded(Reply::Using(topic("t"))), "USING t\r\n");
        let job = Reply::Job {
            word: "RESERVED",
            id: 5,
            body: b"a\r\nb".to_vec(),
        };
        assert_eq!(encoded(job), "RESERVED 5 4\r\na\r\nb\r\n");
        let yaml = Yaml::new()
            .field("id", 5)
            .quoted("version", "1.0")
            .item("default");
        assert_eq!(
            encoded(yaml.reply()),
            "OK 35\r\n---\nid: 5\nversion: \"1.0\"\n- default\n\r\n"
        );
        assert_eq!(encoded(LineError::BadFormat.reply()), "BAD_FORMAT\r\n");
    }
}
