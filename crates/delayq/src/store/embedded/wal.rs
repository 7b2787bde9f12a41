//! The embedded store's write-ahead log: what makes a commit durable between checkpoints.
//!
//! A commit appends one frame to the current log file (`wal-<generation>.log` in the data
//! directory) and, when it carries an acknowledgement, `fdatasync`s it: one small sequential
//! write per group of requests, where a redb commit would rewrite pages all over its B-tree.
//! redb stays the checkpoint: `group_commit.rs` rotates to a new log every so often and a
//! checkpoint thread applies the old one's changes to redb in one durable transaction, then
//! retires it (below). Opening the store replays every log left over (a crash, or a checkpoint
//! that did not finish) into redb before loading, oldest generation first.
//!
//! **Recycling.** A checkpointed log is not deleted but renamed to [`SPARE`], and the next
//! new log is that file renamed again and written over from the start. Overwriting blocks a
//! file already has makes an `fdatasync` one data write and a cache flush; appending to a new
//! file also commits the file's new size to the filesystem's journal every time, which makes
//! each sync slower. So log files are filled with zeros to [`PREALLOCATED`] bytes, about what
//! one checkpoint's log holds at most, before they are written: the first log of a store when
//! it opens, a retired log (by the checkpoint thread, off every request's path) before it is
//! reused, and trimming stops there. Only a log started when no spare is ready (at the first
//! rotation after opening, or while a checkpoint still holds the spare-to-be) grows as it is
//! written. What the old contents leave past the new frames must never read as a frame of the
//! new log, so every frame's CRC covers the log's generation, and the file starts
//! with a header naming it. Generations never repeat: opening the store starts above every
//! log's and the spare's ([`spare_generation`]), so whatever a file held before is of older
//! generations.
//!
//! File: [`MAGIC`] and the generation (u64 LE), then frames. Frame: `len` (u32 LE) and `crc`
//! (CRC-32 of the generation, u64 LE, then the payload; u32 LE), then the payload: entries of
//! `kind` (1 put, 0 remove, one byte), the id's length (u32 LE) and bytes, and for a put the
//! record's length (u32 LE) and bytes (`record::encode`). A frame that is cut short or fails
//! its CRC ends the log: its writer never had an fsync returned for it, so nothing in it or
//! after it was acknowledged. A header naming another generation (a recycled file whose new
//! header never reached the disk) means the log holds nothing: its first fsync, which would
//! have written the header, never returned. A commit over [`MAX_FRAME`] bytes is written as
//! several frames; a crash between them can keep part of it, which, unacknowledged, is as in
//! doubt as any request a crash interrupts. A log without a file header (the first layout of
//! this format) has CRCs of the payload alone; it is still read.

use crate::store::Cause;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// One job's last state in a commit: its record, or `None` when it was removed.
pub type Entry = (String, Option<Vec<u8>>);

/// A frame's header: `len` and `crc`.
const HEADER: usize = 8;

/// The start of every log this version writes; the generation follows it.
const MAGIC: &[u8; 8] = b"DQWAL\0\0\x02";
const FILE_HEADER: usize = MAGIC.len() + 8;

/// The name of a checkpointed log kept for reuse (see the module docs).
pub const SPARE: &str = "wal-spare.log";

/// Least size of a log file, in zeros beyond its frames (see the module docs): the size at
/// which a log is checkpointed (`group_commit.rs`'s `CHECKPOINT_BYTES`).
pub const PREALLOCATED: u64 = 16 << 20;

/// Largest payload [`frames`] puts in one frame, far below the `u32` length field's limit: a
/// commit of many large bodies (batches of 1,000 jobs of up to 64 MiB) is written as several.
const MAX_FRAME: usize = 256 << 20;

/// The first bytes of the log of `generation`.
fn file_header(generation: u64) -> [u8; FILE_HEADER] {
    let mut header = [0u8; FILE_HEADER];
    header[..MAGIC.len()].copy_from_slice(MAGIC);
    header[MAGIC.len()..].copy_from_slice(&generation.to_le_bytes());
    header
}

/// The generation a log file's first bytes name; `None` when they hold no whole header.
fn named_generation(bytes: &[u8]) -> Option<u64> {
    let g = bytes.strip_prefix(MAGIC)?.get(..8)?;
    Some(u64::from_le_bytes(g.try_into().ok()?))
}

/// The log file of `generation` in `dir`.
pub fn path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:016x}.log"))
}

/// A checkpointed log, kept to be written over by the next new one: renamed to [`SPARE`]
/// (replacing an older spare), or deleted if it cannot be. Either way it is never read again.
/// The spare is then filled with zeros to [`PREALLOCATED`] bytes if it is shorter (a spare
/// that cannot be, on a full disk say, is only slower to write over).
pub fn retire(dir: &Path, log: &Path) -> io::Result<()> {
    let spare = dir.join(SPARE);
    if std::fs::rename(log, &spare).is_err() {
        return std::fs::remove_file(log);
    }
    let filled = OpenOptions::new()
        .write(true)
        .open(&spare)
        .and_then(|mut file| fill(&mut file, PREALLOCATED));
    if let Err(e) = filled {
        tracing::warn!(error = %e, spare = %spare.display(), "cannot preallocate the spare log");
    }
    Ok(())
}

/// Extends `file` with zeros to `size` bytes if it is shorter, durably (`fdatasync` commits
/// the new size), and leaves its position at the start.
fn fill(file: &mut File, size: u64) -> io::Result<()> {
    let len = file.metadata()?.len();
    if len < size {
        file.seek(SeekFrom::Start(len))?;
        io::copy(&mut io::repeat(0).take(size - len), file)?;
        file.sync_data()?;
    }
    file.seek(SeekFrom::Start(0))?;
    Ok(())
}

/// The generation the spare in `dir` was last written as, if there is a spare with a header.
/// A new log must take a higher one: the spare's old frames carry it (and older ones), and a
/// log of the same generation written over it could read them as its own.
pub fn spare_generation(dir: &Path) -> io::Result<Option<u64>> {
    let mut header = [0u8; FILE_HEADER];
    let read = match File::open(dir.join(SPARE)) {
        Ok(mut f) => f.read_exact(&mut header),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match read {
        Ok(()) => Ok(named_generation(&header)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// The logs in `dir`, oldest generation first (the spare is not one).
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

/// CRC-32 of a frame's payload in the log of `generation` (`None`: a log without a file
/// header).
fn checksum(generation: Option<u64>, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    if let Some(g) = generation {
        h.update(&g.to_le_bytes());
    }
    h.update(payload);
    h.finalize()
}

/// `entries` as frames of the log of `generation`, of at most `max` payload bytes each (an
/// entry larger than `max` gets a frame of its own), in order.
fn frames(entries: &[Entry], max: usize, generation: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, e) in entries.iter().enumerate() {
        let n = entry_size(e);
        if i > start && size + n > max {
            out.push(frame(&entries[start..i], generation));
            (start, size) = (i, 0);
        }
        size += n;
    }
    if start < entries.len() || out.is_empty() {
        out.push(frame(&entries[start..], generation));
    }
    out
}

/// One frame of the log of `generation`, holding `entries`.
fn frame(entries: &[Entry], generation: u64) -> Vec<u8> {
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
    let crc = checksum(Some(generation), &out[HEADER..]);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..HEADER].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Every entry of the log of `generation` at `path`, in order, up to the first frame that is
/// cut short or fails its CRC (see the module docs).
pub fn read(path: &Path, generation: u64) -> io::Result<Vec<Entry>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut out = Vec::new();
    let (mut at, seed) = if !bytes.starts_with(MAGIC) {
        (0, None)
    } else if named_generation(&bytes) == Some(generation) {
        (FILE_HEADER, Some(generation))
    } else {
        return Ok(out);
    };
    while let Some(header) = bytes.get(at..at + HEADER) {
        let len = u32::from_le_bytes(header[..4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().unwrap_or_default());
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if checksum(seed, payload) != crc {
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
    /// Bytes written so far, its header included.
    pub bytes: u64,
}

impl Log {
    /// Creates the log of `generation` in `dir` (it must not exist), from the spare when
    /// there is one, writes its header and makes its directory entry durable, so a frame
    /// synced into it is found after a power loss. With `preallocate` (when the store opens)
    /// a file shorter than [`PREALLOCATED`] is first filled with zeros to that size.
    pub fn create(dir: &Path, generation: u64, preallocate: bool) -> io::Result<Log> {
        let path = path(dir, generation);
        let recycled = !path.exists() && std::fs::rename(dir.join(SPARE), &path).is_ok();
        let mut file = if recycled {
            OpenOptions::new().write(true).open(&path)?
        } else {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?
        };
        if preallocate && let Err(e) = fill(&mut file, PREALLOCATED) {
            // Only slower to write: each sync then also commits the file's growth.
            tracing::warn!(error = %e, log = %path.display(), "cannot preallocate the log");
            file.seek(SeekFrom::Start(0))?;
        }
        File::open(dir)?.sync_all()?;
        file.write_all(&file_header(generation))?;
        Ok(Log {
            file,
            path,
            generation,
            bytes: FILE_HEADER as u64,
        })
    }

    /// Appends a commit's entries (not yet synced): one frame, or several past [`MAX_FRAME`].
    /// An error names the file.
    pub fn append(&mut self, entries: &[Entry]) -> Result<(), Cause> {
        for frame in frames(entries, MAX_FRAME, self.generation) {
            self.append_frame(&frame)?;
        }
        Ok(())
    }

    fn append_frame(&mut self, frame: &[u8]) -> Result<(), Cause> {
        self.file.write_all(frame).map_err(|e| {
            Cause::with_source(format_args!("cannot append to {}", self.path.display()), e)
        })?;
        self.bytes += frame.len() as u64;
        Ok(())
    }

    /// Cuts what a recycled file held past this log's frames and [`PREALLOCATED`] bytes, once
    /// the log is complete: the spare it becomes is then no larger than this log or that
    /// size, instead of as large as the largest log the file ever held. Never extends it.
    pub fn trim(&self) -> io::Result<()> {
        let len = self.file.metadata()?.len();
        let keep = self.bytes.max(PREALLOCATED).min(len);
        if keep < len {
            self.file.set_len(keep)?;
        }
        Ok(())
    }

    /// Makes everything appended durable. An error names the file.
    pub fn sync(&mut self) -> Result<(), Cause> {
        self.file
            .sync_data()
            .map_err(|e| Cause::with_source(format_args!("cannot sync {}", self.path.display()), e))
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
        let mut log = Log::create(dir.path(), 7, false).unwrap();
        log.append(&sample()).unwrap();
        log.append(&[("a".into(), None)]).unwrap();
        log.sync().unwrap();
        let mut want = sample();
        want.push(("a".into(), None));
        assert_eq!(read(&log.path, 7).unwrap(), want);
        assert_eq!(existing(dir.path()).unwrap(), vec![(7, log.path.clone())]);
    }

    #[test]
    fn a_commit_over_the_frame_limit_is_split_in_order() {
        let entries: Vec<Entry> = (0..10)
            .map(|i| (format!("j{i}"), Some(vec![b'x'; 100])))
            .collect();
        let split = frames(&entries, 250, 1);
        // 111 bytes per entry: two per frame.
        assert_eq!(split.len(), 5);
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::create(dir.path(), 1, false).unwrap();
        for f in &split {
            log.append_frame(f).unwrap();
        }
        assert_eq!(read(&log.path, 1).unwrap(), entries);
        assert_eq!(frames(&entries, usize::MAX, 1).len(), 1);
        assert_eq!(frames(&[], 250, 1).len(), 1);
    }

    #[test]
    fn a_torn_or_damaged_last_frame_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::create(dir.path(), 1, false).unwrap();
        log.append(&sample()).unwrap();
        let kept = FILE_HEADER + frame(&sample(), 1).len();
        let second = frame(&[("d".into(), Some(b"dd".to_vec()))], 1);
        for cut in 1..second.len() {
            let mut bytes = std::fs::read(&log.path).unwrap();
            bytes.truncate(kept);
            bytes.extend_from_slice(&second[..cut]);
            std::fs::write(&log.path, &bytes).unwrap();
            assert_eq!(read(&log.path, 1).unwrap(), sample(), "cut at {cut}");
        }
        let mut bytes = std::fs::read(&log.path).unwrap();
        bytes.truncate(kept);
        let mut flipped = second.clone();
        *flipped.last_mut().unwrap() ^= 1;
        bytes.extend_from_slice(&flipped);
        std::fs::write(&log.path, &bytes).unwrap();
        assert_eq!(read(&log.path, 1).unwrap(), sample());
    }

    /// Entries `j<from>..j<to>` with 10-byte records.
    fn jobs(from: usize, to: usize) -> Vec<Entry> {
        (from..to)
            .map(|i| (format!("j{i}"), Some(vec![b'x'; 10])))
            .collect()
    }

    #[test]
    fn a_recycled_log_reads_only_its_own_frames() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = Log::create(dir.path(), 1, false).unwrap();
        for batch in [jobs(10, 20), jobs(20, 30), jobs(30, 40)] {
            old.append(&batch).unwrap();
        }
        old.sync().unwrap();
        let old_len = old.bytes;
        drop(old);
        retire(dir.path(), &path(dir.path(), 1)).unwrap();
        assert!(
            existing(dir.path()).unwrap().is_empty(),
            "the spare is not a log"
        );
        assert_eq!(spare_generation(dir.path()).unwrap(), Some(1));

        let mut new = Log::create(dir.path(), 2, false).unwrap();
        assert!(!dir.path().join(SPARE).exists(), "the spare was reused");
        // As long as the old first frame: the old second one starts right after it, and the
        // zeros the retired file was filled with follow the old frames.
        new.append(&jobs(40, 50)).unwrap();
        new.sync().unwrap();
        assert_eq!(std::fs::metadata(&new.path).unwrap().len(), PREALLOCATED);
        let bytes = std::fs::read(&new.path).unwrap();
        assert!(bytes[old_len as usize..].iter().all(|&b| b == 0));
        assert_eq!(read(&new.path, 2).unwrap(), jobs(40, 50));
    }

    #[test]
    fn a_preallocated_log_reads_its_frames_and_trims_to_its_preallocated_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::create(dir.path(), 3, true).unwrap();
        assert_eq!(std::fs::metadata(&log.path).unwrap().len(), PREALLOCATED);
        assert_eq!(read(&log.path, 3).unwrap(), vec![]);
        log.append(&jobs(0, 10)).unwrap();
        log.sync().unwrap();
        assert_eq!(read(&log.path, 3).unwrap(), jobs(0, 10));
        log.trim().unwrap();
        assert_eq!(std::fs::metadata(&log.path).unwrap().len(), PREALLOCATED);
        // A file of zeros whose header never reached the disk holds nothing.
        std::fs::write(&log.path, vec![0u8; 4096]).unwrap();
        assert_eq!(read(&log.path, 3).unwrap(), vec![]);
    }

    #[test]
    fn a_recycled_log_whose_new_header_was_lost_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = Log::create(dir.path(), 1, false).unwrap();
        old.append(&jobs(0, 10)).unwrap();
        old.sync().unwrap();
        // Renamed for generation 2, and a crash before its new header reached the disk.
        std::fs::rename(&old.path, path(dir.path(), 2)).unwrap();
        assert_eq!(read(&path(dir.path(), 2), 2).unwrap(), vec![]);
    }

    #[test]
    fn a_log_from_before_recycling_is_still_read() {
        // No file header; each frame's CRC covers its payload alone.
        let mut bytes = Vec::new();
        for batch in [sample(), jobs(0, 3)] {
            let mut f = frame(&batch, 0);
            let crc = crc32fast::hash(&f[HEADER..]);
            f[4..HEADER].copy_from_slice(&crc.to_le_bytes());
            bytes.extend_from_slice(&f);
        }
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), 5);
        std::fs::write(&p, &bytes).unwrap();
        let mut want = sample();
        want.extend(jobs(0, 3));
        assert_eq!(read(&p, 5).unwrap(), want);
    }

    #[test]
    fn logs_are_listed_oldest_first_and_other_files_ignored() {
        let dir = tempfile::tempdir().unwrap();
        for g in [0x10, 2, 0xff] {
            Log::create(dir.path(), g, false).unwrap();
        }
        std::fs::write(dir.path().join("delayq.redb"), b"").unwrap();
        std::fs::write(dir.path().join("wal-zz.log"), b"").unwrap();
        std::fs::write(dir.path().join(SPARE), b"").unwrap();
        let gens: Vec<u64> = existing(dir.path())
            .unwrap()
            .into_iter()
            .map(|(g, _)| g)
            .collect();
        assert_eq!(gens, [2, 0x10, 0xff]);
    }
}
