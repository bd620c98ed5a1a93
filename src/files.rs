//! Reading the small files a user names for secrets and certificates (`--password-file`,
//! `--tls-ca`, `--tls-cert`, `--tls-key`) without trusting what the path turns out to be.
//!
//! Only a regular file is read: a FIFO would block redlock before any timeout applies (and is
//! opened without blocking, to be told apart), and a device such as `/dev/zero` never ends.
//! A regular file is read up to a limit that its kind of content can never reach, so a wrong
//! path costs an error, not all the memory.

use std::fs::{File, OpenOptions};
use std::io::Read as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use nix::fcntl::OFlag;

/// A password's first line is at most this long (passwords are tens of bytes; Redis ACL
/// passwords that long are already unusual).
pub(crate) const MAX_PASSWORD_LINE: usize = 4 * 1024;
/// A PEM file of certificates or a key is at most this large (a system's whole CA bundle is
/// about 200 KB).
pub(crate) const MAX_PEM: usize = 4 * 1024 * 1024;

/// A regular file, opened for reading.
pub(crate) struct Opened {
    file: File,
    /// Its permission bits (`0o777`).
    pub(crate) mode: u32,
}

/// Opens `path` for reading if it is a regular file; otherwise, or if it cannot be opened,
/// says why in words.
pub(crate) fn open_regular(path: &Path) -> Result<Opened, String> {
    // O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise. It does nothing to
    // the reads of a regular file. O_NOCTTY: a terminal device must not become ours.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(|err| err.to_string())?;
    let meta = file.metadata().map_err(|err| err.to_string())?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            "a FIFO, socket or device"
        };
        return Err(format!(
            "not a regular file ({kind}); give the path of a file"
        ));
    }
    Ok(Opened {
        file,
        mode: meta.permissions().mode() & 0o777,
    })
}

impl Opened {
    /// The whole file, if it is at most `limit` bytes; `what` names the content in the error.
    pub(crate) fn read_all(mut self, limit: usize, what: &str) -> Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        // One byte more than allowed tells a file at the limit from a larger one (the size
        // from fstat may be stale by the time it is read).
        (&mut self.file)
            .take(u64::try_from(limit).unwrap_or(u64::MAX) + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| err.to_string())?;
        if bytes.len() > limit {
            return Err(format!(
                "larger than {} (no {what} is that large)",
                size(limit)
            ));
        }
        Ok(bytes)
    }

    /// The first line (without its line end), if it is at most `limit` bytes; the rest of the
    /// file is not read.
    pub(crate) fn first_line(mut self, limit: usize) -> Result<String, String> {
        let mut bytes = Vec::new();
        (&mut self.file)
            .take(u64::try_from(limit).unwrap_or(u64::MAX) + 2)
            .read_to_end(&mut bytes)
            .map_err(|err| err.to_string())?;
        let end = bytes
            .iter()
            .position(|byte| *byte == b'\n')
            .unwrap_or(bytes.len());
        let line = &bytes[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > limit {
            bytes.fill(0);
            return Err(format!(
                "the first line is longer than {} (no password is that long)",
                size(limit)
            ));
        }
        let line = String::from_utf8(line.to_vec())
            .map_err(|_| "the first line is not UTF-8 text".to_owned());
        // The rest of what was read may hold more secrets: not left in memory.
        bytes.fill(0);
        line
    }
}

/// `bytes` in the unit a user would write.
fn size(bytes: usize) -> String {
    if bytes >= 1024 * 1024 && bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes / (1024 * 1024))
    } else if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}
