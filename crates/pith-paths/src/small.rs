//! Reading a small text file a stranger may have put where pith looks (a client's settings in
//! a project, a config file named by a variable): a link, a FIFO, a device or a huge file must
//! not hang pith or take its memory. `std::fs::read_to_string` does all three: opening a FIFO
//! waits for a writer, `/dev/zero` never ends.

use std::io::Read;
use std::path::Path;

/// The text of the regular file at `path`, at most `max` bytes: refused unless it is a
/// regular file (looked at before it is opened, and again once open), opened without waiting
/// (a FIFO swapped in between does not block the open) and without becoming a controlling
/// terminal, and refused when longer than `max` (read no further). Links are followed: the
/// caller decides whether a link there is allowed.
pub fn read_small_file(path: &Path, max: u64) -> std::io::Result<String> {
    let not_regular =
        || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        options.custom_flags(flags.bits() as i32);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {}", size(max)),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// `bytes` as a person reads it: `64 MiB`, `2 KiB`.
pub fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_device_or_a_long_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let err = read_small_file(&fifo, 1024).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file");
        let err = read_small_file(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file");
        let long = dir.path().join("long");
        std::fs::write(&long, vec![b'x'; 2049]).unwrap();
        let err = read_small_file(&long, 2048).unwrap_err();
        assert_eq!(err.to_string(), "larger than 2 KiB");
        std::fs::write(&long, "[proxy]\n").unwrap();
        assert_eq!(read_small_file(&long, 2048).unwrap(), "[proxy]\n");
        assert_eq!(
            read_small_file(&dir.path().join("none"), 2048)
                .unwrap_err()
                .kind(),
            std::io::ErrorKind::NotFound
        );
    }
}
