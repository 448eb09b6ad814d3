//! Python's `repr(float)`: msprobe writes every number of its CSV and of `dump.json`'s statistics as this
//! text, so reproducing msprobe's cells means reproducing it.

/// Python's `repr(float)`: shortest round-trip digits, positional for 1e-4 <= |v| < 1e16, else
/// scientific with a two-digit exponent (`8.5353851e-05`), `.0` on integral values. msprobe's CSV cells
/// are this text.
pub fn py_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Shortest round-trip digit count from `{:e}`, then the digits re-rendered in exact mode: at an exact
    // tie (0.0127658843994140625 to 17 digits) Python rounds half to even, Rust's shortest mode rounds up.
    let shortest = format!("{:e}", v.abs());
    let k = shortest.split_once('e').map_or(1, |(m, _)| m.chars().filter(char::is_ascii_digit).count());
    let sci = format!("{:.*e}", k - 1, v.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let body = if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{}.{}", &digits[..int_len], &digits[int_len..])
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::excessive_precision)] // exact binary values, written out to show the tie
    fn python_float_text() {
        for (v, s) in [
            (8.5353851e-05, "8.5353851e-05"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (988.0, "988.0"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (0.06690607783577326, "0.06690607783577326"),
            (204801.0, "204801.0"),
            (1e16, "1e+16"),
            (-2.140625, "-2.140625"),
            (9.313226188509272e-13, "9.313226188509272e-13"),
            (1234567890123456.0, "1234567890123456.0"),
            (0.0127658843994140625, "0.012765884399414062"),
        ] {
            assert_eq!(py_float_repr(v), s);
        }
    }
}
