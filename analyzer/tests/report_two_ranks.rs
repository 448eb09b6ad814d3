//! `analyzer report` on an .npy dump of two ranks (`step{S}/rank{R}/`, no HCCL call: the cross-rank
//! analysis's input problem leads, exit 2): no check item reads as a bare pass under that lead, and the
//! layer x step inf/NaN map names the ranks each cell adds. `check`'s JSON tells an item that passed on
//! what was read from one the runs cannot decide, and a torn weight file is `can't tell`, not weights that
//! start differently.

use accutrace_formats::npy::write_npy;
use accutrace_formats::DType;
use std::path::Path;

mod support;
use support::analyzer;

fn write_f32(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = Vec::new();
    write_npy(&mut out, DType::FLOAT, &[values.len() as u64], &bytes).unwrap();
    std::fs::write(path, out).unwrap();
}

/// Steps 0-2 of ranks 0 and 1: `model/layer_1/mlp/MatMul` forward (its output holds one NaN on rank 0 and
/// two infs on rank 1 at step 1), then `ApplyAdamD` updates of `model/layer_0/w` and `model/layer_1/w`
/// (inputs var, m, v, grad), as an .npy export names them (`mapping.csv` gives the real names).
fn dump(root: &Path) {
    for step in 0..3u64 {
        for rank in 0..2u32 {
            let dir = root.join(format!("step{step}/rank{rank}"));
            std::fs::create_dir_all(&dir).unwrap();
            let ts = 1000 + 10 * step;
            let forward = format!("MatMulV2.model_layer_1_mlp_MatMul.0.2.{ts}");
            let mut mapping = format!("{forward},MatMulV2.model/layer_1/mlp/MatMul.0.2.{ts}\n");
            let mut activation = [1.0, 2.0, 3.0, 4.0];
            match (step, rank) {
                (1, 0) => activation[0] = f32::NAN,
                (1, 1) => activation[1..3].fill(f32::INFINITY),
                _ => {}
            }
            write_f32(&dir.join(format!("{forward}.output.0.npy")), &activation);
            for (k, layer) in ["layer_0", "layer_1"].into_iter().enumerate() {
                let ts = ts + 1 + k as u64;
                let stem = format!("ApplyAdamD.optimizer_model_{layer}_w_ApplyAdam.{}.2.{ts}", k + 1);
                mapping.push_str(&format!(
                    "{stem},ApplyAdamD.optimizer/model/{layer}/w/ApplyAdam.{}.2.{ts}\n",
                    k + 1
                ));
                let g = 0.5 * (k + 1) as f32 / (step + 1) as f32;
                let inputs = [[1.0, 2.0, 3.0, 4.0], [0.1; 4], [0.2; 4], [g, -g, g, g]];
                for (i, values) in inputs.iter().enumerate() {
                    write_f32(&dir.join(format!("{stem}.input.{i}.npy")), values);
                }
                write_f32(
                    &dir.join(format!("{stem}.output.0.npy")),
                    &[1.0 - 0.01 * step as f32, 2.0, 3.0, 4.0],
                );
            }
            std::fs::write(dir.join("mapping.csv"), mapping).unwrap();
        }
    }
}

/// The `<td>` cells of the page's table `id`, row by row.
fn table_rows(html: &str, id: &str) -> Vec<Vec<String>> {
    let start = html.find(&format!("<table id=\"{id}\"")).expect("the table");
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    table
        .split("<tr>")
        .skip(2)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let text = &cell[cell.find('>').unwrap() + 1..];
                    text[..text.find("</td>").unwrap()].to_string()
                })
                .collect()
        })
        .collect()
}

/// The page's input problem comes from the cross-rank analysis, not from check: check's items that passed
/// say "pass on what was read" on the page and on the terminal, never a bare pass.
#[test]
fn checks_passes_under_an_incomplete_lead_say_pass_on_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    dump(&root);
    let page = dir.path().join("report.html");
    let (code, said, err) =
        analyzer(&["report", root.to_str().unwrap(), "-o", page.to_str().unwrap(), "--no-progress"]);
    assert_eq!(code, 2, "{said}{err}");
    let lines: Vec<&str> = said.lines().collect();
    assert!(lines[1].contains("INCOMPLETE INPUT: no HCCL call was recorded"), "{said}");
    let check = lines.iter().find(|l| l.trim_start().starts_with("check: ")).expect("check's line");
    assert!(check.contains(" pass on what was read, "), "{said}");
    assert!(!check.contains(" pass, "), "a bare pass under the INCOMPLETE lead: {said}");

    let html = std::fs::read_to_string(&page).unwrap();
    let answers: Vec<(String, String)> =
        table_rows(&html, "t-check").into_iter().map(|row| (row[0].clone(), row[1].clone())).collect();
    assert_eq!(answers.len(), 6, "{answers:?}");
    assert!(answers.iter().any(|(_, a)| a == "pass on what was read"), "{answers:?}");
    assert!(answers.iter().all(|(_, a)| a != "pass"), "a bare pass in the checklist: {answers:?}");

    // check alone read everything it needed: its passes are passes.
    let (code, json, err) = analyzer(&["check", root.to_str().unwrap(), "--format", "json", "--no-progress"]);
    assert_eq!(code, 0, "{json}{err}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    for item in json["items"].as_array().unwrap() {
        assert_eq!(item["passed_on_what_was_read"], false, "{item:#}");
    }
}

/// `check` on a dump missing part of one file: the items that passed on what was read are `cant_tell`,
/// and `passed_on_what_was_read` tells them from the items the runs cannot decide at all.
#[test]
fn checks_json_tells_a_pass_on_what_was_read_from_an_undecided_item() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    dump(&root);
    let torn = root.join("step2/rank1/MatMulV2.model_layer_1_mlp_MatMul.0.2.1020.output.0.npy");
    let bytes = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &bytes[..20]).unwrap();
    let (code, json, err) = analyzer(&["check", root.to_str().unwrap(), "--format", "json", "--no-progress"]);
    assert_eq!(code, 2, "{json}{err}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["input_problems"][0]["kind"], "incomplete", "{json:#}");
    let items = json["items"].as_array().unwrap();
    let item = |name: &str| items.iter().find(|i| i["name"] == name).unwrap();
    assert!(items.iter().all(|i| i["status"] != "pass"), "{items:#?}");
    for name in ["mixed_precision", "loss_scale"] {
        assert_eq!(
            (&item(name)["status"], &item(name)["passed_on_what_was_read"]),
            (&"cant_tell".into(), &true.into())
        );
    }
    // No manifest: undecided whatever was read.
    assert_eq!(item("configuration")["passed_on_what_was_read"], false, "{items:#?}");
}

/// The layer x step inf/NaN map adds the ranks' counts: each cell names the ranks it adds and each one's
/// count (shown on hover), and the caption says that a cell adds ranks.
#[test]
fn the_layer_inf_nan_map_names_the_ranks_each_cell_adds() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    dump(&root);
    let page = dir.path().join("report.html");
    let (code, said, err) =
        analyzer(&["report", root.to_str().unwrap(), "-o", page.to_str().unwrap(), "--no-progress"]);
    assert_eq!(code, 2, "{said}{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    let start = html.find("<svg id=\"heat-nonfinite\"").expect("the inf/NaN map");
    let tag = &html[start..start + html[start..].find('>').unwrap()];
    let raw = |name: &str| -> &str {
        let at = tag.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("no {name} in {tag}"));
        let value = &tag[at + name.len() + 3..];
        &value[..value.find('"').unwrap()]
    };
    let attribute =
        |name: &str| -> Vec<String> { raw(name).split(['\u{1f}', ',']).map(str::to_string).collect() };
    let (rows, steps, values) = (attribute("data-rows"), attribute("data-steps"), attribute("data-values"));
    // Each distinct text once (`data-detail-texts`, split by U+001F), and per cell its number.
    let texts: Vec<&str> = raw("data-detail-texts").split('\u{1f}').collect();
    let details: Vec<String> = attribute("data-details")
        .iter()
        .map(|k| k.parse::<usize>().map_or(String::new(), |k| texts[k].to_string()))
        .collect();
    assert_eq!(details.len(), values.len(), "{tag}");
    let row = rows.iter().position(|r| r.contains("layer_1")).expect("layer_1's row");
    let step = steps.iter().position(|s| s == "1").unwrap();
    let cell = row * steps.len() + step;
    assert_eq!(values[cell], "3", "{tag}");
    assert_eq!(details[cell], "rank 0: 1, rank 1: 2", "{tag}");
    assert_eq!(details[row * steps.len()], "rank 0: 0, rank 1: 0", "{tag}");
    assert!(
        html.contains(
            "A cell adds the counts of ranks 0-1 (2 ranks): hover a cell for each rank&#39;s count."
        ),
        "the caption does not say a cell adds ranks"
    );
    // The other maps carry no details.
    let maxabs = html.find("<svg id=\"heat-maxabs\"").unwrap();
    assert!(!html[maxabs..maxabs + html[maxabs..].find('>').unwrap()].contains("data-details"));
}

/// The rank-0 file of `model/layer_0/w`'s weight before its first update (step 0, ApplyAdamD input 0).
const LAYER_0_WEIGHT_AT_STEP_0: &str =
    "step0/rank0/ApplyAdamD.optimizer_model_layer_0_w_ApplyAdam.1.2.1001.input.0.npy";

/// check's `initial_weights` item of `root`, as JSON: (exit status, the item, the whole answer).
fn initial_weights(root: &Path) -> (i32, serde_json::Value, serde_json::Value) {
    let (code, json, err) = analyzer(&["check", root.to_str().unwrap(), "--format", "json", "--no-progress"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}{err}"));
    let item = json["items"].as_array().unwrap().iter().find(|i| i["name"] == "initial_weights").unwrap();
    (code, item.clone(), json)
}

/// A torn weight file is missing input, not a finding: the weight it held is `can't tell`, named with the
/// op input it is, and never "weights start differently" (rank 0's optimizer op then starts at input 1,
/// optimizer state, which differs from rank 1's weight). The INCOMPLETE INPUT line names the file.
#[test]
fn a_torn_weight_file_is_cant_tell_not_a_difference_between_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    dump(&root);
    let torn = root.join(LAYER_0_WEIGHT_AT_STEP_0);
    let bytes = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 4]).unwrap();

    let (code, item, json) = initial_weights(&root);
    assert_eq!(code, 2, "{json:#}");
    assert!(
        json["input_problems"][0]["message"].as_str().unwrap().contains(LAYER_0_WEIGHT_AT_STEP_0),
        "{json:#}"
    );
    assert_eq!(item["status"], "cant_tell", "{item:#}");
    let said = format!("{} {}", item["reason"], item["details"]);
    assert!(!said.contains("differently"), "a torn file read as a difference: {item:#}");
    assert!(said.contains("rank 0") && said.contains("model/layer_0/w"), "{item:#}");
    assert!(said.contains("input 0") && said.contains("not read"), "{item:#}");
    assert_eq!(item["passed_on_what_was_read"], false, "{item:#}");

    let (code, text, err) = analyzer(&["check", root.to_str().unwrap(), "--no-progress"]);
    assert_eq!(code, 2, "{text}{err}");
    assert!(
        text.starts_with("INCOMPLETE INPUT")
            || text.lines().nth(1).is_some_and(|l| l.contains("INCOMPLETE INPUT")),
        "{text}"
    );
    let line = text.lines().find(|l| l.contains("initial_weights")).expect("initial_weights' line");
    assert!(line.contains("can't tell") && !line.contains("differently"), "{text}");
}

/// Weights that really start differently on the ranks (every file read) are still said so, beside a torn
/// file of another weight.
#[test]
fn weights_that_differ_between_ranks_are_still_a_difference() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    dump(&root);
    let other = "step0/rank1/ApplyAdamD.optimizer_model_layer_1_w_ApplyAdam.2.2.1002.input.0.npy";
    write_f32(&root.join(other), &[4.0, 3.0, 2.0, 1.0]);

    let (code, item, json) = initial_weights(&root);
    assert_eq!(code, 0, "{json:#}");
    assert_eq!(item["status"], "cant_tell", "{item:#}");
    assert!(
        item["reason"].as_str().unwrap().contains("1 weights start differently on different ranks"),
        "{item:#}"
    );
    assert!(item["details"][0].as_str().unwrap().starts_with("model/layer_1/w: 2 distinct"), "{item:#}");

    let torn = root.join(LAYER_0_WEIGHT_AT_STEP_0);
    let bytes = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 4]).unwrap();
    let (code, item, json) = initial_weights(&root);
    assert_eq!(code, 2, "{json:#}");
    assert_eq!(item["status"], "cant_tell", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(reason.contains("1 weights start differently on different ranks"), "{item:#}");
    let details = item["details"].to_string();
    assert!(details.contains("model/layer_1/w: 2 distinct"), "{item:#}");
    assert!(
        !details.contains("model/layer_0/w: 2 distinct"),
        "the torn file's weight as a difference: {item:#}"
    );
}

/// Against a second run, a torn weight file is `can't tell` too: never "start differently in the two runs"
/// (rank 0's optimizer op would compare its optimizer state with the other run's weight).
#[test]
fn a_torn_weight_file_is_no_difference_between_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    dump(&one);
    dump(&two);
    let torn = one.join(LAYER_0_WEIGHT_AT_STEP_0);
    let bytes = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 4]).unwrap();
    let args = ["check", one.to_str().unwrap(), two.to_str().unwrap(), "--format", "json", "--no-progress"];
    let (code, json, err) = analyzer(&args);
    assert_eq!(code, 2, "{json}{err}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let item = json["items"].as_array().unwrap().iter().find(|i| i["name"] == "initial_weights").unwrap();
    assert_eq!(item["status"], "cant_tell", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(reason.starts_with("run 1: 1 initial weight not read"), "{item:#}");
    assert!(!reason.contains("differently"), "a torn file read as a difference: {item:#}");
    assert!(
        item["details"][0].as_str().unwrap().starts_with("rank 0: model/layer_0/w: not read"),
        "{item:#}"
    );
}

/// watch on the same torn weight file: the optimizer op's first input is then its state, not the weight, and
/// is never judged as one (it read "weight_initialization ... zero_percentage = 100", Adam's m at step 0);
/// the weight's initialization is can't tell, and the INCOMPLETE INPUT line leads, exit 2.
#[test]
fn watch_never_judges_an_optimizer_state_as_the_weight_of_a_torn_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    dump(&root);
    let (code, intact, err) = analyzer(&["watch", root.to_str().unwrap(), "--no-progress"]);
    assert!(!intact.contains("zero_percentage"), "{code} {intact}{err}");
    let torn = root.join(LAYER_0_WEIGHT_AT_STEP_0);
    let bytes = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 4]).unwrap();
    let (code, text, err) = analyzer(&["watch", root.to_str().unwrap(), "--no-progress"]);
    assert_eq!(code, 2, "{text}{err}");
    assert!(text.contains("INCOMPLETE INPUT"), "{text}");
    assert!(
        !text.contains("zero_percentage") && !text.contains("input.1"),
        "a state judged as the weight: {text}"
    );
    let cant_tell = "weight_initialization: 1 time: the weight, input 0 of its first update, was not read";
    assert!(text.contains(cant_tell), "{text}");
}

/// The attribute `name` of the page's heatmap `id`, split at its separators: U+001F only in the texts of
/// `data-detail-texts` and `data-rows` (a text holds commas), ',' elsewhere.
fn heatmap_attribute(html: &str, id: &str, name: &str) -> Option<Vec<String>> {
    let start = html.find(&format!("<svg id=\"{id}\"")).unwrap_or_else(|| panic!("no heatmap {id}"));
    let tag = &html[start..start + html[start..].find('>').unwrap()];
    let at = tag.find(&format!(" {name}=\""))?;
    let value = &tag[at + name.len() + 3..];
    let value = &value[..value.find('"').unwrap()];
    let separator = if matches!(name, "data-detail-texts" | "data-rows") { '\u{1f}' } else { ',' };
    Some(value.split(separator).map(str::to_string).collect())
}

/// watch's timeline adds the hits of every rank in a cell: on two ranks, a cell names each rank's hits on
/// hover and the caption says the cells add ranks; on one rank, nothing is said about ranks.
#[test]
fn the_watch_timeline_names_the_ranks_each_cell_adds() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    dump(&root);
    let page = dir.path().join("report.html");
    let (code, said, err) =
        analyzer(&["report", root.to_str().unwrap(), "-o", page.to_str().unwrap(), "--no-progress"]);
    assert_eq!(code, 2, "{said}{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    let attribute = |name: &str| heatmap_attribute(&html, "heat-watch", name).unwrap_or_default();
    let (rows, steps, values) = (attribute("data-rows"), attribute("data-steps"), attribute("data-values"));
    let texts = attribute("data-detail-texts");
    let details: Vec<String> = attribute("data-details")
        .iter()
        .map(|k| k.parse::<usize>().map_or(String::new(), |k| texts[k].clone()))
        .collect();
    assert_eq!(details.len(), values.len(), "no detail per cell: {rows:?} {steps:?} {values:?}");
    // Step 1's MatMul output holds a NaN on rank 0 and infs on rank 1: one hit on each rank.
    let row = rows.iter().position(|r| r == "tensor_overflow").expect("tensor_overflow's row");
    let cell = row * steps.len() + steps.iter().position(|s| s == "1").unwrap();
    assert_eq!(values[cell], "2");
    assert_eq!(details[cell], "rank 0: 1, rank 1: 1");
    let caption = "A cell adds the hits of ranks 0-1 (2 ranks): hover a cell for each rank&#39;s hits.";
    assert!(html.contains(caption), "the timeline's caption does not say a cell adds ranks");

    // One rank: the cells add nothing, and nothing is said about ranks.
    for step in 0..3 {
        std::fs::remove_dir_all(root.join(format!("step{step}/rank1"))).unwrap();
    }
    let (code, said, err) =
        analyzer(&["report", root.to_str().unwrap(), "-o", page.to_str().unwrap(), "--no-progress"]);
    assert!(code == 0 || code == 1, "{said}{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(heatmap_attribute(&html, "heat-watch", "data-details").is_none());
    let start = html.find("<figure id=\"fig-watch\"").unwrap();
    let figure = &html[start..start + html[start..].find("</figure>").unwrap()];
    let caption = &figure[figure.find("<figcaption>").unwrap()..];
    assert!(!caption.contains("rank"), "a one-rank timeline speaks of ranks: {caption}");
}
