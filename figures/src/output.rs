//! Encoding (PNG) and atomic file output.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::FigureError;

/// Encodes a packed 8-bit RGB buffer as PNG (no timestamps or other varying metadata).
pub(crate) fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, FigureError> {
    let encode_error = |e: png::EncodingError| FigureError::Encode(e.to_string());
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Default);
    let mut writer = encoder.write_header().map_err(encode_error)?;
    writer.write_image_data(rgb).map_err(encode_error)?;
    writer.finish().map_err(encode_error)?;
    Ok(out)
}

/// `<stem>.<ext>`, keeping any dots already in the stem's file name.
pub(crate) fn with_suffix(stem: &Path, ext: &str) -> Result<PathBuf, FigureError> {
    let Some(name) = stem.file_name() else {
        return Err(FigureError::InvalidOutputPath {
            path: stem.to_path_buf(),
        });
    };
    let mut name: OsString = name.to_os_string();
    name.push(".");
    name.push(ext);
    Ok(stem.with_file_name(name))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// renamed over `path` once complete. Errors name `path`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FigureError> {
    let io_error = |source: std::io::Error| FigureError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".figure-").suffix(".tmp");
    // Temporary files are owner-only by default; the output should be an ordinary file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(io_error)?;
    tmp.write_all(bytes).map_err(io_error)?;
    tmp.as_file().sync_all().map_err(io_error)?;
    tmp.persist(path).map_err(|e| io_error(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_keeps_dots_in_stem() {
        assert_eq!(
            with_suffix(Path::new("out/p99.v2"), "png").unwrap(),
            PathBuf::from("out/p99.v2.png")
        );
        assert_eq!(
            with_suffix(Path::new("fig"), "svg").unwrap(),
            PathBuf::from("fig.svg")
        );
        assert!(matches!(
            with_suffix(Path::new("/"), "png"),
            Err(FigureError::InvalidOutputPath { .. })
        ));
    }
}
