//! `expertsim price`: the committed H200 price inputs (`profiles/h200/price_{graph,eager}.csv`,
//! every point of `profiles/h200/kernels.json`) come back with the very predictions the H200
//! fidelity check holds to the bar (`expertsim_scenario::cost::fidelity`), and a refused row is named with the
//! file, line and column, exit code 2, nothing written.

use crate::common::{expertsim, stderr};
use expertsim_scenario::cost::fidelity::price_points;
use expertsim_scenario::cost::gpu::GpuSpec;
use expertsim_scenario::cost::kernel::Timing;
use expertsim_scenario::cost::kernel_timings::KernelTimings;

/// The `predicted_us` column of `expertsim price <input> --timing <timing>`.
fn predicted(input: &str, timing: &str) -> Vec<f64> {
    let output = expertsim(&["price", input, "--timing", timing]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = header.iter().position(|h| *h == "predicted_us").unwrap();
    lines
        .map(|l| l.split(',').nth(column).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn price_reproduces_the_h200_fidelity_predictions() {
    let points = price_points(&KernelTimings::h200(), &GpuSpec::by_name("H200").unwrap());
    for (input, timing, kind) in [
        ("profiles/h200/price_graph.csv", "graph", Timing::Graph),
        ("profiles/h200/price_eager.csv", "eager", Timing::Eager),
    ] {
        let expected: Vec<f64> = points
            .iter()
            .filter(|p| p.timing == kind)
            .map(|p| p.priced.predicted_ns / 1e3)
            .collect();
        let got = predicted(input, timing);
        assert_eq!(got.len(), expected.len(), "{input}");
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            // The CSV carries three decimals of a microsecond.
            assert!(
                (g - e).abs() <= 0.0005 + 1e-9,
                "{input} row {}: {g} vs {e}",
                i + 2
            );
        }
    }
}

#[test]
fn a_refused_price_row_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("ops.csv");
    std::fs::write(
        &input,
        "gpu,model,op,tokens\nH200,mixtral-8x7b,expert_up,16\nH200,mixtral-8x7b,expert_up,-3\n",
    )
    .unwrap();
    let out = dir.path().join("priced.csv");
    let output = expertsim(&[
        "price",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!("error: {}:3: column \"tokens\"", input.display())),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!out.exists(), "nothing is written for a refused input");
}
