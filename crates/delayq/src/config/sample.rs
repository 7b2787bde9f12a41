//! The sample configuration file the Debian package installs as `/etc/delayq/delayq.toml`
//! (`pkg/delayq.toml`): every setting the file takes, each with its help, flag, variable and
//! default, generated from the `settings!` definitions like docs/operations.md's table. The
//! test below keeps the file as the definitions give it: after changing a setting, run
//! `DELAYQ_BLESS=1 cargo test -p delayq --lib config`, which rewrites it.

use super::tests::load;
use super::*;
use std::path::Path;

/// Settings the package sets instead of leaving them at their default: the key and its value
/// as the TOML file writes it, and why (a comment above it).
const PACKAGE_VALUES: &[(&str, &str, &str)] = &[(
    "data_dir",
    "\"/var/lib/delayq\"",
    "Set for the package: the systemd unit's StateDirectory, writable by the delayq user.",
)];

/// Columns of the file's comments.
const WIDTH: usize = 96;

/// The file, from the definitions.
fn sample_file() -> String {
    let mut out = String::from(
        "delayq's settings, read by `delayq serve --config /etc/delayq/delayq.toml` (the \
         systemd unit runs that). Every setting is listed with what it does and its \
         default; a line left commented out keeps the default. A setting's flag or \
         DELAYQ_* variable wins over this file (flag > variable > this file > default), and \
         `delayq serve --help` says the same as this file. An unknown key or a bad value is \
         an error naming it: delayq then does not start.\n",
    );
    out = comment(&out);
    out.push_str(
        "#\n# Generated from delayq's definitions of its settings; docs/operations.md has them \
         as a table.\n",
    );
    for s in settings() {
        if s.key == define::CONFIG_FILE.key {
            continue;
        }
        out.push('\n');
        out.push_str(&comment(&format!("{}.", s.meaning())));
        let default = s.default.as_deref().unwrap_or("none");
        out.push_str(&comment(&format!(
            "Flag --{}, variable {}; default: {default}.",
            s.flag, s.env
        )));
        match PACKAGE_VALUES.iter().find(|(key, ..)| *key == s.key) {
            Some((key, value, why)) => {
                out.push_str(&comment(why));
                out.push_str(&format!("{key} = {value}\n"));
            }
            None => {
                let example = default_value(s.default.as_deref()).unwrap_or(s.value_name);
                out.push_str(&format!("#{} = {}\n", s.key, (s.toml)(example)));
            }
        }
    }
    out
}

/// The default's value when the docs show it as one code span first (`` `1` (`8` with ...)``),
/// else `None` (unset, or explained in words).
fn default_value(shown: Option<&str>) -> Option<&str> {
    let rest = shown?.strip_prefix('`')?;
    let end = rest.find('`')?;
    Some(&rest[..end])
}

/// `text` as `#` comment lines of at most [`WIDTH`] columns.
fn comment(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() > 1 && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

fn sample_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pkg/delayq.toml")
}

/// pkg/delayq.toml is the file the definitions give. To update it after changing a setting,
/// run `DELAYQ_BLESS=1 cargo test -p delayq --lib config`: the test then rewrites it.
#[test]
fn package_config_file_matches_the_definitions() {
    let path = sample_path();
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = sample_file();
    if written == generated {
        return;
    }
    if std::env::var("DELAYQ_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    assert_eq!(
        written, generated,
        "pkg/delayq.toml disagrees with config/mod.rs; \
         `DELAYQ_BLESS=1 cargo test -p delayq --lib config` rewrites it"
    );
}

#[test]
fn package_config_file_lists_every_setting_of_the_file() {
    let file = sample_file();
    let comments = file.replace("\n# ", " ");
    for s in settings() {
        let listed =
            file.contains(&format!("\n#{} = ", s.key)) || file.contains(&format!("\n{} = ", s.key));
        let in_file = s.key != define::CONFIG_FILE.key;
        assert_eq!(listed, in_file, "{}", s.key);
        let names = format!("Flag --{}, variable {};", s.flag, s.env);
        assert_eq!(comments.contains(&names), in_file, "{names}");
    }
    assert!(file.lines().all(|l| l.chars().count() <= WIDTH), "{file}");
}

#[test]
fn package_config_file_as_installed_is_the_defaults_with_the_package_data_dir() {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), sample_file()).unwrap();
    let config = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
    let expected = Config {
        data_dir: "/var/lib/delayq".into(),
        ..Config::default()
    };
    assert_eq!(config, expected);
}

/// Uncommenting a setting's line as written sets it to its default: every example of a
/// setting that has one is a valid value of the right TOML type.
#[test]
fn package_config_file_examples_uncommented_are_the_defaults() {
    let file = sample_file();
    let mut uncommented = String::new();
    let mut examples = 0;
    for line in file.lines() {
        let example = line.strip_prefix('#').filter(|l| {
            let key = l.split(" = ").next().unwrap_or("");
            settings()
                .iter()
                .any(|s| s.key == key && default_value(s.default.as_deref()).is_some())
        });
        match example {
            Some(setting) => {
                examples += 1;
                uncommented.push_str(setting);
            }
            None => uncommented.push_str(line),
        }
        uncommented.push('\n');
    }
    assert!(examples >= 20, "{examples} examples");
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), &uncommented).unwrap();
    let config = load(&["--config", f.path().to_str().unwrap()], &[]).unwrap();
    let expected = Config {
        data_dir: "/var/lib/delayq".into(),
        ..Config::default()
    };
    assert_eq!(config, expected, "{uncommented}");
}
