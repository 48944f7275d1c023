//! `import-vidur`: converts Vidur's public profiling CSVs (per-operation CUDA kernel times of
//! dense transformer layers on A100, H100 and A40, and measured collectives) into expertsim op
//! and network profiles (`expertsim_scenario::cost::op_profile`). Each point is the median of the source's
//! repeated measurements; a (size, degree) measured twice keeps the median of the two medians.
//! Every error names the file, the 1-based line and the column.

pub use crate::import_table::ImportError;
use crate::import_table::{Table, file_error};
use expertsim_scenario::cost::op_profile::{
    Collective, CollectiveSeries, DataSource, MeasuredShape, NetworkProfile,
    OP_PROFILE_FORMAT_VERSION, OpProfile, OpSeries, Operation,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the imported data came from (the CSVs do not say).
#[derive(Clone, Debug)]
pub struct Provenance {
    pub repository: String,
    pub commit: String,
    pub licence: String,
}

/// The expertsim catalogue name of one of Vidur's GPU folders.
pub fn gpu_name(folder: &str) -> Option<&'static str> {
    match folder {
        "a100" => Some("A100-80GB"),
        "h100" => Some("H100-SXM"),
        "a40" => Some("A40"),
        _ => None,
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

fn points_of(samples: BTreeMap<u64, Vec<f64>>) -> Vec<(u64, f64)> {
    samples
        .into_iter()
        .map(|(x, mut ys)| (x, median(&mut ys)))
        .collect()
}

const STATISTIC: &str = "median of the source's repeated measurements, converted from ms to ns \
                         (rounded to the picosecond); a size measured on two rows keeps the median \
                         of their medians";

/// Converts one `mlp.csv` of Vidur's compute profiles into an op profile.
pub fn import_compute(
    path: &Path,
    gpu: &str,
    model: &str,
    source_file: &str,
    provenance: &Provenance,
) -> Result<OpProfile, ImportError> {
    let table = Table::read(path)?;
    let tokens_col = table.column("num_tokens")?;
    let tp_col = table.column("num_tensor_parallel_workers")?;
    let shape_cols: Vec<usize> = [
        "n_head",
        "n_kv_head",
        "n_embd",
        "n_expanded_embd",
        "vocab_size",
        "use_gated_mlp",
    ]
    .iter()
    .map(|name| table.column(name))
    .collect::<Result<_, _>>()?;
    // An architecture may lack an operation (phi-2 runs attention and MLP in parallel, with
    // no post-attention norm): the operations whose median column exists are imported.
    let op_cols: Vec<(Operation, usize)> = Operation::ALL
        .iter()
        .filter_map(|&op| {
            let name = format!("time_stats.{op}.median");
            table
                .header
                .iter()
                .position(|h| *h == name)
                .map(|col| (op, col))
        })
        .collect();
    if op_cols.is_empty() {
        return Err(file_error(
            path,
            "no operation columns (expected time_stats.<operation>.median, e.g. time_stats.mlp_up_proj.median)",
        ));
    }

    let shape_at = |row: usize| -> Result<MeasuredShape, ImportError> {
        let gated: String = table.cell(row, shape_cols[5], "True or False")?;
        let use_gated_mlp = match gated.as_str() {
            "True" | "true" => true,
            "False" | "false" => false,
            _ => {
                return Err(ImportError::Cell {
                    path: table.path.clone(),
                    line: table.rows[row].0,
                    column: table.header[shape_cols[5]].clone(),
                    message: format!("expected True or False, got {gated:?}"),
                });
            }
        };
        Ok(MeasuredShape {
            n_head: table.cell(row, shape_cols[0], "a count")?,
            n_kv_head: table.cell(row, shape_cols[1], "a count")?,
            n_embd: table.cell(row, shape_cols[2], "a width")?,
            n_expanded_embd: table.cell(row, shape_cols[3], "a width")?,
            vocab_size: table.cell(row, shape_cols[4], "a count")?,
            use_gated_mlp,
        })
    };
    let shape = shape_at(0)?;
    let mut samples: BTreeMap<(Operation, u32), BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for row in 0..table.rows.len() {
        if shape_at(row)? != shape {
            return Err(ImportError::Cell {
                path: table.path.clone(),
                line: table.rows[row].0,
                column: "n_head..use_gated_mlp".into(),
                message: "the model shape differs from the first row's; one file holds one shape"
                    .into(),
            });
        }
        let tokens: u64 = table.cell(row, tokens_col, "a token count")?;
        let tp: u32 = table.cell(row, tp_col, "a worker count")?;
        if tokens == 0 || tp == 0 {
            return Err(ImportError::Cell {
                path: table.path.clone(),
                line: table.rows[row].0,
                column: table.header[if tokens == 0 { tokens_col } else { tp_col }].clone(),
                message: "must be at least 1".into(),
            });
        }
        for &(op, col) in &op_cols {
            let nanos = table.millis(row, col)?;
            samples
                .entry((op, tp))
                .or_default()
                .entry(tokens)
                .or_default()
                .push(nanos);
        }
    }
    let series = samples
        .into_iter()
        .map(|((operation, tensor_parallel), by_tokens)| OpSeries {
            operation,
            tensor_parallel,
            points: points_of(by_tokens),
        })
        .collect();
    let profile = OpProfile {
        format_version: OP_PROFILE_FORMAT_VERSION,
        gpu: gpu.to_string(),
        model: model.to_string(),
        shape,
        source: DataSource {
            repository: provenance.repository.clone(),
            commit: provenance.commit.clone(),
            file: source_file.to_string(),
            licence: provenance.licence.clone(),
            statistic: STATISTIC.into(),
        },
        series,
    };
    profile
        .check()
        .map_err(|(field, message)| file_error(path, format!("{field}: {message}")))?;
    Ok(profile)
}

/// Converts one of Vidur's collective CSVs (`all_reduce.csv`, `send_recv.csv`) into series.
pub fn import_collective(
    path: &Path,
    collective: Collective,
) -> Result<Vec<CollectiveSeries>, ImportError> {
    let table = Table::read(path)?;
    let time_col = table.column(&format!("time_stats.{}.median", collective.as_str()))?;
    let workers_col = table.column("num_workers")?;
    let size_col = table.column("size")?;
    let per_node_col = table.column("devices_per_node")?;
    let mut samples: BTreeMap<(u32, u32), BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for row in 0..table.rows.len() {
        let workers: u32 = table.cell(row, workers_col, "a worker count")?;
        let per_node: u32 = table.cell(row, per_node_col, "a device count")?;
        let size: u64 = table.cell(row, size_col, "a message size in bytes")?;
        if workers < 2 {
            return Err(ImportError::Cell {
                path: table.path.clone(),
                line: table.rows[row].0,
                column: table.header[workers_col].clone(),
                message: format!("a collective needs at least 2 workers, got {workers}"),
            });
        }
        let nanos = table.millis(row, time_col)?;
        samples
            .entry((workers, per_node))
            .or_default()
            .entry(size)
            .or_default()
            .push(nanos);
    }
    Ok(samples
        .into_iter()
        .map(|((workers, devices_per_node), by_size)| CollectiveSeries {
            collective,
            workers,
            devices_per_node,
            points: points_of(by_size),
        })
        .collect())
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| file_error(dir, format!("cannot list: {e}")))?;
    let mut dirs = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| file_error(dir, format!("cannot list: {e}")))?
            .path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What `import_dir` converted: one line per written file.
pub struct Imported {
    pub written: Vec<(PathBuf, String)>,
}

/// Converts Vidur's `data/` folder (`profiling/compute/<gpu>/<org>/<model>/mlp.csv`,
/// `profiling/network/<topology>/{all_reduce,send_recv}.csv`) into `out/<gpu>/<model>.json`
/// and `out/network/<topology>.json`. `only` keeps the models (`org/model`) and topologies named.
pub fn import_dir(
    dir: &Path,
    out: &Path,
    only: &[String],
    provenance: &Provenance,
) -> Result<Imported, ImportError> {
    let compute = dir.join("profiling").join("compute");
    let network = dir.join("profiling").join("network");
    if !compute.is_dir() && !network.is_dir() {
        return Err(file_error(
            dir,
            "neither profiling/compute nor profiling/network is here (give Vidur's data/ folder)",
        ));
    }
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let mut written = Vec::new();
    let mut seen = 0usize;
    if compute.is_dir() {
        for gpu_dir in sorted_dirs(&compute)? {
            let folder = name_of(&gpu_dir);
            let gpu = gpu_name(&folder).ok_or_else(|| {
                file_error(&gpu_dir, "unknown GPU folder (expected a100, h100 or a40)")
            })?;
            for org_dir in sorted_dirs(&gpu_dir)? {
                for model_dir in sorted_dirs(&org_dir)? {
                    let model = format!("{}/{}", name_of(&org_dir), name_of(&model_dir));
                    if !wanted(&model) {
                        continue;
                    }
                    seen += 1;
                    let csv = model_dir.join("mlp.csv");
                    let source_file = format!("data/profiling/compute/{folder}/{model}/mlp.csv");
                    let profile = import_compute(&csv, gpu, &model, &source_file, provenance)?;
                    let target = out
                        .join(&folder)
                        .join(format!("{}.json", name_of(&model_dir)));
                    create_parent(&target)?;
                    profile.save(&target)?;
                    let points: usize = profile.series.iter().map(|s| s.points.len()).sum();
                    written.push((
                        target,
                        format!(
                            "{model} on {gpu}: {} series, {points} points",
                            profile.series.len()
                        ),
                    ));
                }
            }
        }
    }
    if network.is_dir() {
        for topology_dir in sorted_dirs(&network)? {
            let topology = name_of(&topology_dir);
            if !wanted(&topology) {
                continue;
            }
            seen += 1;
            let mut series = Vec::new();
            let mut sources = Vec::new();
            for collective in [Collective::AllReduce, Collective::SendRecv] {
                let csv = topology_dir.join(format!("{}.csv", collective.as_str()));
                if !csv.exists() {
                    continue;
                }
                series.extend(import_collective(&csv, collective)?);
                sources.push(DataSource {
                    repository: provenance.repository.clone(),
                    commit: provenance.commit.clone(),
                    file: format!(
                        "data/profiling/network/{topology}/{}.csv",
                        collective.as_str()
                    ),
                    licence: provenance.licence.clone(),
                    statistic: STATISTIC.into(),
                });
            }
            if series.is_empty() {
                return Err(file_error(
                    &topology_dir,
                    "no all_reduce.csv or send_recv.csv here",
                ));
            }
            let profile = NetworkProfile {
                format_version: OP_PROFILE_FORMAT_VERSION,
                topology: topology.clone(),
                sources,
                series,
            };
            let target = out.join("network").join(format!("{topology}.json"));
            create_parent(&target)?;
            profile.save(&target)?;
            written.push((
                target,
                format!("{topology}: {} series", profile.series.len()),
            ));
        }
    }
    for name in only {
        let found = written.iter().any(|(path, line)| {
            line.starts_with(&format!("{name} on"))
                || line.starts_with(&format!("{name}:"))
                || path
                    .file_stem()
                    .is_some_and(|s| s.to_string_lossy() == name.as_str())
        });
        if !found {
            return Err(file_error(
                dir,
                format!("--only {name:?}: no such model (org/model) or network topology here"),
            ));
        }
    }
    if seen == 0 {
        return Err(file_error(dir, "nothing to import"));
    }
    Ok(Imported { written })
}

fn create_parent(path: &Path) -> Result<(), ImportError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| file_error(parent, format!("cannot create: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vidur")
    }

    fn provenance() -> Provenance {
        Provenance {
            repository: "github.com/microsoft/vidur".into(),
            commit: "7d47513".into(),
            licence: "MIT".into(),
        }
    }

    /// The fixture is a 26-row subset of Vidur's A100 Meta-Llama-3-8B file (tensor parallelism
    /// 1 and 2, 1 to 2048 tokens), with the 2048-token rows measured twice as in the source.
    #[test]
    fn compute_profile_keeps_the_measured_medians() {
        let csv = fixtures().join("profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv");
        let p = import_compute(
            &csv,
            "A100-80GB",
            "meta-llama/Meta-Llama-3-8B",
            "f.csv",
            &provenance(),
        )
        .unwrap();
        assert_eq!(p.shape.n_embd, 4096);
        assert_eq!(p.shape.n_expanded_embd, 14336);
        assert!(p.shape.use_gated_mlp);
        assert_eq!(p.tensor_parallel_degrees(), vec![1, 2]);
        assert_eq!(p.series.len(), 20);
        let up = p.series(Operation::MlpUpProj, 1).unwrap();
        // The 8-token row's median is 0.149 ms, the 16-token row's 0.1515 ms.
        assert_eq!(up.nanos_at(8), Ok(149_000.0));
        assert_eq!(up.nanos_at(16), Ok(151_500.0));
        assert_eq!(up.nanos_at(12), Ok(150_250.0));
        // 2048 tokens appear on two rows (2.2485 and 2.309 ms): the median of two is their mean.
        assert_eq!(up.nanos_at(2048), Ok(2_278_750.0));
        assert_eq!(up.range(), (1, 2048));
        assert!(up.nanos_at(4096).is_err());
        // The importer's profile survives the round trip through its JSON.
        let back = OpProfile::from_json(&p.to_json(), Path::new("p.json")).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn collective_profile_groups_by_workers() {
        let csv = fixtures().join("profiling/network/a100_dgx/all_reduce.csv");
        let series = import_collective(&csv, Collective::AllReduce).unwrap();
        assert_eq!(series.len(), 1);
        assert_eq!((series[0].workers, series[0].devices_per_node), (2, 2));
        assert_eq!(series[0].points[0], (2048, 10_000.0));
        assert_eq!(series[0].points[1], (10240, 46_000.0));
    }

    #[test]
    fn import_dir_writes_one_file_per_model_and_topology() {
        let out = tempfile::tempdir().unwrap();
        let imported = import_dir(&fixtures(), out.path(), &[], &provenance()).unwrap();
        let names: Vec<String> = imported
            .written
            .iter()
            .map(|(p, _)| p.strip_prefix(out.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            ["a100/Meta-Llama-3-8B.json", "network/a100_dgx.json"]
        );
        let p = OpProfile::load(&out.path().join("a100/Meta-Llama-3-8B.json")).unwrap();
        assert_eq!(p.gpu, "A100-80GB");
        assert_eq!(
            p.source.file,
            "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
        );
        assert_eq!(p.source.commit, "7d47513");
        let err = import_dir(&fixtures(), out.path(), &["x/y".into()], &provenance())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--only \"x/y\""), "{err}");
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("mlp.csv");
        std::fs::write(&path, text).unwrap();
        path
    }

    const HEADER: &str = "time_stats.mlp_up_proj.median,n_head,n_kv_head,n_embd,n_expanded_embd,\
                          vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers";

    #[test]
    fn bad_cells_name_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let import = |text: &str| {
            let path = write(dir.path(), text);
            import_compute(&path, "A100-80GB", "m", "f", &provenance())
                .err()
                .unwrap()
                .to_string()
        };
        let ok_row = "0.1,32,8,4096,14336,128256,True,1,1";
        let err = import(&format!(
            "{HEADER}\n{ok_row}\n0.2,32,8,4096,14336,128256,True,x,1\n"
        ));
        assert!(err.contains("mlp.csv:3: column \"num_tokens\""), "{err}");
        let err = import(&format!(
            "{HEADER}\n{ok_row}\n-0.2,32,8,4096,14336,128256,True,2,1\n"
        ));
        assert!(
            err.contains(":3: column \"time_stats.mlp_up_proj.median\"")
                && err.contains("positive"),
            "{err}"
        );
        let err = import(&format!(
            "{HEADER}\n{ok_row}\n0.2,32,8,4096,11008,128256,True,2,1\n"
        ));
        assert!(
            err.contains(":3:") && err.contains("shape differs"),
            "{err}"
        );
        let err = import("n_head,num_tokens\n1,2\n");
        assert!(
            err.contains("no column \"num_tensor_parallel_workers\""),
            "{err}"
        );
        let err = import(&format!("{HEADER}\n"));
        assert!(err.contains("no rows"), "{err}");
    }
}
