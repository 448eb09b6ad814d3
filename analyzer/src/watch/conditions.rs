//! The watch conditions, their parameters and defaults, and how a config file and `--set` change them.
//!
//! The defaults are MindInsight's recommended watchpoints (its debugger creates them on its own): weight
//! initialization (all zero), weight change too large (update ratio > 1), gradient vanishing (mean |x| <
//! 1e-9), tensor and operator overflow, all-zero tensors, and tanh / sigmoid / ReLU saturation. accutrace
//! adds, on by default: weight not changed (exactly: equal content hashes before and after an update; no
//! false alarm is possible), loss NaN/inf, exactly 0, or more than 10 times its first value, gradient
//! overflow (MindInsight's "gradient exploding") with the gradients' norm over the steps, and a range check
//! of the initial weights' mean |x| (above 1 or below 1e-6, matrices only). The others are off until a
//! threshold is given: weights, gradients or activations too large or too small, weight change too small,
//! an activation range.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// One condition: its name, whether it runs, and its parameters (name -> threshold).
#[derive(Clone, Debug, Serialize)]
pub struct Condition {
    pub name: &'static str,
    pub enabled: bool,
    /// What it looks at and when it hits (for `--help`, the docs and the report).
    pub summary: &'static str,
    pub params: BTreeMap<&'static str, f64>,
    /// Parameters it accepts (those without a default are off until set).
    #[serde(skip)]
    pub accepts: &'static [&'static str],
}

impl Condition {
    /// A parameter's value, if set.
    pub fn get(&self, param: &str) -> Option<f64> {
        self.params.get(param).copied()
    }
}

/// Every condition, in report order, with its defaults.
pub fn defaults() -> Vec<Condition> {
    let c = |name, enabled, summary, params: &[(&'static str, f64)], accepts| Condition {
        name,
        enabled,
        summary,
        params: params.iter().copied().collect(),
        accepts,
    };
    vec![
        c("loss_overflow", true, "the loss is NaN or infinite", &[], &[]),
        c(
            "loss_too_large",
            true,
            "the loss exceeds rise_gt times its first finite value (or gt)",
            &[("rise_gt", 10.0)],
            &["rise_gt", "gt"],
        ),
        c("loss_zero", true, "the loss is exactly 0", &[], &[]),
        c(
            "tensor_overflow",
            true,
            "a float tensor holds NaN or inf, or values at its dtype's saturation limit",
            &[],
            &[],
        ),
        c(
            "operator_overflow",
            true,
            "the device raised overflow status bits for an op (op-debug records: record --overflow)",
            &[],
            &[],
        ),
        c(
            "tensor_all_zero",
            true,
            "an activation or gradient has zero_percentage_ge percent zeros",
            &[("zero_percentage_ge", 100.0)],
            &["zero_percentage_ge"],
        ),
        c(
            "weight_initialization",
            true,
            "a weight before its first update: zero_percentage_ge percent zeros, max_gt, min_lt, or (matrices) \
             mean |x| above abs_mean_gt or below abs_mean_lt",
            &[("zero_percentage_ge", 100.0), ("abs_mean_gt", 1.0), ("abs_mean_lt", 1e-6)],
            &["zero_percentage_ge", "max_gt", "min_lt", "abs_mean_gt", "abs_mean_lt"],
        ),
        c(
            "weight_not_changed",
            true,
            "an update leaves a weight as it was: equal content hashes (rtol = atol = 0), or every element \
             within atol + rtol |before| when set (needs the tensors)",
            &[("rtol", 0.0), ("atol", 0.0)],
            &["rtol", "atol"],
        ),
        c(
            "weight_change_too_large",
            true,
            "mean |after - before| / (mean |before| + epsilon) above abs_mean_update_ratio_gt",
            &[("abs_mean_update_ratio_gt", 1.0), ("epsilon", 1e-9)],
            &["abs_mean_update_ratio_gt", "epsilon"],
        ),
        c(
            "weight_change_too_small",
            false,
            "mean |after - before| / (mean |before| + epsilon) below abs_mean_update_ratio_lt",
            &[("abs_mean_update_ratio_lt", 1e-4), ("epsilon", 1e-9)],
            &["abs_mean_update_ratio_lt", "epsilon"],
        ),
        c(
            "gradient_overflow",
            true,
            "a parameter's gradient holds NaN or inf (MindInsight's gradient exploding), with the norm trend",
            &[],
            &[],
        ),
        c(
            "gradient_vanishing",
            true,
            "a parameter's gradient has mean |x| below abs_mean_lt, with the norm trend",
            &[("abs_mean_lt", 1e-9)],
            &["abs_mean_lt", "max_lt", "min_lt", "mean_lt"],
        ),
        too("weight_too_large", "a weight", "gt"),
        too("weight_too_small", "a weight", "lt"),
        too("gradient_too_large", "a parameter's gradient", "gt"),
        too("activation_too_large", "an activation", "gt"),
        too("activation_too_small", "an activation", "lt"),
        c(
            "tanh_saturated",
            true,
            "a Tanh output has under range_percentage_lt percent of its values in [tanh(-8.8), tanh(8.8)]",
            &[("range_start", (-8.8f64).tanh()), ("range_end", 8.8f64.tanh()), ("range_percentage_lt", 0.1)],
            &["range_start", "range_end", "range_percentage_lt"],
        ),
        c(
            "sigmoid_saturated",
            true,
            "a Sigmoid output has under range_percentage_lt percent of its values in [sigmoid(-16.2), \
             sigmoid(16.2)]",
            &[
                ("range_start", 1.0 / (1.0 + 16.2f64.exp())),
                ("range_end", 1.0 / (1.0 + (-16.2f64).exp())),
                ("range_percentage_lt", 0.1),
            ],
            &["range_start", "range_end", "range_percentage_lt"],
        ),
        c(
            "dead_relu",
            true,
            "a ReLU output has over range_percentage_gt percent of its values in [-1, 0]",
            &[("range_start", -1.0), ("range_end", 0.0), ("range_percentage_gt", 99.9)],
            &["range_start", "range_end", "range_percentage_gt"],
        ),
        c(
            "activation_range",
            false,
            "an activation's share of values in [range_start, range_end] is below range_percentage_lt or \
             above range_percentage_gt, or its max - min is below max_min_lt or above max_min_gt",
            &[],
            &["range_start", "range_end", "range_percentage_lt", "range_percentage_gt", "max_min_lt", "max_min_gt"],
        ),
    ]
}

/// A "too large" / "too small" condition: off until one of its thresholds is set.
fn too(name: &'static str, what: &'static str, side: &'static str) -> Condition {
    let (summary, accepts): (&'static str, &'static [&'static str]) = match (what, side) {
        ("a weight", "gt") => ("a weight's mean |x|, max, min or mean above the threshold", GT),
        ("a weight", _) => ("a weight's mean |x|, max, min or mean below the threshold", LT),
        ("a parameter's gradient", _) => ("a gradient's mean |x|, max, min or mean above the threshold", GT),
        (_, "gt") => ("an activation's mean |x|, max, min or mean above the threshold", GT),
        _ => ("an activation's mean |x|, max, min or mean below the threshold", LT),
    };
    Condition { name, enabled: false, summary, params: BTreeMap::new(), accepts }
}

const GT: &[&str] = &["abs_mean_gt", "max_gt", "min_gt", "mean_gt"];
const LT: &[&str] = &["abs_mean_lt", "max_lt", "min_lt", "mean_lt"];

/// The conditions after the config file (JSON: `{"condition": {"enabled": bool, "param": number}}`) and
/// the command line (`--enable`, `--disable`, `--set condition.param=value`, which also enables it).
pub fn configure(
    config: Option<(&str, &str)>,
    enable: &[String],
    disable: &[String],
    set: &[String],
) -> Result<Vec<Condition>> {
    let mut all = defaults();
    if let Some((path, text)) = config {
        let json: serde_json::Value =
            serde_json::from_str(text).with_context(|| format!("{path}: not valid JSON"))?;
        let obj = json.as_object().with_context(|| format!("{path}: expected an object of conditions"))?;
        for (name, body) in obj {
            let c = find(&mut all, name).with_context(|| path.to_string())?;
            let body = body.as_object().with_context(|| format!("{path}: {name}: expected an object"))?;
            // A threshold enables its condition, unless the file says `"enabled": false`.
            let mut enabled = None;
            for (key, value) in body {
                if key == "enabled" {
                    enabled =
                        Some(value.as_bool().with_context(|| format!("{path}: {name}.enabled: a boolean"))?);
                    continue;
                }
                let v = value.as_f64().with_context(|| format!("{path}: {name}.{key}: a number"))?;
                set_param(c, key, v).with_context(|| path.to_string())?;
                c.enabled = true;
            }
            if let Some(on) = enabled {
                c.enabled = on;
            }
        }
    }
    for name in enable {
        find(&mut all, name)?.enabled = true;
    }
    for name in disable {
        find(&mut all, name)?.enabled = false;
    }
    for item in set {
        let (lhs, value) =
            item.split_once('=').with_context(|| format!("--set {item}: expected NAME.PARAM=VALUE"))?;
        let (name, param) =
            lhs.split_once('.').with_context(|| format!("--set {item}: expected NAME.PARAM=VALUE"))?;
        let v: f64 =
            value.trim().parse().with_context(|| format!("--set {item}: {value:?} is not a number"))?;
        let c = find(&mut all, name.trim())?;
        set_param(c, param.trim(), v)?;
        c.enabled = true;
    }
    Ok(all)
}

fn find<'a>(all: &'a mut [Condition], name: &str) -> Result<&'a mut Condition> {
    let known: Vec<&str> = all.iter().map(|c| c.name).collect();
    match all.iter_mut().find(|c| c.name == name) {
        Some(c) => Ok(c),
        None => bail!("unknown condition {name:?} (known: {})", known.join(", ")),
    }
}

fn set_param(c: &mut Condition, param: &str, v: f64) -> Result<()> {
    let Some(&key) = c.accepts.iter().find(|&&k| k == param) else {
        bail!("{} has no parameter {param:?} (it takes: {})", c.name, c.accepts.join(", "))
    };
    if !v.is_finite() {
        bail!("{}.{param}: {v} is not a finite number", c.name);
    }
    c.params.insert(key, v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_recommended_set_plus_ours() {
        let all = defaults();
        let on: Vec<&str> = all.iter().filter(|c| c.enabled).map(|c| c.name).collect();
        for name in ["tensor_overflow", "weight_change_too_large", "gradient_vanishing", "dead_relu"] {
            assert!(on.contains(&name), "{name}");
        }
        assert!(!on.contains(&"weight_change_too_small") && !on.contains(&"weight_too_large"));
        let tanh = all.iter().find(|c| c.name == "tanh_saturated").unwrap();
        assert_eq!(tanh.get("range_percentage_lt"), Some(0.1));
        for c in &all {
            for p in c.params.keys() {
                assert!(c.accepts.contains(p), "{}.{p}", c.name);
            }
        }
    }

    #[test]
    fn file_then_flags_override_and_mistakes_are_named() {
        let file = r#"{"weight_too_large": {"abs_mean_gt": 10}, "dead_relu": {"enabled": false}}"#;
        let all = configure(
            Some(("w.json", file)),
            &["weight_change_too_small".into()],
            &["loss_zero".into()],
            &["weight_change_too_large.abs_mean_update_ratio_gt=0.5".into()],
        )
        .unwrap();
        let get = |n: &str| all.iter().find(|c| c.name == n).unwrap();
        assert!(get("weight_too_large").enabled, "a threshold in the file enables its condition");
        assert_eq!(get("weight_too_large").get("abs_mean_gt"), Some(10.0));
        assert!(
            !get("dead_relu").enabled && !get("loss_zero").enabled && get("weight_change_too_small").enabled
        );
        assert_eq!(get("weight_change_too_large").get("abs_mean_update_ratio_gt"), Some(0.5));
        let err = configure(None, &[], &[], &["weight_too_large.abs_mean=1".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("no parameter \"abs_mean\""), "{err:#}");
        let err = configure(None, &["weigth_too_large".into()], &[], &[]).unwrap_err();
        assert!(err.to_string().contains("unknown condition"), "{err}");
        assert!(configure(Some(("w.json", "[1]")), &[], &[], &[]).is_err());
        assert!(configure(None, &[], &[], &["loss_too_large.gt=nan".into()]).is_err());
    }
}
