//! A GPU's link to its host's memory, from measured copies: `latency + bytes / bandwidth` fitted
//! to the page-locked copy times `scripts/host_link_bandwidth.cu` writes
//! (`profiles/measured/host-link/<gpu>.csv`), which `LinkSpec::PCIE5_X16` is held to.

use crate::gpu::LinkSpec;

/// The fit of one host-link measurement file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostLinkFit {
    /// Latency and bandwidth of one copy in one direction.
    pub link: LinkSpec,
    /// Copies fitted (page-locked, one direction at a time, every size).
    pub points: usize,
    /// The largest |predicted / measured - 1| over those copies.
    pub max_relative_error: f64,
    /// Bytes per second each way when both directions copy at once (the largest such copy).
    pub both_directions_bytes_per_s: Option<f64>,
}

/// One row of the measurement file.
struct CopyTime {
    direction: String,
    host: String,
    bytes: f64,
    median_ns: f64,
}

const HEADER: &str = "direction,host,bytes,median_us,min_us,max_us,reps";

/// Fits `latency + bytes / bandwidth` to the page-locked one-direction copies of `csv` (read from
/// `source`, named in errors), minimising the squared relative error (a weighted linear least
/// squares, so small copies weigh as much as large ones).
pub fn fit_copy_times(csv: &str, source: &str) -> Result<HostLinkFit, String> {
    let rows = parse(csv, source)?;
    let one_way: Vec<&CopyTime> = rows
        .iter()
        .filter(|r| r.host == "pinned" && (r.direction == "h2d" || r.direction == "d2h"))
        .collect();
    if one_way.len() < 2 {
        return Err(format!(
            "{source}: {} page-locked one-direction copies (h2d or d2h, host pinned); at least 2 are needed to fit a latency and a bandwidth",
            one_way.len()
        ));
    }
    // Rows (1/t, x/t) against 1: the normal equations of min sum((a + b x - t) / t)^2.
    let (mut s11, mut s12, mut s22, mut r1, mut r2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for row in &one_way {
        let (x, t) = (row.bytes, row.median_ns);
        s11 += 1.0 / (t * t);
        s12 += x / (t * t);
        s22 += x * x / (t * t);
        r1 += 1.0 / t;
        r2 += x / t;
    }
    let det = s11 * s22 - s12 * s12;
    let latency_ns = (r1 * s22 - r2 * s12) / det;
    let ns_per_byte = (s11 * r2 - s12 * r1) / det;
    if !(det > 1e-9 * s11 * s22 && latency_ns >= 0.0 && ns_per_byte > 0.0) {
        return Err(format!(
            "{source}: the copies give no positive latency and bandwidth (latency {latency_ns} ns, {ns_per_byte} ns per byte): are the sizes all equal?"
        ));
    }
    let link = LinkSpec {
        bandwidth_bytes_per_s: 1e9 / ns_per_byte,
        latency_ns,
    };
    let max_relative_error = one_way
        .iter()
        .map(|r| (link.transfer_ns(r.bytes) / r.median_ns - 1.0).abs())
        .fold(0.0, f64::max);
    let both_directions_bytes_per_s = rows
        .iter()
        .filter(|r| r.host == "pinned" && r.direction == "both")
        .max_by(|a, b| a.bytes.total_cmp(&b.bytes))
        .map(|r| r.bytes / r.median_ns * 1e9);
    Ok(HostLinkFit {
        link,
        points: one_way.len(),
        max_relative_error,
        both_directions_bytes_per_s,
    })
}

fn parse(csv: &str, source: &str) -> Result<Vec<CopyTime>, String> {
    let mut lines = csv.lines().enumerate();
    match lines.next() {
        Some((_, header)) if header.trim() == HEADER => {}
        Some((_, header)) => {
            return Err(format!(
                "{source}:1: the header is `{}`; expected `{HEADER}`",
                header.trim()
            ));
        }
        None => return Err(format!("{source}: empty; expected the header `{HEADER}`")),
    }
    let mut rows = Vec::new();
    for (index, line) in lines {
        let line_no = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != 7 {
            return Err(format!(
                "{source}:{line_no}: {} fields; expected 7 ({HEADER})",
                fields.len()
            ));
        }
        let number = |column: usize, name: &str| -> Result<f64, String> {
            match fields[column].parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
                _ => Err(format!(
                    "{source}:{line_no}: field `{name}` is `{}`; expected a positive number",
                    fields[column]
                )),
            }
        };
        let direction = fields[0];
        if !matches!(direction, "h2d" | "d2h" | "both") {
            return Err(format!(
                "{source}:{line_no}: field `direction` is `{direction}`; expected h2d, d2h or both"
            ));
        }
        let host = fields[1];
        if !matches!(host, "pinned" | "pageable") {
            return Err(format!(
                "{source}:{line_no}: field `host` is `{host}`; expected pinned or pageable"
            ));
        }
        rows.push(CopyTime {
            direction: direction.to_string(),
            host: host.to_string(),
            bytes: number(2, "bytes")?,
            median_ns: number(3, "median_us")? * 1e3,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured_file(gpu: &str) -> String {
        let path = format!(
            "{}/../profiles/measured/host-link/{gpu}.csv",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn h200_file() -> String {
        measured_file("nvidia-h200")
    }

    #[test]
    fn the_h100s_measured_copies_fit_the_same_link_within_2_percent() {
        let fit = fit_copy_times(&measured_file("nvidia-h100-80gb-hbm3"), "h100.csv").unwrap();
        let constant = LinkSpec::PCIE5_X16;
        let bandwidth = fit.link.bandwidth_bytes_per_s / constant.bandwidth_bytes_per_s - 1.0;
        let latency = fit.link.latency_ns / constant.latency_ns - 1.0;
        assert!(bandwidth.abs() < 0.02, "{bandwidth}");
        assert!(latency.abs() < 0.02, "{latency}");
    }

    #[test]
    fn pcie5_is_the_h200s_measured_copies() {
        let fit = fit_copy_times(&h200_file(), "nvidia-h200.csv").unwrap();
        let constant = LinkSpec::PCIE5_X16;
        let relative = |a: f64, b: f64| (a / b - 1.0).abs();
        assert!(
            relative(
                constant.bandwidth_bytes_per_s,
                fit.link.bandwidth_bytes_per_s
            ) < 1e-3,
            "PCIE5_X16 {} B/s, the fit {} B/s",
            constant.bandwidth_bytes_per_s,
            fit.link.bandwidth_bytes_per_s
        );
        assert!(
            relative(constant.latency_ns, fit.link.latency_ns) < 1e-3,
            "PCIE5_X16 {} ns, the fit {} ns",
            constant.latency_ns,
            fit.link.latency_ns
        );
        assert_eq!(fit.points, 16);
        // Every copy of 1 MiB or more within 7 % of the fit, the 64 KiB ones within 16 %.
        assert!(fit.max_relative_error < 0.16, "{}", fit.max_relative_error);
        // Both directions at once: each close to one direction's rate (full duplex).
        let both = fit.both_directions_bytes_per_s.unwrap();
        assert!(both > 0.85 * fit.link.bandwidth_bytes_per_s, "{both}");
    }

    #[test]
    fn a_line_and_latency_are_recovered_exactly() {
        let mut csv = format!("{HEADER}\n");
        for bytes in [1e5, 1e6, 1e7, 1e8] {
            let us = (2_000.0 + bytes / 40.0) / 1e3; // 2 us + 40 GB/s
            csv.push_str(&format!("h2d,pinned,{bytes},{us},{us},{us},3\n"));
            csv.push_str(&format!("h2d,pageable,{bytes},{},{us},{us},3\n", us * 3.0));
        }
        let fit = fit_copy_times(&csv, "t.csv").unwrap();
        assert!((fit.link.latency_ns - 2_000.0).abs() < 1e-6);
        assert!((fit.link.bandwidth_bytes_per_s / 40e9 - 1.0).abs() < 1e-12);
        assert_eq!(fit.points, 4);
        assert!(fit.max_relative_error < 1e-12);
        assert_eq!(fit.both_directions_bytes_per_s, None);
    }

    #[test]
    fn bad_files_name_the_line_and_field() {
        let header = format!("{HEADER}\n");
        let err = fit_copy_times("a,b\n", "x.csv").unwrap_err();
        assert!(err.starts_with("x.csv:1: the header"), "{err}");
        let err = fit_copy_times(&format!("{header}h2d,pinned,-4,1,1,1,3\n"), "x.csv").unwrap_err();
        assert!(err.contains("x.csv:2: field `bytes` is `-4`"), "{err}");
        let err = fit_copy_times(&format!("{header}up,pinned,4,1,1,1,3\n"), "x.csv").unwrap_err();
        assert!(err.contains("x.csv:2: field `direction` is `up`"), "{err}");
        let err = fit_copy_times(&format!("{header}h2d,pinned,4,1\n"), "x.csv").unwrap_err();
        assert!(err.contains("x.csv:2: 4 fields"), "{err}");
        let err = fit_copy_times(&format!("{header}h2d,pinned,4,1,1,1,3\n"), "x.csv").unwrap_err();
        assert!(err.contains("1 page-locked"), "{err}");
        let err = fit_copy_times(
            &format!("{header}h2d,pinned,4,1,1,1,3\nd2h,pinned,4,2,1,1,3\n"),
            "x.csv",
        )
        .unwrap_err();
        assert!(err.contains("no positive latency"), "{err}");
    }
}
