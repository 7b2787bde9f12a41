//! The machinery behind the `settings!` definitions in `config/mod.rs`. From one definition
//! per setting it derives the [`Config`](super::Config) struct and its `Default`, the clap
//! arguments of `delayq serve` ([`ServeArgs`](super::ServeArgs)), the keys the TOML file
//! accepts, the precedence flag > `DELAYQ_*` > file > default, and the [`Setting`]
//! descriptions that `--help` and the table of docs/operations.md show.
//!
//! It defines no setting and no value rule (those are in `mod.rs` and `rules.rs`), and knows
//! no rule between two settings (`Config::from_args` applies those).

use super::{AuthToken, ConfigError};
use clap::{Arg, ArgAction, ArgMatches};
use serde::de::DeserializeOwned;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Derives everything a setting needs from its definition (see `config/mod.rs` for the
/// grammar): `Config` and its `Default`, `ServeArgs` and its clap impls, `FileConfig` (the
/// TOML keys, unknown ones refused), `Values` (each setting's value and origin), `resolve`
/// (the precedence) and `settings()` (the descriptions).
///
/// `inputs` are settings read like the others whose value is not kept in `Config` as such:
/// `Config::from_args` folds them into a field. The expansion names `define` and
/// `ConfigError` as `config/mod.rs`, its one caller, sees them.
macro_rules! settings {
    (
        $(#[$config_doc:meta])*
        pub struct Config {
            $(
                $(#[$why:meta])*
                $field:ident: $ty:ty {
                    key: $key:ident,
                    flag: $flag:literal,
                    env: $env:literal,
                    value_name: $value_name:literal,
                    help: $help:literal,
                    given: $given:ty,
                    rule: $rule:expr,
                    $(shown: $shown:expr,)?
                    default: $default:expr $(,)?
                }
            ),* $(,)?
        }
        inputs {
            $(
                $(#[$input_why:meta])*
                $input:ident: $input_ty:ty {
                    flag: $input_flag:literal,
                    env: $input_env:literal,
                    value_name: $input_value_name:literal,
                    help: $input_help:literal,
                    given: $input_given:ty,
                    rule: $input_rule:expr $(,)?
                }
            ),* $(,)?
        }
    ) => {
        $(#[$config_doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Config {
            $(
                #[doc = $help]
                #[doc = ""]
                $(#[$why])*
                pub $field: $ty,
            )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $field: $default, )* }
            }
        }

        /// The flags of `delayq serve`, each also read from its `DELAYQ_*` variable (clap merges
        /// the two). `None` means "not given here": the TOML file or the default decides.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct ServeArgs {
            $(
                #[doc = $help]
                pub $key: Option<$given>,
            )*
            $(
                #[doc = $input_help]
                #[doc = ""]
                $(#[$input_why])*
                pub $input: Option<$input_given>,
            )*
            /// The TOML file with any of the other settings.
            pub config: Option<std::path::PathBuf>,
        }

        impl clap::Args for ServeArgs {
            fn augment_args(cmd: clap::Command) -> clap::Command {
                cmd.args(settings().iter().map(define::Setting::arg))
            }
            fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
                Self::augment_args(cmd)
            }
        }

        impl clap::FromArgMatches for ServeArgs {
            fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
                use define::Given as _;
                Ok(ServeArgs {
                    $( $key: <$given>::from_matches(m, stringify!($key)), )*
                    $( $input: <$input_given>::from_matches(m, stringify!($input)), )*
                    config: std::path::PathBuf::from_matches(m, define::CONFIG_FILE.key),
                })
            }
            fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
                *self = Self::from_arg_matches(m)?;
                Ok(())
            }
        }

        /// The `--config` file: one key per setting, each optional; any other key is an error.
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileConfig {
            $( $key: Option<<$given as define::Given>::File>, )*
            $( $input: Option<<$input_given as define::Given>::File>, )*
        }

        /// Each setting's value, checked by its own rule, and where it came from.
        struct Values<'a> {
            $( $field: define::Value<'a, $ty>, )*
            $( $input: Option<define::Value<'a, $input_ty>>, )*
        }

        /// Picks each setting from the flag or its variable, else the file, else the default,
        /// and applies its rule. `path` is the file's, for error messages.
        fn resolve<'a>(
            args: ServeArgs,
            file: FileConfig,
            path: &'a std::path::Path,
        ) -> Result<Values<'a>, ConfigError> {
            let defaults = Config::default();
            Ok(Values {
                $(
                    $field: match define::given(
                        define::Names { key: stringify!($key), flag: $flag, env: $env },
                        args.$key,
                        file.$key,
                        path,
                        &$rule,
                    )? {
                        Some(value) => value,
                        None => define::Value::default(stringify!($key), defaults.$field),
                    },
                )*
                $(
                    $input: define::given(
                        define::Names { key: stringify!($input), flag: $input_flag, env: $input_env },
                        args.$input,
                        file.$input,
                        path,
                        &$input_rule,
                    )?,
                )*
            })
        }

        impl Values<'_> {
            fn into_config(self) -> Config {
                Config { $( $field: self.$field.value, )* }
            }
        }

        /// Every setting of `delayq serve` as `--help` and the docs show it, in their order.
        fn settings() -> Vec<define::Setting> {
            use define::{Names, Setting, ShowDefault as _};
            let defaults = Config::default();
            vec![
                $(
                    Setting::new::<$given, $ty>(
                        Names { key: stringify!($key), flag: $flag, env: $env },
                        $value_name,
                        $help,
                        &$rule,
                        None $( .or(Some(String::from($shown))) )?
                            .or_else(|| defaults.$field.show()),
                    ),
                )*
                $(
                    Setting::new::<$input_given, $input_ty>(
                        Names { key: stringify!($input), flag: $input_flag, env: $input_env },
                        $input_value_name,
                        $input_help,
                        &$input_rule,
                        None,
                    ),
                )*
                define::CONFIG_FILE,
            ]
        }
    };
}
pub(super) use settings;

/// `--config`: read from the flag or its variable only, never from the file it names.
pub(super) const CONFIG_FILE: Setting = Setting {
    key: "config",
    flag: "config",
    env: "DELAYQ_CONFIG",
    value_name: "FILE",
    help: "TOML file with any of the settings above, under their TOML keys",
    syntax: None,
    limits: None,
    default: None,
    shape: <PathBuf as Given>::shape,
    toml: <PathBuf as Given>::toml,
};

/// One setting as users see it: its names, and the text of `--help` and of the docs' table.
/// Texts are Markdown (inline code in backticks); `--help` shows them without the backticks.
#[derive(Debug, Clone)]
pub(super) struct Setting {
    /// The TOML key, the name in error messages and the clap argument's id.
    pub key: &'static str,
    /// The long flag, without `--`.
    pub flag: &'static str,
    /// The environment variable.
    pub env: &'static str,
    /// What the flag's value is called in `--help`.
    pub value_name: &'static str,
    /// What the setting does.
    pub help: &'static str,
    /// How the value is written when its form is not plain (a list, a switch).
    pub syntax: Option<&'static str>,
    /// The values the setting's rule accepts, when they fit a few words (e.g. `1–1024`).
    pub limits: Option<String>,
    /// The default, or `None` when the setting is unset by default.
    pub default: Option<String>,
    /// Gives the clap argument its value parser and arity.
    pub shape: fn(Arg) -> Arg,
    /// A value as the TOML file writes it (for the sample file).
    #[cfg_attr(not(test), allow(dead_code))]
    pub toml: fn(&str) -> String,
}

impl Setting {
    pub(super) fn new<G: Given, T>(
        names: Names,
        value_name: &'static str,
        help: &'static str,
        rule: &impl Rule<G, T>,
        default: Option<String>,
    ) -> Setting {
        Setting {
            key: names.key,
            flag: names.flag,
            env: names.env,
            value_name,
            help,
            syntax: G::SYNTAX,
            limits: rule.limits(),
            default,
            shape: G::shape,
            toml: G::toml,
        }
    }

    /// The help, list syntax and limits in one line: `--help`'s text and the docs' meaning.
    pub fn meaning(&self) -> String {
        let parts = [Some(self.help), self.syntax, self.limits.as_deref()];
        parts.into_iter().flatten().collect::<Vec<_>>().join("; ")
    }

    /// The clap argument: the flag, its variable, and the help with the default: the help
    /// alone for `-h`, the whole meaning for `--help` (wrapped here: clap does not wrap).
    pub fn arg(&self) -> Arg {
        let mut short = plain(self.help);
        let mut long = wrap(&plain(&self.meaning()), HELP_WIDTH);
        if let Some(default) = &self.default {
            short.push_str(&format!(" [default: {}]", plain(default)));
            long.push_str(&format!("\n[default: {}]", plain(default)));
        }
        let arg = Arg::new(self.key)
            .long(self.flag)
            .env(self.env)
            .value_name(self.value_name)
            .help(short)
            .long_help(long)
            .help_heading(HELP_HEADING);
        (self.shape)(arg)
    }
}

/// Where `--help` lists the settings, apart from the client verbs' global options.
const HELP_HEADING: &str = "Settings (flag > DELAYQ_* variable > --config file > default)";
/// Columns of `--help`'s text, after its indent.
const HELP_WIDTH: usize = 70;

/// `text` broken into lines of at most `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line_len = 0;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if line_len > 0 && line_len + 1 + len > width {
            out.push('\n');
            line_len = 0;
        } else if line_len > 0 {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(word);
        line_len += len;
    }
    out
}

/// Markdown inline code as plain text, for the terminal.
fn plain(markdown: &str) -> String {
    markdown.replace('`', "")
}

/// A setting's names, for [`Origin`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Names {
    pub key: &'static str,
    pub flag: &'static str,
    pub env: &'static str,
}

/// Where a setting's value came from, for error messages.
#[derive(Debug, Clone, Copy)]
pub(super) enum Origin<'a> {
    /// The flag or its `DELAYQ_*` variable (clap merged them).
    Args(Names),
    /// The TOML file at this path.
    File(&'static str, &'a Path),
    Default,
}

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Args(names) => write!(f, "--{} or {}", names.flag, names.env),
            Origin::File(key, path) => write!(f, "`{key}` in {}", path.display()),
            Origin::Default => f.write_str("the default"),
        }
    }
}

/// A setting's value and where it came from.
pub(super) struct Value<'a, T> {
    pub key: &'static str,
    pub value: T,
    pub origin: Origin<'a>,
}

impl<'a, T> Value<'a, T> {
    pub fn default(key: &'static str, value: T) -> Self {
        Value {
            key,
            value,
            origin: Origin::Default,
        }
    }

    /// The error for this value, naming the setting and its origin.
    pub fn invalid(&self, message: impl Into<String>) -> ConfigError {
        invalid(self.key, self.origin, message)
    }
}

fn invalid(key: &'static str, origin: Origin<'_>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting: key,
        origin: origin.to_string(),
        message: message.into(),
    }
}

/// The setting's value from the flag or its variable, else from the file, checked by `rule`;
/// `None` if neither gives one.
pub(super) fn given<'a, G: Given, T>(
    names: Names,
    arg: Option<G>,
    file: Option<G::File>,
    path: &'a Path,
    rule: &impl Rule<G, T>,
) -> Result<Option<Value<'a, T>>, ConfigError> {
    let (given, origin) = match (arg, file) {
        (Some(v), _) => (v, Origin::Args(names)),
        (None, Some(v)) => {
            let origin = Origin::File(names.key, path);
            (
                G::from_file(v).map_err(|m| invalid(names.key, origin, m))?,
                origin,
            )
        }
        (None, None) => return Ok(None),
    };
    let value = rule
        .apply(given)
        .map_err(|m| invalid(names.key, origin, m))?;
    Ok(Some(Value {
        key: names.key,
        value,
        origin,
    }))
}

/// The form in which a setting's value is given, before its rule: how clap reads it from a
/// flag or variable, and how the TOML file holds it.
pub(super) trait Given: Sized + Clone + Send + Sync + 'static {
    /// Its form in the TOML file.
    type File: DeserializeOwned;
    /// How the value is written when its form is not plain: a list, a switch.
    const SYNTAX: Option<&'static str> = None;
    /// Sets the clap argument's value parser and arity.
    fn shape(arg: Arg) -> Arg;
    /// The value clap parsed, if given.
    fn from_matches(m: &ArgMatches, id: &str) -> Option<Self>;
    /// The value from the file's form.
    fn from_file(file: Self::File) -> Result<Self, String>;
    /// `text`, as a flag would give it, in the TOML file's form: a string by default.
    fn toml(text: &str) -> String {
        toml::Value::from(text).to_string()
    }
}

/// A comma-separated list as a TOML array of strings.
fn toml_array(text: &str) -> String {
    toml::Value::from(text.split(',').collect::<Vec<_>>()).to_string()
}

/// Integers are unsigned to clap, so a negative flag is clap's usage error naming the flag.
/// TOML integers are signed: a negative one is refused here, with the setting and the file.
impl Given for u64 {
    type File = i64;
    fn shape(arg: Arg) -> Arg {
        arg.value_parser(clap::value_parser!(u64))
    }
    fn from_matches(m: &ArgMatches, id: &str) -> Option<Self> {
        m.get_one::<u64>(id).copied()
    }
    fn from_file(n: i64) -> Result<u64, String> {
        u64::try_from(n).map_err(|_| format!("{n} is negative"))
    }
    fn toml(text: &str) -> String {
        text.to_string()
    }
}

/// A switch: the flag alone means `true`; `--memory=false` (or `true`, `yes`, `no`, `on`,
/// `off`, `1`, `0`) and its variable set it either way, so a variable can turn it off; the
/// file holds a TOML boolean.
impl Given for bool {
    type File = bool;
    const SYNTAX: Option<&'static str> =
        Some("the flag alone is `true`; `true` or `false` in the variable and the TOML file");
    fn shape(arg: Arg) -> Arg {
        arg.value_parser(clap::builder::BoolishValueParser::new())
            .num_args(0..=1)
            .default_missing_value("true")
    }
    fn from_matches(m: &ArgMatches, id: &str) -> Option<Self> {
        m.get_one::<bool>(id).copied()
    }
    fn from_file(v: bool) -> Result<bool, String> {
        Ok(v)
    }
    fn toml(text: &str) -> String {
        text.to_string()
    }
}

/// Text and paths are taken as given and checked by the setting's rule, so that every error
/// names where the value came from.
macro_rules! given_as_is {
    ($($t:ty),*) => {$(
        impl Given for $t {
            type File = $t;
            fn shape(arg: Arg) -> Arg {
                arg.value_parser(clap::value_parser!($t))
            }
            fn from_matches(m: &ArgMatches, id: &str) -> Option<Self> {
                m.get_one::<$t>(id).cloned()
            }
            fn from_file(v: $t) -> Result<$t, String> {
                Ok(v)
            }
        }
    )*};
}
given_as_is!(String, PathBuf);

/// A list of URLs: comma-separated in a flag or variable; in the file a TOML array or one
/// comma-separated string.
impl Given for Vec<String> {
    type File = UrlList;
    const SYNTAX: Option<&'static str> =
        Some("comma-separated (in the TOML file: an array or one comma-separated string)");
    fn shape(arg: Arg) -> Arg {
        arg.action(ArgAction::Append).value_delimiter(',')
    }
    fn from_matches(m: &ArgMatches, id: &str) -> Option<Self> {
        m.get_many::<String>(id).map(|v| v.cloned().collect())
    }
    fn from_file(list: UrlList) -> Result<Self, String> {
        Ok(match list {
            UrlList::List(v) => v,
            UrlList::Joined(s) => s.split(',').map(str::to_string).collect(),
        })
    }
    fn toml(text: &str) -> String {
        toml_array(text)
    }
}

/// A list given as a TOML array or as one comma-separated string.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
pub(super) enum UrlList {
    List(Vec<String>),
    Joined(String),
}

/// Bearer tokens: the flag once per token, a comma-separated variable, a TOML array. The
/// variable's value is hidden from `--help`.
impl Given for Vec<AuthToken> {
    type File = Vec<String>;
    const SYNTAX: Option<&'static str> =
        Some("repeat the flag, comma-separated in the variable, an array in the TOML file");
    fn shape(arg: Arg) -> Arg {
        arg.value_parser(clap::value_parser!(AuthToken))
            .action(ArgAction::Append)
            .value_delimiter(',')
            .hide_env_values(true)
    }
    fn from_matches(m: &ArgMatches, id: &str) -> Option<Self> {
        m.get_many::<AuthToken>(id).map(|v| v.cloned().collect())
    }
    fn from_file(tokens: Vec<String>) -> Result<Self, String> {
        Ok(tokens.into_iter().map(AuthToken::from).collect())
    }
    fn toml(text: &str) -> String {
        toml_array(text)
    }
}

/// How a given value becomes a setting's value (`Err` says why it cannot, without naming the
/// setting), and which values that accepts, for `--help` and the docs.
pub(super) trait Rule<G, T> {
    fn apply(&self, given: G) -> Result<T, String>;
    fn limits(&self) -> Option<String> {
        None
    }
}

/// A default as `--help` and the docs show it (Markdown); `None` when unset.
pub(super) trait ShowDefault {
    fn show(&self) -> Option<String>;
}

macro_rules! show_display {
    ($($t:ty),*) => {$(
        impl ShowDefault for $t {
            fn show(&self) -> Option<String> {
                Some(format!("`{self}`"))
            }
        }
    )*};
}
show_display!(SocketAddr, String, bool, u16, u64, usize);

impl ShowDefault for PathBuf {
    fn show(&self) -> Option<String> {
        Some(format!("`{}`", self.display()))
    }
}

impl<T: ShowDefault> ShowDefault for Option<T> {
    fn show(&self) -> Option<String> {
        self.as_ref().and_then(ShowDefault::show)
    }
}

impl ShowDefault for Vec<String> {
    fn show(&self) -> Option<String> {
        (!self.is_empty()).then(|| format!("`{}`", self.join(",")))
    }
}

/// Tokens are secrets: never shown, and none by default.
impl ShowDefault for Vec<AuthToken> {
    fn show(&self) -> Option<String> {
        None
    }
}
