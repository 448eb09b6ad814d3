//! Element-wise reductions over raw little-endian buffers, in the element type HCCL was given.
//!
//! fp16 and bf16 are reduced pairwise in f32 and rounded back after every step, as a device adding two
//! half-precision buffers does; integers wrap. The order in which members' buffers are folded is the
//! caller's: a deterministic reduction folds them in rank order.

use ascend_sys::hccl::{
    HcclDataType, HcclReduceOp, HCCL_DATA_TYPE_BFP16, HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_FP32,
    HCCL_DATA_TYPE_FP64, HCCL_DATA_TYPE_INT128, HCCL_DATA_TYPE_INT16, HCCL_DATA_TYPE_INT32,
    HCCL_DATA_TYPE_INT64, HCCL_DATA_TYPE_INT8, HCCL_DATA_TYPE_UINT16, HCCL_DATA_TYPE_UINT32,
    HCCL_DATA_TYPE_UINT64, HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_MAX, HCCL_REDUCE_MIN, HCCL_REDUCE_PROD,
    HCCL_REDUCE_SUM,
};
use half::{bf16, f16};

/// Why a reduction cannot run: the op or the element type is not one HCCL reduces.
#[derive(Debug, PartialEq, Eq)]
pub enum Unsupported {
    Op(HcclReduceOp),
    DataType(HcclDataType),
}

/// Whether `op` is a reduce op and `dtype` a type HCCL reduces (the fp8 family and hif8 are moved, not
/// reduced).
pub fn check(dtype: HcclDataType, op: HcclReduceOp) -> Result<(), Unsupported> {
    if !matches!(op, HCCL_REDUCE_SUM | HCCL_REDUCE_PROD | HCCL_REDUCE_MAX | HCCL_REDUCE_MIN) {
        return Err(Unsupported::Op(op));
    }
    match dtype {
        HCCL_DATA_TYPE_INT8
        | HCCL_DATA_TYPE_INT16
        | HCCL_DATA_TYPE_INT32
        | HCCL_DATA_TYPE_INT64
        | HCCL_DATA_TYPE_INT128
        | HCCL_DATA_TYPE_UINT8
        | HCCL_DATA_TYPE_UINT16
        | HCCL_DATA_TYPE_UINT32
        | HCCL_DATA_TYPE_UINT64
        | HCCL_DATA_TYPE_FP16
        | HCCL_DATA_TYPE_BFP16
        | HCCL_DATA_TYPE_FP32
        | HCCL_DATA_TYPE_FP64 => Ok(()),
        other => Err(Unsupported::DataType(other)),
    }
}

/// `acc[i] = acc[i] op other[i]` for every element. Both slices hold whole elements of `dtype` and have the
/// same length; [`check`] has accepted `dtype` and `op`.
pub fn fold_into(acc: &mut [u8], other: &[u8], dtype: HcclDataType, op: HcclReduceOp) {
    debug_assert_eq!(acc.len(), other.len());
    macro_rules! ints {
        ($t:ty) => {
            fold::<$t, { std::mem::size_of::<$t>() }>(acc, other, |a, b| match op {
                HCCL_REDUCE_SUM => a.wrapping_add(b),
                HCCL_REDUCE_PROD => a.wrapping_mul(b),
                HCCL_REDUCE_MAX => a.max(b),
                _ => a.min(b),
            })
        };
    }
    match dtype {
        HCCL_DATA_TYPE_INT8 => ints!(i8),
        HCCL_DATA_TYPE_INT16 => ints!(i16),
        HCCL_DATA_TYPE_INT32 => ints!(i32),
        HCCL_DATA_TYPE_INT64 => ints!(i64),
        HCCL_DATA_TYPE_INT128 => ints!(i128),
        HCCL_DATA_TYPE_UINT8 => ints!(u8),
        HCCL_DATA_TYPE_UINT16 => ints!(u16),
        HCCL_DATA_TYPE_UINT32 => ints!(u32),
        HCCL_DATA_TYPE_UINT64 => ints!(u64),
        HCCL_DATA_TYPE_FP32 => fold::<f32, 4>(acc, other, |a, b| float_op(op, a, b)),
        HCCL_DATA_TYPE_FP64 => fold::<f64, 8>(acc, other, |a, b| float_op(op, a, b)),
        HCCL_DATA_TYPE_FP16 => {
            fold::<f16, 2>(acc, other, |a, b| f16::from_f32(float_op(op, a.to_f32(), b.to_f32())))
        }
        HCCL_DATA_TYPE_BFP16 => {
            fold::<bf16, 2>(acc, other, |a, b| bf16::from_f32(float_op(op, a.to_f32(), b.to_f32())))
        }
        _ => unreachable!("fold_into on a type check() refuses"),
    }
}

/// max/min propagate NaN, as a device's vector max does (Rust's `f32::max` would drop it and hide an
/// overflow from the analysis this stand-in exists to test).
fn float_op<T: num::Float>(op: HcclReduceOp, a: T, b: T) -> T {
    match op {
        HCCL_REDUCE_SUM => a + b,
        HCCL_REDUCE_PROD => a * b,
        _ if a.is_nan() || b.is_nan() => a + b,
        HCCL_REDUCE_MAX => {
            if b > a {
                b
            } else {
                a
            }
        }
        _ => {
            if b < a {
                b
            } else {
                a
            }
        }
    }
}

/// Little-endian element access for the types above.
trait Element: Copy {
    fn read(bytes: &[u8]) -> Self;
    fn write(self, out: &mut [u8]);
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn read(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("chunk of the element's width"))
            }
            fn write(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
element!(i8, i16, i32, i64, i128, u8, u16, u32, u64, f32, f64, f16, bf16);

fn fold<T: Element, const W: usize>(acc: &mut [u8], other: &[u8], f: impl Fn(T, T) -> T) {
    for (a, b) in acc.chunks_exact_mut(W).zip(other.chunks_exact(W)) {
        f(T::read(a), T::read(b)).write(a);
    }
}

/// The float operations `float_op` needs, for f32 and f64.
mod num {
    pub trait Float: Copy + PartialOrd + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {
        fn is_nan(self) -> bool;
    }
    impl Float for f32 {
        fn is_nan(self) -> bool {
            f32::is_nan(self)
        }
    }
    impl Float for f64 {
        fn is_nan(self) -> bool {
            f64::is_nan(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn sums_and_extremes_in_the_element_type() {
        let mut acc = f32s(&[1.0, -2.0, f32::NAN]);
        fold_into(&mut acc, &f32s(&[0.5, 3.0, 1.0]), HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX);
        let got: Vec<f32> = acc.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got[..2], [1.0, 3.0]);
        assert!(got[2].is_nan(), "max keeps a NaN");

        let mut acc: Vec<u8> = [i32::MAX, 5].iter().flat_map(|x| x.to_le_bytes()).collect();
        let other: Vec<u8> = [1i32, -7].iter().flat_map(|x| x.to_le_bytes()).collect();
        fold_into(&mut acc, &other, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM);
        assert_eq!(acc[..4], i32::MIN.to_le_bytes(), "integers wrap");
        assert_eq!(acc[4..], (-2i32).to_le_bytes());
    }

    #[test]
    fn half_precision_rounds_after_each_step() {
        // 2048 + 1 is not representable in fp16: each addition rounds back to 2048.
        let mut acc = f16::from_f32(2048.0).to_le_bytes().to_vec();
        for _ in 0..3 {
            fold_into(&mut acc, &f16::ONE.to_le_bytes(), HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM);
        }
        assert_eq!(f16::from_le_bytes([acc[0], acc[1]]).to_f32(), 2048.0);
        let mut acc = bf16::from_f32(1.5).to_le_bytes().to_vec();
        fold_into(&mut acc, &bf16::from_f32(2.0).to_le_bytes(), HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_PROD);
        assert_eq!(bf16::from_le_bytes([acc[0], acc[1]]).to_f32(), 3.0);
    }

    #[test]
    fn refuses_what_hccl_does_not_reduce() {
        assert_eq!(check(HCCL_DATA_TYPE_FP32, 9), Err(Unsupported::Op(9)));
        assert_eq!(check(15, HCCL_REDUCE_SUM), Err(Unsupported::DataType(15)));
        assert_eq!(check(HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_MIN), Ok(()));
    }
}
