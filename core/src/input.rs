//! Reading a user-named input file (trace, profile, scenario, cell file) safely: a regular file
//! only (never a device or a pipe, which could stream forever), of at most a ceiling of bytes,
//! as UTF-8 text with the line of a bad byte named. Every reader of a file a user names goes
//! through here; it sits below the cost model and the scenario loader, which both read files.

/// The largest input file (trace, profile, cell file) read: inputs are read whole into memory.
pub const MAX_INPUT_FILE_BYTES: u64 = 1 << 30;

/// The largest scenario, claims or shard-manifest file read: hand-written or small generated
/// text, parsed into a document whose memory is a multiple of the text's (the 40,000 x 40,000
/// sweep of docs/limits.md is a 480 KB file).
pub const MAX_SCENARIO_FILE_BYTES: u64 = 4 << 20;

/// Opens a user-named input file for reading: it must be a regular file (not a device or a
/// pipe, which could stream forever) of at most `MAX_INPUT_FILE_BYTES`; reads stop there.
pub fn open_input(path: &std::path::Path) -> std::io::Result<std::io::Take<std::fs::File>> {
    open_input_limited(path, MAX_INPUT_FILE_BYTES)
}

/// `open_input` with a ceiling of `max_bytes`.
pub fn open_input_limited(
    path: &std::path::Path,
    max_bytes: u64,
) -> std::io::Result<std::io::Take<std::fs::File>> {
    use std::io::{Error, ErrorKind, Read};
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device, pipe or folder is not read)",
        ));
    }
    if metadata.len() > max_bytes {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} bytes, above the {max_bytes}-byte limit on this kind of input file \
                 (docs/limits.md)",
                metadata.len()
            ),
        ));
    }
    // Opened without blocking: a path swapped for a pipe after the check above must not hang
    // the open (reads are bounded by `take` whatever the file turns out to be).
    #[cfg(unix)]
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?
    };
    #[cfg(not(unix))]
    let file = std::fs::File::open(path)?;
    if !file.metadata()?.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device, pipe or folder is not read)",
        ));
    }
    Ok(file.take(max_bytes))
}

/// Reads a user-named input file (`open_input`) as UTF-8 text; a bad byte is reported with its
/// line.
pub fn read_input_text(path: &std::path::Path) -> std::io::Result<String> {
    read_input_text_limited(path, MAX_INPUT_FILE_BYTES)
}

/// `read_input_text` with a ceiling of `max_bytes`.
pub fn read_input_text_limited(path: &std::path::Path, max_bytes: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_input_limited(path, max_bytes)?.read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line {line}: not UTF-8 text (invalid byte at offset {at})"),
        )
    })
}

/// Reads a user-named input file of at most `max_bytes` (`open_input_limited`) as bytes.
pub fn read_input_bytes(path: &std::path::Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_input_limited(path, max_bytes)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_utf8_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("latin1.csv");
        std::fs::write(&bad, b"a,b\n1,\xe9\n").unwrap();
        let err = read_input_text(&bad).unwrap_err().to_string();
        assert!(err.contains("line 2: not UTF-8"), "{err}");
        assert!(
            read_input_text(dir.path())
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        assert!(
            read_input_text(std::path::Path::new("/dev/zero"))
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        let big = dir.path().join("big.toml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_SCENARIO_FILE_BYTES + 1)
            .unwrap();
        let err = read_input_text_limited(&big, MAX_SCENARIO_FILE_BYTES).unwrap_err();
        assert!(err.to_string().contains("byte limit"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("partial-1-of-1.json");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let err = read_input_bytes(&fifo, 1024).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
