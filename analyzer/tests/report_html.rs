//! `analyzer report`'s page on a large generated run: it stays under 5 MB, its elements nest, and the
//! verdict, the plots and the tables survive the decimation that keeps it small.
//!
//! The page's size follows the ops of the plotted step (the error plot: here 100,000), the steps times the
//! layers (the series and heatmaps: here 100 steps, 100 layers in three phases, two ranks) and the rows of
//! the tables (here tens of thousands of failing ops and unmatched tensors, cut to their first rows): every
//! one at the size of a run of 10^5 ops x 100 steps. The other steps' ops only feed those aggregates, so they
//! are a few hundred per step here, which keeps the index (and the test) small.

use accutrace_formats::stats::TensorStats;
use accutrace_formats::DType;
use analyzer::compare::{compare, CompareOptions};
use analyzer::filter::Filter;
use analyzer::index::{Index, Io, TensorInfo};
use analyzer::overflow::overflow;
use analyzer::problems::InputProblems;
use analyzer::ranks::{analyze, events::RunEvents};
use analyzer::report::html::svg::{MAX_ROWS, PLOT_WIDTH};
use analyzer::report::html::{self, Findings};
use analyzer::series::series;
use analyzer::sources::Source;
use std::path::{Path, PathBuf};

const OPS_IN_STEP_0: usize = 100_000;
const STEPS: u64 = 100;
const LAYERS: usize = 100;
/// Ops of step 0 from this one on are off in the target: the first of them is the culprit.
const FIRST_BAD: usize = 60_000;

/// A run made up in memory: tensor values follow from each tensor's `locator`, so the target and the
/// benchmark agree except where the target is made to differ.
struct Generated {
    root: PathBuf,
    index: Index,
    target: bool,
}

impl Generated {
    fn values(&self, t: usize) -> Vec<f32> {
        let key = self.index.tensors[t].locator;
        let base = 1.0 + (key % 97) as f32 * 0.01;
        let mut v = vec![base, -base, 2.0 * base, 0.5];
        if self.target && key >= FIRST_BAD as u64 && key < OPS_IN_STEP_0 as u64 {
            v[1] = 3.0 * base;
        }
        v
    }
}

impl Source for Generated {
    fn kind(&self) -> &'static str {
        "capture"
    }
    fn root(&self) -> &Path {
        &self.root
    }
    fn index(&self) -> &Index {
        &self.index
    }
    fn read_values(&self, tensor: usize, out: &mut Vec<f32>) -> anyhow::Result<()> {
        *out = self.values(tensor);
        Ok(())
    }
    fn content_hash(&self, tensor: usize) -> anyhow::Result<u64> {
        let v = self.values(tensor);
        Ok(v.iter().fold(self.index.tensors[tensor].locator, |h, x| h.rotate_left(7) ^ x.to_bits() as u64))
    }
}

fn tensor(op: usize, io: Io, key: u64, shape: Vec<u64>, original_op: Option<(String, u32)>) -> TensorInfo {
    let mut t = TensorInfo::new(op, io, 0, DType::FLOAT, shape);
    t.set_original_op(original_op.map(|(name, i)| (name.into(), i)));
    t.locator = key;
    t
}

/// Step 0: a chain of 100,000 ops over 100 layers (every tenth a fused kernel), each reading the previous
/// one's output (the benchmark keeps the outputs only). With `all_steps`, steps 1-99 on two ranks too: per layer a forward op, a backward op and an
/// optimizer update, and the loss. Statistics are stored, as a capture stores them.
fn generate(target: bool, all_steps: bool) -> Generated {
    let mut index = Index::default();
    for k in 0..OPS_IN_STEP_0 {
        let layer = k * LAYERS / OPS_IN_STEP_0;
        let fused = k % 10 == 0;
        let (name, op_type) = if fused {
            (format!("model/layer_{layer}/fused_{k}"), "FusedMatMulBiasGelu")
        } else {
            (format!("model/layer_{layer}/op_{k}/MatMul"), "MatMulV2")
        };
        let op = index.push_op(name, op_type.into(), 0, 0);
        // The benchmark dumps outputs only (as a framework's .npy export does): half the pairs to measure.
        if k > 0 && target {
            index.push_tensor(tensor(op, Io::Input, k as u64 - 1, vec![4], None));
        }
        let original = fused.then(|| (format!("model/layer_{layer}/Gelu_{k}"), 0));
        index.push_tensor(tensor(op, Io::Output, k as u64, vec![4], original));
    }
    if all_steps {
        let mut key = OPS_IN_STEP_0 as u64;
        for step in 1..STEPS {
            for rank in 0..2 {
                let mut add =
                    |index: &mut Index, name: String, op_type: &str, inputs: usize, shape: Vec<u64>| {
                        let op = index.push_op(name, op_type.into(), step, rank);
                        for _ in 0..inputs {
                            index.push_tensor(tensor(op, Io::Input, key, vec![4], None));
                            key += 1;
                        }
                        index.push_tensor(tensor(op, Io::Output, key, shape, None));
                        key += 1;
                    };
                for l in 0..LAYERS {
                    add(&mut index, format!("model/layer_{l}/mlp/MatMul"), "MatMulV2", 0, vec![4]);
                }
                add(&mut index, "model/loss/Mean".into(), "ReduceMeanD", 0, vec![]);
                for l in (0..LAYERS).rev() {
                    add(
                        &mut index,
                        format!("gradients/model/layer_{l}/mlp/MatMul_grad"),
                        "MatMulV2",
                        0,
                        vec![4],
                    );
                }
                for l in 0..LAYERS {
                    add(
                        &mut index,
                        format!("optimizer/model/layer_{l}/w/ApplyAdam"),
                        "ApplyAdamD",
                        2,
                        vec![4],
                    );
                }
            }
        }
    }
    let mut run =
        Generated { root: PathBuf::from(if target { "runs/big" } else { "bench/big" }), index, target };
    let stats: Vec<TensorStats> = (0..run.index.tensors.len())
        .map(|t| {
            let v = run.values(t);
            let n = run.index.tensors[t].shape.iter().product::<u64>() as usize;
            TensorStats::of_f32(&v[..n.min(v.len())], DType::FLOAT)
        })
        .collect();
    for (t, s) in stats.into_iter().enumerate() {
        run.index.set_stats(t, Some(s));
    }
    run
}

/// Every element opened is closed in order (void elements and `/>` aside); script and style bodies are
/// skipped. Returns how many elements were opened.
fn check_nesting(html: &str) -> usize {
    const VOID: [&str; 6] = ["meta", "input", "br", "img", "hr", "link"];
    let mut open: Vec<String> = Vec::new();
    let mut count = 0;
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let end = rest.find('>').expect("an unclosed tag");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') {
            continue;
        }
        let name: String =
            tag.trim_start_matches('/').chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        if let Some(closing) = tag.strip_prefix('/') {
            let top = open.pop().unwrap_or_else(|| panic!("</{closing}> closes nothing"));
            assert_eq!(top, name, "<{top}> closed by </{name}>");
        } else if !tag.ends_with('/') && !VOID.contains(&name.as_str()) {
            count += 1;
            if name == "script" || name == "style" {
                let close = format!("</{name}>");
                rest = &rest[rest.find(&close).expect("closed")..];
            }
            open.push(name);
        }
    }
    assert!(open.is_empty(), "never closed: {open:?}");
    count
}

#[test]
fn a_large_run_makes_a_page_under_five_megabytes() {
    let (target, bench) = rayon::join(|| generate(true, true), || generate(false, false));
    let filter = Filter::default();
    let comparison = compare(&target, &bench, &CompareOptions::default());
    assert!(comparison.refused.is_none(), "{:?}", comparison.refused);
    let overflowed = overflow(&target, &filter, false);
    let target_series = series(&target, &filter, false);
    let across_ranks = analyze("runs/big", &RunEvents::from_source(&target, &filter), None);
    let findings = Findings {
        target: &target,
        bench: Some(&bench),
        comparison: Some(&comparison),
        diff: Some(Err("not asked".into())),
        overflow: &overflowed,
        ranks: Some(&across_ranks),
        check: None,
        watch: None,
        series: &target_series,
        bench_series: None,
        problems: &InputProblems::default(),
        version: "test".into(),
        command_line: "analyzer report runs/big bench/big".into(),
    };
    let mut page = Vec::new();
    let mut stages = Vec::new();
    html::write(&findings, &mut page, &mut |s| stages.push(s.to_string())).expect("written");
    let html = String::from_utf8(page).expect("UTF-8");
    // To look at it (or hand it to scripts/browser-check): REPORT_HTML_KEEP=big.html cargo test ...
    if let Some(keep) = std::env::var_os("REPORT_HTML_KEEP") {
        std::fs::write(keep, &html).expect("kept");
    }
    eprintln!("page: {} bytes, {} elements", html.len(), check_nesting(&html));
    assert!(html.len() < 5_000_000, "the page is {} bytes", html.len());
    assert!(stages.len() >= 3, "progress told {stages:?}");

    // The verdict names the first bad op of the chain.
    let culprit = format!("model/layer_{}/fused_{FIRST_BAD}", FIRST_BAD * LAYERS / OPS_IN_STEP_0);
    assert!(html
        .contains(&format!("<b>CULPRIT</b> step 0 rank 0: <a href=\"#failing-0\"><code>{culprit}</code>")));
    // The error plot: 100,000 ops in at most four points per pixel column per series, the culprit marked.
    let error = &html[html.find("<svg id=\"plot-error\"").expect("error plot")..];
    let error = &error[..error.find("</svg>").expect("closed")];
    assert!(error.contains(&format!("CULPRIT {culprit}")));
    for series in error.split("<polyline points=\"").skip(1) {
        let points = series[..series.find('"').expect("quoted")].split(' ').count();
        assert!(points <= 4 * (PLOT_WIDTH as usize + 2), "{points} points in one line");
    }
    let markers = error.matches("<circle").count();
    assert!((10..=3 * (PLOT_WIDTH as usize + 2) + 3).contains(&markers), "{markers} markers");
    // Heatmaps fit: 300 layer rows merged into at most MAX_ROWS, 100 steps kept.
    let heat = &html[html.find("<svg id=\"heat-maxabs\"").expect("heatmap")..];
    let rows = &heat[heat.find("data-rows=\"").expect("rows") + 11..];
    let rows = rows[..rows.find('"').expect("quoted")].split('\u{1f}').count();
    assert!((MAX_ROWS / 2..=MAX_ROWS).contains(&rows), "{rows} rows");
    assert!(html.contains("<svg id=\"heat-ranks\""), "two ranks: rank x step");
    assert!(
        html.contains("<svg id=\"heat-rank-events\""),
        "two ranks: the cross-rank analysis's rank x step"
    );
    // Loss and gradient norms over the 99 steps that have them.
    assert!(html.contains("<title>target (model/loss/Mean)</title>"));
    assert!(html.contains("<title>global</title>"));
    // Tables are cut, and say so.
    let failing = comparison.failing_ops.len();
    assert_eq!(failing, OPS_IN_STEP_0 - FIRST_BAD);
    assert!(html.contains(&format!("The first 2000 of {failing} rows")));
    assert!(!html.contains("id=\"failing-2000\""));
}
