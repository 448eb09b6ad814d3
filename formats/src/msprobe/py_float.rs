//! Python's `repr(float)`: msprobe writes every number of its CSV and of `dump.json`'s statistics as this
//! text, so reproducing msprobe's cells means reproducing it.

use std::fmt::Write;

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
    // Shortest round-trip digits from `{:e}`. At 16 or 17 digits they are re-rendered in exact mode: at an
    // exact tie (0.0127658843994140625 to 17 digits) Python rounds half to even, Rust's shortest mode rounds
    // up. Below 16 digits no tie can be: two candidates 10^(e-k+1) apart cannot both lie within half an ulp
    // of the value unless 10^-k < 2^-52, so k >= 16; the shortest digits are then the nearest, which exact
    // mode gives too. The text is made on the stack (this runs for every statistic of every row).
    let mut sci = StackText::default();
    write!(sci, "{:e}", v.abs()).expect("an f64 in `{:e}` fits 32 bytes");
    let k = sci.as_str().split_once('e').map_or(1, |(m, _)| m.bytes().filter(u8::is_ascii_digit).count());
    if k >= 16 {
        sci = StackText::default();
        write!(sci, "{:.*e}", k - 1, v.abs()).expect("17 digits in `{:e}` fit 32 bytes");
    }
    let (mantissa, exp) = sci.as_str().split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let mut out = String::with_capacity(k + 8);
    if v < 0.0 {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        // `d.ddd` without its point: the digits, most significant first.
        let digits = || mantissa.chars().filter(|c| *c != '.');
        if exp >= 0 {
            let int_len = exp as usize + 1;
            out.extend(digits().take(int_len));
            out.extend(std::iter::repeat_n('0', int_len.saturating_sub(k)));
            out.push('.');
            match k > int_len {
                true => out.extend(digits().skip(int_len)),
                false => out.push('0'),
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.extend(digits());
        }
    } else {
        let esign = if exp < 0 { '-' } else { '+' };
        write!(out, "{mantissa}e{esign}{:02}", exp.abs()).expect("a String takes any text");
    }
    out
}

/// Text of at most 32 bytes on the stack: one f64 written with `{:e}` (at most 24 bytes).
#[derive(Default)]
struct StackText {
    bytes: [u8; 32],
    len: usize,
}

impl StackText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).expect("only `str`s are written")
    }
}

impl Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
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

    /// What `py_float_repr` wrote before its text moved to the stack and its exact pass to 16+ digits:
    /// every digit re-rendered in exact mode, through Strings.
    fn reference_repr(v: f64) -> String {
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

    /// The same text as the exact-mode rendering of every digit count, on values of every kind: short
    /// decimals, fp16 and fp32 values widened, integers, ties at 17 digits and raw bit patterns.
    #[test]
    #[allow(clippy::excessive_precision)] // the exact binary value of the tie, written out
    fn stack_text_and_short_digits_agree_with_exact_mode() {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut values =
            vec![0.0127658843994140625, 5e-324, f64::MAX, f64::MIN_POSITIVE, 1e-4, 9.999e-5, 1e16];
        for _ in 0..20_000 {
            let r = next();
            let digits = (r % 10_000_000_000_000_000) as f64;
            let scale = 10f64.powi((r >> 54) as i32 % 40 - 20);
            values.push(f64::from_bits(r));
            values.push(digits * scale);
            values.push((r % 100_000) as f64 / 1000.0);
            values.push(f32::from_bits(r as u32) as f64);
            values.push(half::f16::from_bits(r as u16).to_f64());
            values.push(-((r >> 11) as f64) * 2f64.powi((r % 64) as i32 - 80));
        }
        let mut checked = 0;
        for v in values.into_iter().filter(|v| v.is_finite()) {
            assert_eq!(py_float_repr(v), reference_repr(v), "{v:e}");
            checked += 1;
        }
        assert!(checked > 100_000, "{checked}");
    }
}
