//! Shared pieces of the human reports.

/// A number in at most 11 characters: plain when readable, scientific otherwise.
pub fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = x.abs();
    if a == 0.0 || (1e-3..1e6).contains(&a) {
        format!("{x:.6}").trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{x:.4e}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_stay_short() {
        assert_eq!(super::fmt_num(1.5), "1.5");
        assert_eq!(super::fmt_num(65504.0), "65504");
        assert_eq!(super::fmt_num(1e-7), "1.0000e-7");
        assert_eq!(super::fmt_num(0.0), "0");
        assert_eq!(super::fmt_num(f64::NAN), "nan");
    }
}
