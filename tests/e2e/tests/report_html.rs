//! `analyzer report`: the page made from real runs of the simulated runtime leads with the commands'
//! verdicts and carries the plots the runs can feed, with their series and marks, and nothing from outside
//! the file. (The real browser opens the demo's pages in `scripts/browser-check`; the page's size on a large
//! run is bounded in analyzer/tests/report_html.rs.)

mod common;
use common::*;

fn report(args: &[&str]) -> (i32, String) {
    let (code, stdout, stderr) = analyzer(args);
    assert!(stdout.contains("report written to"), "{stdout}\n{stderr}");
    (code, stderr)
}

#[test]
fn a_fused_kernel_against_its_benchmark_on_two_ranks() {
    let dir = scratch();
    let model =
        model_file(dir.path(), "npu.json", r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#);
    let npu = dir.path().join("npu");
    let (collector, sim_train, lib) = (collector_lib(), sim_train_bin(), runtime_lib());
    let (code, out, err) = analyzer(&[
        "record",
        "-o",
        path_str(&npu),
        "--collector",
        path_str(&collector),
        "--mode",
        "tensor",
        "--",
        path_str(&sim_train),
        "--model",
        path_str(&model),
        "--lib",
        path_str(&lib),
        "--steps",
        "3",
        "--ranks",
        "2",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let bench = dir.path().join("bench");
    sim_bench(&model, 3, &bench);
    let file = dir.path().join("report.html");
    let (code, _) =
        report(&["report", path_str(&npu), path_str(&bench), "-o", path_str(&file), "--no-progress"]);
    assert_eq!(code, 1, "a failing op is a finding");
    let html = report_page(&file);
    let culprit = "model/layer_0/mlp/fused_matmul_biasadd_gelu";
    // The verdict leads (before the plots), names the fused kernel and links to its row.
    let verdict = html.find("<b>CULPRIT</b> step 0 rank 0").expect("the culprit verdict");
    assert!(verdict < html.find("id=\"plots\"").expect("plots"), "the verdict does not lead");
    assert!(html[verdict..].starts_with("<b>CULPRIT</b> step 0 rank 0: <a href=\"#failing-"));
    assert!(html.contains("<tr id=\"failing-0\">"));
    // Error along execution order: both series, the culprit marked, the fused kernel coloured.
    let error = svg_element(&html, "plot-error");
    assert!(
        error.contains("<title>1 - cosine</title>") && error.contains("<title>max relative error</title>")
    );
    assert!(error.contains(&format!("CULPRIT {culprit}")), "the culprit is not marked");
    assert!(
        error.contains("fill=\"#7b2d8e\"><title>") && error.contains("(fused: "),
        "no failing fused kernel"
    );
    // Loss of target and benchmark, gradient norms, the three layer heatmaps and, with two ranks, rank x step.
    let loss = svg_element(&html, "plot-loss");
    assert!(
        loss.contains("<title>target (model/loss/Mean)</title>") && loss.contains("<title>benchmark</title>")
    );
    assert!(loss.contains("<title>loss scale</title>"), "the fp16 run dumps its loss scale");
    assert!(svg_element(&html, "plot-grad").contains("<title>global</title>"));
    for id in ["heat-maxabs", "heat-nonfinite", "heat-error", "heat-ranks"] {
        assert!(svg_element(&html, id).contains("data-values=\""), "{id} has no values");
    }
    assert!(svg_element(&html, "heat-ranks").contains("rank 0\u{1f}rank 1"));
    // An fp16 run against an fp32 benchmark is not one configuration: diff says why it did not run.
    assert!(html.contains("<b>diff</b> not run: the runs are not one configuration (precision"));
    assert!(
        html.contains("id=\"t-failing\"")
            && html.contains("id=\"t-unmatched\"")
            && html.contains("id=\"t-config\"")
    );
}

#[test]
fn an_overflow_run_shows_its_loss_scale_and_skipped_step() {
    let dir = scratch();
    let json = r#"{"faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 2}}}"#;
    let model = model_file(dir.path(), "overflow.json", json);
    let run = dir.path().join("run");
    record(&run, &model, 5, &[], &[]);
    let file = dir.path().join("overflow.html");
    let (code, _) = report(&["report", path_str(&run), "-o", path_str(&file)]);
    assert_eq!(code, 1, "an overflow is a finding");
    let html = report_page(&file);
    assert!(html.contains("<b>FIRST OVERFLOW</b> step 2 rank 0: <a href=\"#t-overflow\"><code>model/layer_0/mlp/fc1/MatMul</code>"));
    assert!(!html.contains("id=\"plot-error\""), "no benchmark, no error plot");
    let loss = svg_element(&html, "plot-loss");
    assert!(
        loss.contains("<title>step 2 rank 0: 260 inf in model/layer_0/mlp/fc1/MatMul"),
        "the skipped step is not shaded"
    );
    assert!(loss.contains("<title>loss scale</title>"));
    // The NaN loss of the skipped step is a triangle on the top edge.
    assert!(loss.contains("<title>target (model/loss/Mean) at 2: nan</title>"), "the NaN loss is not shown");
    // Gradient norms skip the step that applied no update, and the first overflow is marked.
    let grad = svg_element(&html, "plot-grad");
    assert!(grad.contains("first overflow: 2"));
    // The global norm's line breaks at the skipped step (steps 0-1, then 3-4) instead of bridging it, and
    // the legend names it once.
    let global = grad.matches("<title>global</title></polyline>").count();
    assert_eq!(global, 2, "the global norm's line bridges the skipped step:\n{grad}");
    assert_eq!(grad.matches("class=\"legend\">global</text>").count(), 1);
    assert!(!html.contains("id=\"heat-ranks\""), "one rank: no rank x step heatmap");
    assert!(svg_element(&html, "heat-nonfinite").contains("data-values=\""));
    // watch's conditions: the loss overflow is among the hits, and the first hit is outlined on the timeline;
    // conditions the statistics cannot decide are named so, never shown as passing.
    assert!(html.contains("<b>WATCH</b>: loss_overflow (1)"), "no watch verdict");
    let timeline = svg_element(&html, "heat-watch");
    assert!(timeline.contains("data-rows=\"loss_overflow\u{1f}") && timeline.contains("class=\"outline\""));
    assert!(timeline.contains(" (can&#39;t tell)") && timeline.contains("data-empty=\"not decided\""));
    for table in ["t-check", "t-watch", "t-watch-cant"] {
        assert!(html.contains(&format!("<table id=\"{table}\"")), "no table {table}");
    }
}

#[test]
fn watch_names_the_rank_an_overflow_began_on_not_the_rank_it_reached() {
    // Rank 1 overflows at step 2; rank 0 gets the inf/NaN only through the gradient all-reduce, which watch
    // hits too (role `collective output`). The page's first hit is rank 1's op, as overflow and the
    // cross-rank analysis say, not rank 0's all-reduce (the lower rank, later in the step).
    let dir = scratch();
    let json = r#"{"faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 2, "rank": 1}}}"#;
    let model = model_file(dir.path(), "overflow_rank1.json", json);
    let run = dir.path().join("run");
    let (collector, sim_train, lib) = (collector_lib(), sim_train_bin(), runtime_lib());
    let (code, out, err) = analyzer(&[
        "record",
        "-o",
        path_str(&run),
        "--collector",
        path_str(&collector),
        "--",
        path_str(&sim_train),
        "--model",
        path_str(&model),
        "--lib",
        path_str(&lib),
        "--steps",
        "4",
        "--ranks",
        "2",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let file = dir.path().join("report.html");
    let (code, stdout, _) = analyzer(&["report", path_str(&run), "-o", path_str(&file), "--no-progress"]);
    assert_eq!(code, 1, "an overflow is a finding");
    let html = report_page(&file);
    let first = "first: tensor_overflow step 2 rank 1: model/layer_0/mlp/fc1/MatMul.output.0";
    assert!(html.contains(first), "the page's first watch hit is not rank 1's op:\n{stdout}");
    assert!(stdout.contains(first), "report's lines name another first hit:\n{stdout}");
    // The timeline outlines that hit: tensor_overflow's row at step 2.
    let timeline = svg_element(&html, "heat-watch");
    assert!(timeline.contains("class=\"outline\""), "no first hit outlined");
    // Rank 1's NaN loss at step 2 is drawn (rank 0's is finite there), in its own line, named.
    let loss = svg_element(&html, "plot-loss");
    assert!(loss.contains("<title>rank 1 at 2: nan</title>"), "rank 1's NaN loss is not shown:\n{loss}");
    assert!(loss.contains("class=\"legend\">rank 1</text>"), "rank 1's loss is not named");
    assert!(!loss.contains("<title>target (model/loss/Mean) at 2: nan</title>"), "rank 0's loss was finite");
    assert!(html.contains("The loss per step on rank 0 (blue), and on rank 1 (named in the legend)"));
}

#[test]
fn a_selection_that_matches_nothing_writes_no_page() {
    let dir = scratch();
    let model = model_file(dir.path(), "m.json", "{}");
    let run = dir.path().join("run");
    record(&run, &model, 1, &[], &[]);
    let file = dir.path().join("r.html");
    let (code, _, stderr) = analyzer(&["report", path_str(&run), "--step", "7", "-o", path_str(&file)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("step 7 is not in"), "{stderr}");
    assert!(!file.exists(), "a page for a selection that matches nothing");
}

#[test]
fn a_lost_segment_leads_the_page_and_no_all_clear_is_given() {
    let dir = scratch();
    let clean = "{}";
    let model = model_file(dir.path(), "clean.json", clean);
    let run = dir.path().join("run");
    // 64 KiB segments: the capture spans many, and losing the first loses real tensors.
    record(&run, &model, 2, &["--mode", "tensor"], &[("ACCUTRACE_SEGMENT_SIZE", "64K")]);
    let bench = dir.path().join("bench");
    sim_bench(&model, 2, &bench);
    let intact = dir.path().join("intact.html");
    let (code, _) = report(&["report", path_str(&run), path_str(&bench), "-o", path_str(&intact)]);
    assert_eq!(code, 0, "the intact pair passes and has no overflow");
    let html = report_page(&intact);
    assert!(
        html.contains("<b>PASS</b>")
            && html.contains("<b>NO OVERFLOW</b>")
            && !html.contains("id=\"problems\"")
    );

    let stream =
        std::fs::read_dir(&run).unwrap().map(|e| e.unwrap().path()).find(|p| p.join("stream.json").is_file());
    std::fs::remove_file(stream.expect("a stream directory").join("seg-000000.acc")).unwrap();
    let file = dir.path().join("lost.html");
    let (code, stdout, stderr) =
        analyzer(&["report", path_str(&run), path_str(&bench), "-o", path_str(&file)]);
    assert_eq!(code, 2, "an incomplete input fails the run\n{stderr}");
    // The terminal gets the page's answers in its order: the problem first, no all-clear.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("report written to ") && lines[1].starts_with("  INCOMPLETE INPUT: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("  NO VERDICT: ") && !stdout.contains("PASS") && !stdout.contains("NO OVERFLOW"),
        "{stdout}"
    );
    let html = report_page(&file);
    let problems = html.find("id=\"problems\"").expect("the problems lead");
    assert!(problems < html.find("id=\"verdicts\"").unwrap(), "the problems do not lead");
    assert!(html.contains("<b>INCOMPLETE INPUT</b>") && html.contains("segment 0 is missing"));
    assert!(
        !html.contains("<b>PASS</b>") && !html.contains("<b>NO OVERFLOW</b>"),
        "an all-clear about data not seen"
    );
    assert!(html.contains("<b>NO VERDICT</b>"));
    assert!(
        !html.contains("CHECKLIST PASSES") && !html.contains("<b>NO CONDITION HIT</b>"),
        "check/watch all-clear"
    );
    // Accepted: the problems still lead, the exit status is the answer's.
    let (code, _) =
        report(&["report", path_str(&run), path_str(&bench), "-o", path_str(&file), "--allow-incomplete"]);
    assert_eq!(code, 0);
    assert!(report_page(&file).contains("<b>INCOMPLETE INPUT</b>"));
}

#[test]
fn an_eager_run_plots_the_loss_and_scale_its_scaler_multiplies() {
    // Eager kernels are named by type: no op is named like a loss or a loss scale, so both come from the
    // scaler's Mul (the loss times a power of two).
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", "{}");
    let run = dir.path().join("run");
    let (collector, sim_train, lib) = (collector_lib(), sim_train_bin(), runtime_lib());
    let (code, out, err) = analyzer(&[
        "record",
        "-o",
        path_str(&run),
        "--collector",
        path_str(&collector),
        "--",
        path_str(&sim_train),
        "--eager",
        "--model",
        path_str(&model),
        "--steps",
        "3",
        "--lib",
        path_str(&lib),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let file = dir.path().join("eager.html");
    report(&["report", path_str(&run), "-o", path_str(&file)]);
    let html = report_page(&file);
    let loss = svg_element(&html, "plot-loss");
    assert!(loss.contains("<title>target (Mul_"), "{loss}");
    assert!(loss.contains("<title>loss scale</title>"), "no loss scale line");
    assert!(html.contains("the loss scale (the power-of-two input of Mul_"));
}
