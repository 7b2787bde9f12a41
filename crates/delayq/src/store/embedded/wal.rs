//! The embedded store's write-ahead log: what makes a commit durable between checkpoints.
//!
//! A commit appends one frame to the current log file (`wal-<generation>.log` in the data
//! directory) and, when it carries an acknowledgement, `fdatasync`s it: one small sequential
//! write per group of requests, where a redb commit rewrote ~14 pages (measured with strace in
//! W1). redb stays the checkpoint: `writer.rs` rotates to a new log every so often and a
//! checkpoint thread applies the old one's changes to redb in one durable transaction, then
//! deletes it. Opening the store replays every log left over (a crash, or a checkpoint that did
//! not finish) into redb before loading, oldest generation first.
//!
//! Frame: `len` (u32 LE) and `crc` (CRC-32 of the payload, u32 LE), then the payload: entries
//! of `kind` (1 put, 0 remove, one byte), the id's length (u32 LE) and bytes, and for a put the
//! record's length (u32 LE) and bytes (`record::encode`). A frame that is cut short or fails
//! its CRC ends the log: its writer never had an fsync returned for it, so nothing in it or
//! after it was acknowledged. A commit over [`MAX_FRAME`] bytes is written as several frames;
//! a crash between them can keep part of it, which, unacknowledged, is as in doubt as any
//! request a crash interrupts.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// One job's last state in a commit: its record, or `None` when it was removed.
pub type Entry = (String, Option<Vec<u8>>);

const HEADER: usize = 8;

/// Largest payload [`frames`] puts in one frame, far below the `u32` length field's limit: a
/// commit of many large bodies (batches of 1,000 jobs of up to 64 MiB) is written as several.
pub const MAX_FRAME: usize = 256 << 20;

/// The log file of `generation` in `dir`.
pub fn path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:016x}.log"))
}

/// The logs in `dir`, oldest generation first.
pub fn existing(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(hex) = name
            .to_str()
            .and_then(|n| n.strip_prefix("wal-"))
            .and_then(|n| n.strip_suffix(".log"))
        else {
            continue;
        };
        if let Ok(generation) = u64::from_str_radix(hex, 16) {
            logs.push((generation, entry.path()));
        }
    }
    logs.sort();
    Ok(logs)
}

/// Bytes an entry takes in a payload.
fn entry_size((id, rec): &Entry) -> usize {
    9 + id.len() + rec.as_ref().map_or(0, Vec::len)
}

/// `entries` as frames of at most `max` payload bytes each (an entry larger than `max` gets a
/// frame of its own), in order.
pub fn frames(entries: &[Entry], max: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, e) in entries.iter().enumerate() {
        let n = entry_size(e);
        if i > start && size + n > max {
            out.push(frame(&entries[start..i]));
            (start, size) = (i, 0);
        }
        size += n;
    }
    if start < entries.len() || out.is_empty() {
        out.push(frame(&entries[start..]));
    }
    out
}

/// One frame holding `entries`.
pub fn frame(entries: &[Entry]) -> Vec<u8> {
    let size: usize = entries.iter().map(entry_size).sum();
    let mut out = Vec::with_capacity(HEADER + size);
    out.extend_from_slice(&[0; HEADER]);
    for (id, rec) in entries {
        out.push(u8::from(rec.is_some()));
        out.extend_from_slice(&(id.len() as u32).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
        if let Some(rec) = rec {
            out.extend_from_slice(&(rec.len() as u32).to_le_bytes());
            out.extend_from_slice(rec);
        }
    }
    let len = (out.len() - HEADER) as u32;
    let crc = crc32fast::hash(&out[HEADER..]);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..HEADER].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Every entry of the log at `path`, in order, up to the first frame that is cut short or
/// fails its CRC (see the module docs).
pub fn read(path: &Path) -> io::Result<Vec<Entry>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + HEADER) {
        let len = u32::from_le_bytes(header[..4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().unwrap_or_default());
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        match entries(payload) {
            Some(mut e) => out.append(&mut e),
            None => break,
        }
        at += HEADER + len;
    }
    Ok(out)
}

/// A checked payload's entries; `None` if it does not parse (never written by [`frame`]).
fn entries(mut p: &[u8]) -> Option<Vec<Entry>> {
    fn take<'a>(p: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = p.split_at_checked(n)?;
        *p = rest;
        Some(head)
    }
    fn len(p: &mut &[u8]) -> Option<usize> {
        Some(u32::from_le_bytes(take(p, 4)?.try_into().ok()?) as usize)
    }
    let mut out = Vec::new();
    while !p.is_empty() {
        let kind = take(&mut p, 1)?[0];
        let n = len(&mut p)?;
        let id = String::from_utf8(take(&mut p, n)?.to_vec()).ok()?;
        let rec = match kind {
            0 => None,
            1 => {
                let n = len(&mut p)?;
                Some(take(&mut p, n)?.to_vec())
            }
            _ => return None,
        };
        out.push((id, rec));
    }
    Some(out)
}

/// The log being written.
pub struct Log {
    file: File,
    pub path: PathBuf,
    pub generation: u64,
    /// Bytes appended so far.
    pub bytes: u64,
}

impl Log {
    /// Creates the log of `generation` in `dir` (it must not exist) and makes its directory
    /// entry durable, so a frame synced into it is found after a power loss.
    pub fn create(dir: &Path, generation: u64) -> io::Result<Log> {
        let path = path(dir, generation);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        File::open(dir)?.sync_all()?;
        Ok(Log {
            file,
            path,
            generation,
            bytes: 0,
        })
    }

    /// Appends one frame (not yet synced). An error names the file.
    pub fn append(&mut self, frame: &[u8]) -> Result<(), String> {
        self.file
            .write_all(frame)
            .map_err(|e| format!("cannot append to {}: {e}", self.path.display()))?;
        self.bytes += frame.len() as u64;
        Ok(())
    }

    /// Makes everything appended durable. An error names the file.
    pub fn sync(&mut self) -> Result<(), String> {
        self.file
            .sync_data()
            .map_err(|e| format!("cannot sync {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Entry> {
        vec![
            ("a".into(), Some(b"record a".to_vec())),
            ("b/ü".into(), None),
            ("c".into(), Some(Vec::new())),
        ]
    }

    #[test]
    fn frames_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::create(dir.path(), 7).unwrap();
        log.append(&frame(&sample())).unwrap();
        log.append(&frame(&[("a".into(), None)])).unwrap();
        log.sync().unwrap();
        let mut want = sample();
        want.push(("a".into(), None));
        assert_eq!(read(&log.path).unwrap(), want);
        assert_eq!(existing(dir.path()).unwrap(), vec![(7, log.path.clone())]);
    }

    #[test]
    fn a_commit_over_the_frame_limit_is_split_in_order() {
        let entries: Vec<Entry> = (0..10)
            .map(|i| (format!("j{i}"), Some(vec![b'x'; 100])))
            .collect();
        let split = frames(&entries, 250);
        // 111 bytes per entry: two per frame.
        assert_eq!(split.len(), 5);
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::create(dir.path(), 1).unwrap();
        for f in &split {
            log.append(f).unwrap();
        }
        assert_eq!(read(&log.path).unwrap(), entries);
        assert_eq!(frames(&entries, usize::MAX).len(), 1);
        assert_eq!(frames(&[], 250).len(), 1);
    }

    #[test]
    fn a_torn_or_damaged_last_frame_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::create(dir.path(), 1).unwrap();
        log.append(&frame(&sample())).unwrap();
        let second = frame(&[("d".into(), Some(b"dd".to_vec()))]);
        for cut in 1..second.len() {
            let mut bytes = std::fs::read(&log.path).unwrap();
            bytes.truncate(frame(&sample()).len());
            bytes.extend_from_slice(&second[..cut]);
            std::fs::write(&log.path, &bytes).unwrap();
            assert_eq!(read(&log.path).unwrap(), sample(), "cut at {cut}");
        }
        let mut bytes = std::fs::read(&log.path).unwrap();
        bytes.truncate(frame(&sample()).len());
        let mut flipped = second.clone();
        *flipped.last_mut().unwrap() ^= 1;
        bytes.extend_from_slice(&flipped);
        std::fs::write(&log.path, &bytes).unwrap();
        assert_eq!(read(&log.path).unwrap(), sample());
    }

    #[test]
    fn logs_are_listed_oldest_first_and_other_files_ignored() {
        let dir = tempfile::tempdir().unwrap();
        for g in [0x10, 2, 0xff] {
            Log::create(dir.path(), g).unwrap();
        }
        std::fs::write(dir.path().join("delayq.redb"), b"").unwrap();
        std::fs::write(dir.path().join("wal-zz.log"), b"").unwrap();
        let gens: Vec<u64> = existing(dir.path())
            .unwrap()
            .into_iter()
            .map(|(g, _)| g)
            .collect();
        assert_eq!(gens, [2, 0x10, 0xff]);
    }
}
