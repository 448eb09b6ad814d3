//! HiFloat8 (`DT_HIFLOAT8`, Ascend 950) bytes to f32, by a 256-entry table computed at compile time.
//!
//! The encoding, as the vendor's runtime decodes it (hicann/runtime `HiFloat8::GetValue` in
//! `src/dfx/adump/adump/printf/hifloat.cpp` and its copy `src/runtime/core/src/dfx/hifloat.cpp`):
//! bit 7 is the sign; the next bits start with a prefix-free "dot" code that gives the exponent width D:
//! `11` D=4, `10` D=3, `01` D=2, `001` D=1, `0001` D=0. The D exponent bits are sign-magnitude with an
//! implicit leading 1: the first bit is the exponent's sign, the magnitude is `1` followed by the other
//! D-1 bits (E = 0 when D = 0). The remaining bits are the mantissa m of length L, and the value is
//! ±2^E·(1 + m/2^L). Dot `0000` is the denormal range: ±2^(M-23), M the last 3 bits. Four codes are
//! special: 0x00 zero, 0x80 NaN, 0x6F +inf, 0xEF -inf. Every value is an f32, so the table is exact.

/// The largest finite HiFloat8 magnitude: 0x6E, 2^15 (0x6F, which would be 1.5·2^15, is +inf).
pub const HIFLOAT8_MAX: f32 = 32768.0;

/// Every HiFloat8 byte's value.
static HIFLOAT8_TO_F32: [f32; 256] = hifloat8_table();

/// One HiFloat8 byte to f32 (exact).
#[inline(always)]
pub fn hifloat8_to_f32(byte: u8) -> f32 {
    HIFLOAT8_TO_F32[usize::from(byte)]
}

const fn hifloat8_table() -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = f32::from_bits(hifloat8_bits(code as u8));
        code += 1;
    }
    table
}

/// The f32 bit pattern of one HiFloat8 byte, assembled field by field (sign, biased exponent, mantissa
/// moved to the top of f32's 23 bits), so that no float arithmetic can round.
const fn hifloat8_bits(byte: u8) -> u32 {
    match byte {
        0x00 => return 0,
        0x80 => return f32::NAN.to_bits(),
        0x6f => return f32::INFINITY.to_bits(),
        0xef => return f32::NEG_INFINITY.to_bits(),
        _ => {}
    }
    let sign = ((byte as u32) >> 7) << 31;
    let rest = byte & 0x7f;
    // (dot code length, exponent width D) from the leading bits of the 7 after the sign.
    let (dot_len, exp_width) = if rest >> 5 == 0b11 {
        (2, 4)
    } else if rest >> 5 == 0b10 {
        (2, 3)
    } else if rest >> 5 == 0b01 {
        (2, 2)
    } else if rest >> 4 == 0b001 {
        (3, 1)
    } else if rest >> 3 == 0b0001 {
        (4, 0)
    } else {
        // Dot 0000: 2^(M-23) for M in 1..=7 (M = 0 is 0x00 or 0x80, taken above).
        let exponent = (rest & 0b111) as i32 - 23;
        return sign | (((exponent + 127) as u32) << 23);
    };
    let man_len = 7 - dot_len - exp_width;
    let exp_bits = (rest as u32 >> man_len) & ((1 << exp_width) - 1);
    let exponent = if exp_width == 0 {
        0
    } else {
        let negative = exp_bits >> (exp_width - 1) == 1;
        // The implicit leading 1 takes the place of the sign bit.
        let magnitude = ((1 << (exp_width - 1)) | (exp_bits & ((1 << (exp_width - 1)) - 1))) as i32;
        if negative {
            -magnitude
        } else {
            magnitude
        }
    };
    let mantissa = rest as u32 & ((1 << man_len) - 1);
    sign | (((exponent + 127) as u32) << 23) | (mantissa << (23 - man_len))
}
