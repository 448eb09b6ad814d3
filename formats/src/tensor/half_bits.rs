//! fp16 / bf16 / fp8 bit patterns to and from f32, one value at a time.
//!
//! [`f16_to_f32`] is the one scalar fp16 decoder: branch-free, so that slice loops over it vectorize on any
//! target; [`super::fp16_to_f32`] converts slices with it or with the CPU's conversion instructions. The test
//! below holds it to the IEEE 754 definition, written out plainly, on all 65536 patterns. f32 to fp16 and
//! bf16 (rounding) is the `half` crate's, wrapped here so that callers have one place to look.

/// 2^e, exactly, for every exponent an f32 can hold (normal and subnormal); 0 or inf beyond. Built from the
/// bits because `f32::powi` has unspecified precision, and the decoders must be exact everywhere.
pub fn pow2(e: i32) -> f32 {
    match e {
        -126..=127 => f32::from_bits(((e + 127) as u32) << 23),
        -149..=-127 => f32::from_bits(1u32 << (e + 149)),
        i32::MIN..=-150 => 0.0,
        _ => f32::INFINITY,
    }
}

/// fp16 bits to f32 (exact), branch-free (selects instead of branches) so that slice loops vectorise.
///
/// Signalling NaNs keep their payload bits; every NaN stays a NaN with its sign.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let exp_man = h & 0x7fff;
    let shifted = exp_man << 13;
    let exp = exp_man & 0x7c00;
    // Normal numbers: rebias the exponent from 15 to 127.
    let normal = shifted + ((127 - 15) << 23);
    // Inf / NaN: the exponent must become all ones (255), not 31 + 112.
    let inf_nan = shifted + ((255 - 31) << 23);
    // Subnormals and zero: m * 2^-24, computed exactly as (2^-14 + m * 2^-24) - 2^-14.
    let magic = 113u32 << 23;
    let sub = (f32::from_bits(shifted + magic) - f32::from_bits(magic)).to_bits();
    let bits = if exp == 0x7c00 {
        inf_nan
    } else if exp == 0 {
        sub
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// bf16 bits to f32: bf16 is the top half of an f32, so this is exact and total.
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// f32 to fp16 bits, round to nearest even; overflow gives inf, NaN stays NaN.
pub fn f32_to_f16(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// f32 to bf16 bits, round to nearest even; NaN stays NaN (quiet).
pub fn f32_to_bf16(v: f32) -> u16 {
    half::bf16::from_f32(v).to_bits()
}

/// The two 8-bit float encodings accutrace decodes (OCP FP8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8 {
    /// 1-4-3, bias 7, no infinities; S.1111.111 is NaN; largest finite 448.
    E4M3FN,
    /// 1-5-2, bias 15, IEEE-like (inf and NaN at exponent 31); largest finite 57344.
    E5M2,
}

impl Fp8 {
    const fn mantissa_bits(self) -> u32 {
        match self {
            Fp8::E4M3FN => 3,
            Fp8::E5M2 => 2,
        }
    }

    const fn bias(self) -> i32 {
        match self {
            Fp8::E4M3FN => 7,
            Fp8::E5M2 => 15,
        }
    }

    /// The byte to f32 (exact: every fp8 value is an f32).
    pub fn to_f32(self, byte: u8) -> f32 {
        let m_bits = self.mantissa_bits();
        let exp_mask: i32 = 0x7f >> m_bits;
        let negative = byte & 0x80 != 0;
        let exp = i32::from(byte & 0x7f) >> m_bits;
        let man = u32::from(byte) & ((1 << m_bits) - 1);
        let scale = (1u32 << m_bits) as f32;
        let magnitude = match self {
            Fp8::E4M3FN if exp == exp_mask && man == (1 << m_bits) - 1 => f32::NAN,
            Fp8::E5M2 if exp == exp_mask && man == 0 => f32::INFINITY,
            Fp8::E5M2 if exp == exp_mask => f32::NAN,
            _ if exp == 0 => man as f32 / scale * pow2(1 - self.bias()),
            _ => (1.0 + man as f32 / scale) * pow2(exp - self.bias()),
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// f32 to the byte, round to nearest even.
    ///
    /// Out of range follows PyTorch / ml_dtypes casts: E5M2 overflows to inf like fp16; E4M3FN has no inf,
    /// so overflow (and inf) becomes NaN. Saturating is the device's business, not the encoder's.
    pub fn from_f32(self, v: f32) -> u8 {
        let m_bits = self.mantissa_bits();
        let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
        let (nan, inf) = match self {
            Fp8::E4M3FN => (0x7f, 0x7f),
            Fp8::E5M2 => (0x7e, 0x7c),
        };
        if v.is_nan() {
            return sign | nan;
        }
        let abs = v.abs();
        let min_normal_exp = 1 - self.bias();
        let code: u32 = if abs < pow2(min_normal_exp) {
            // Subnormal range: count units of the smallest subnormal (exact scaling by a power of two).
            // A result of 2^m_bits is the smallest normal, whose encoding is that same integer.
            (abs * pow2(m_bits as i32 - min_normal_exp)).round_ties_even() as u32
        } else if abs.is_infinite() {
            return sign | inf;
        } else {
            // Round the f32 mantissa to m_bits (ties to even) with integer arithmetic, then rebias.
            let bits = abs.to_bits();
            let drop = 23 - m_bits;
            let rounded = bits + ((1 << (drop - 1)) - 1) + ((bits >> drop) & 1);
            let rebias = ((127 - self.bias()) as u32) << m_bits;
            (rounded >> drop).saturating_sub(rebias).min(0xff)
        };
        let overflow = match self {
            Fp8::E4M3FN => code > 0x7e,
            Fp8::E5M2 => code > 0x7b,
        };
        if overflow {
            sign | inf
        } else {
            sign | code as u8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fp16 bits to f32, written the way the IEEE 754 definition reads. NaNs come back quiet (payload kept).
    fn ieee_definition(h: u16) -> f32 {
        let negative = h & 0x8000 != 0;
        let exp = i32::from((h >> 10) & 0x1f);
        let man = u32::from(h & 0x3ff);
        let magnitude = match exp {
            0 => man as f32 * pow2(-24),
            31 if man == 0 => f32::INFINITY,
            31 => f32::from_bits(0x7fc0_0000 | (man << 13)),
            _ => (1.0 + man as f32 / 1024.0) * pow2(exp - 15),
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    #[test]
    fn fp16_decoder_is_the_ieee_definition_on_every_pattern() {
        for h in 0..=u16::MAX {
            let (fast, slow) = (f16_to_f32(h), ieee_definition(h));
            let reference = half::f16::from_bits(h).to_f32();
            if slow.is_nan() {
                assert!(fast.is_nan() && reference.is_nan(), "{h:#06x}");
                assert_eq!(fast.is_sign_negative(), slow.is_sign_negative(), "{h:#06x}");
            } else {
                assert_eq!(fast.to_bits(), slow.to_bits(), "{h:#06x}");
                assert_eq!(reference.to_bits(), slow.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn fp16_round_trips_every_non_nan_pattern() {
        for h in 0..=u16::MAX {
            let v = f16_to_f32(h);
            if !v.is_nan() {
                assert_eq!(f32_to_f16(v), h, "{h:#06x}");
            }
        }
    }

    #[test]
    fn pow2_is_exact_across_the_range() {
        let mut expected = 1.0f64;
        for e in 0..=127 {
            assert_eq!(f64::from(pow2(e)), expected, "2^{e}");
            expected *= 2.0;
        }
        let mut expected = 1.0f64;
        for e in 0..=149 {
            assert_eq!(f64::from(pow2(-e)), expected, "2^-{e}");
            expected /= 2.0;
        }
        assert_eq!(pow2(-150), 0.0);
        assert_eq!(pow2(128), f32::INFINITY);
    }

    #[test]
    fn fp8_known_values() {
        assert_eq!(Fp8::E4M3FN.to_f32(0x7e), 448.0);
        assert!(Fp8::E4M3FN.to_f32(0x7f).is_nan());
        assert!(Fp8::E4M3FN.to_f32(0xff).is_nan());
        assert_eq!(Fp8::E4M3FN.to_f32(0x78), 256.0); // exponent all ones is still finite in E4M3FN
        assert_eq!(Fp8::E4M3FN.to_f32(0x01), pow2(-9));
        assert_eq!(Fp8::E4M3FN.to_f32(0x38), 1.0);
        assert_eq!(Fp8::E4M3FN.to_f32(0xb8), -1.0);
        assert_eq!(Fp8::E5M2.to_f32(0x7b), 57344.0);
        assert_eq!(Fp8::E5M2.to_f32(0x7c), f32::INFINITY);
        assert_eq!(Fp8::E5M2.to_f32(0xfc), f32::NEG_INFINITY);
        assert!(Fp8::E5M2.to_f32(0x7d).is_nan());
        assert_eq!(Fp8::E5M2.to_f32(0x01), pow2(-16));
        assert_eq!(Fp8::E5M2.to_f32(0x3c), 1.0);
    }

    #[test]
    fn fp8_round_trips_and_rounds_to_nearest_even() {
        for fmt in [Fp8::E4M3FN, Fp8::E5M2] {
            for b in 0..=u8::MAX {
                let v = fmt.to_f32(b);
                if v.is_nan() {
                    assert!(fmt.to_f32(fmt.from_f32(v)).is_nan());
                } else {
                    assert_eq!(fmt.from_f32(v), b, "{fmt:?} {b:#04x}");
                }
            }
        }
        // 1 + 1/16 is halfway between 1 and 1.125 in E4M3: ties to the even mantissa (1.0).
        assert_eq!(Fp8::E4M3FN.from_f32(1.0625), 0x38);
        // 1.1875 is halfway between 1.125 (odd) and 1.25 (even).
        assert_eq!(Fp8::E4M3FN.from_f32(1.1875), 0x3a);
        assert_eq!(Fp8::E4M3FN.from_f32(460.0), 0x7e); // below the 464 midpoint: 448
        assert_eq!(Fp8::E4M3FN.from_f32(500.0), 0x7f); // beyond: NaN (no inf)
        assert_eq!(Fp8::E4M3FN.from_f32(f32::INFINITY), 0x7f);
        assert_eq!(Fp8::E5M2.from_f32(1e6), 0x7c);
        assert_eq!(Fp8::E5M2.from_f32(-1e6), 0xfc);
        // Halfway between 0 and the smallest subnormal rounds to zero (even).
        assert_eq!(Fp8::E4M3FN.from_f32(pow2(-10)), 0x00);
        assert_eq!(Fp8::E4M3FN.from_f32(3.0 * pow2(-10)), 0x02);
    }
}
