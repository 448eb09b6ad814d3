//! The dtype table: one definition of every CANN data type's storage and meaning.
//!
//! Codes and names come from the `OutputDataType` enum of `proto/dump_data.proto`; this module adds what a
//! decoder needs to know about each (bits per element, kind, cube block C0, saturation limit). Unknown codes
//! are kept, never guessed: they decode to "UNKNOWN(code)" and are refused by the tensor decoder by name.

use accutrace_proto::dumpdata::OutputDataType as Dt;
use std::borrow::Cow;

/// A CANN data type code (`DT_*`), possibly one this build does not know.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct DType(i32);

/// How the bits of one element are to be read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Floating point: IEEE-like (fp64, fp32, fp16, bf16, fp8 E4M3FN / E5M2) and HiFloat8.
    Float,
    /// Two's-complement signed integer (including packed int4 and the quantized QINT types).
    Int,
    /// Unsigned integer (including bit-packed uint1 and the quantized QUINT types).
    UInt,
    /// One byte, zero is false.
    Bool,
    /// Interleaved (re, im) pairs of a float kind.
    Complex,
    /// Bytes whose numeric encoding accutrace does not decode (strings, resources, fp6/fp4, ...).
    Opaque,
}

macro_rules! dtype_consts {
    ($($name:ident = $variant:ident),* $(,)?) => {
        impl DType {
            $(
                #[doc = concat!("`DT_", stringify!($name), "`")]
                pub const $name: DType = DType(Dt::$variant as i32);
            )*
        }
    };
}

dtype_consts! {
    UNDEFINED = DtUndefined, FLOAT = DtFloat, FLOAT16 = DtFloat16, INT8 = DtInt8, UINT8 = DtUint8,
    INT16 = DtInt16, UINT16 = DtUint16, INT32 = DtInt32, INT64 = DtInt64, UINT32 = DtUint32, UINT64 = DtUint64,
    BOOL = DtBool, DOUBLE = DtDouble, STRING = DtString, COMPLEX64 = DtComplex64, COMPLEX128 = DtComplex128,
    QINT8 = DtQint8, QINT16 = DtQint16, QINT32 = DtQint32, QUINT8 = DtQuint8, QUINT16 = DtQuint16,
    BF16 = DtBf16, INT4 = DtInt4, UINT1 = DtUint1, INT2 = DtInt2, UINT2 = DtUint2, COMPLEX32 = DtComplex32,
    HIFLOAT8 = DtHifloat8, FLOAT8_E5M2 = DtFloat8E5m2, FLOAT8_E4M3FN = DtFloat8E4m3fn,
    FLOAT8_E8M0 = DtFloat8E8m0, FLOAT6_E3M2 = DtFloat6E3m2, FLOAT6_E2M3 = DtFloat6E2m3,
    FLOAT4_E2M1 = DtFloat4E2m1, FLOAT4_E1M2 = DtFloat4E1m2, HIFLOAT4 = DtHifloat4,
    HIFLOAT4_SCALE = DtHifloat4Scale,
}

/// `aclDataType` (acl_base.h) to the dump's `OutputDataType`.
const ACL_DATA_TYPES: [(i32, DType); 27] = [
    (0, DType::FLOAT),
    (1, DType::FLOAT16),
    (2, DType::INT8),
    (3, DType::INT32),
    (4, DType::UINT8),
    (6, DType::INT16),
    (7, DType::UINT16),
    (8, DType::UINT32),
    (9, DType::INT64),
    (10, DType::UINT64),
    (11, DType::DOUBLE),
    (12, DType::BOOL),
    (13, DType::STRING),
    (16, DType::COMPLEX64),
    (17, DType::COMPLEX128),
    (27, DType::BF16),
    (29, DType::INT4),
    (30, DType::UINT1),
    (33, DType::COMPLEX32),
    (34, DType::HIFLOAT8),
    (35, DType::FLOAT8_E5M2),
    (36, DType::FLOAT8_E4M3FN),
    (37, DType::FLOAT8_E8M0),
    (38, DType::FLOAT6_E3M2),
    (39, DType::FLOAT6_E2M3),
    (40, DType::FLOAT4_E2M1),
    (41, DType::FLOAT4_E1M2),
];

impl DType {
    /// The dtype with this enum code (any value: unknown codes are kept and reported, not rejected here).
    pub const fn from_code(code: i32) -> DType {
        DType(code)
    }

    /// The `OutputDataType` enum value.
    pub const fn code(self) -> i32 {
        self.0
    }

    /// The dtype of an `aclDataType` value (acl_base.h: `ACL_FLOAT = 0`, `ACL_FLOAT16 = 1`, `ACL_INT32 = 3`,
    /// `ACL_BF16 = 27`, ...), which numbers types differently from the dump's `OutputDataType`: the runtime
    /// converts one to the other when it writes a dump. `None` for values without a dump counterpart
    /// (`ACL_DT_UNDEFINED = -1`, unlisted values).
    pub fn from_acl(acl: i32) -> Option<DType> {
        ACL_DATA_TYPES.iter().find(|&&(a, _)| a == acl).map(|&(_, d)| d)
    }

    /// The `aclDataType` value of this dtype, when acl_base.h lists one.
    pub fn acl(self) -> Option<i32> {
        ACL_DATA_TYPES.iter().find(|&&(_, d)| d == self).map(|&(a, _)| a)
    }

    /// Whether the code is one of the enum's listed values.
    pub fn is_known(self) -> bool {
        Dt::try_from(self.0).is_ok()
    }

    /// Short upper-case name without the `DT_` prefix (`FLOAT16`, `BF16`), or `UNKNOWN(99)`.
    pub fn name(self) -> Cow<'static, str> {
        match Dt::try_from(self.0) {
            Ok(dt) => Cow::Borrowed(dt.as_str_name().trim_start_matches("DT_")),
            Err(_) => Cow::Owned(format!("UNKNOWN({})", self.0)),
        }
    }

    /// Storage bits per element, when elements have a fixed width (int4 = 4, uint1 = 1, complex64 = 64).
    /// `None` for HIFLOAT4_SCALE: the vendor's size tables (metadef `GetSizeByDataType`) give it no width.
    pub fn bits(self) -> Option<u32> {
        let bits = match self {
            DType::BOOL | DType::INT8 | DType::UINT8 | DType::QINT8 | DType::QUINT8 => 8,
            DType::HIFLOAT8 | DType::FLOAT8_E5M2 | DType::FLOAT8_E4M3FN | DType::FLOAT8_E8M0 => 8,
            DType::FLOAT16 | DType::BF16 | DType::INT16 | DType::UINT16 | DType::QINT16 | DType::QUINT16 => {
                16
            }
            DType::FLOAT | DType::INT32 | DType::UINT32 | DType::QINT32 | DType::COMPLEX32 => 32,
            DType::DOUBLE | DType::INT64 | DType::UINT64 | DType::COMPLEX64 => 64,
            DType::COMPLEX128 => 128,
            DType::INT4 | DType::FLOAT4_E2M1 | DType::FLOAT4_E1M2 | DType::HIFLOAT4 => 4,
            DType::INT2 | DType::UINT2 => 2,
            DType::UINT1 => 1,
            DType::FLOAT6_E3M2 | DType::FLOAT6_E2M3 => 6,
            _ => return None,
        };
        Some(bits)
    }

    /// Bytes that `elements` elements occupy (sub-byte types are packed, rounded up to whole bytes).
    /// `None` for types without a fixed width or on overflow.
    pub fn byte_size(self, elements: u64) -> Option<u64> {
        let bits = elements.checked_mul(u64::from(self.bits()?))?;
        Some(bits.div_ceil(8))
    }

    /// How the elements are to be read; [`Kind::Opaque`] for anything accutrace does not decode.
    pub fn kind(self) -> Kind {
        match self {
            DType::FLOAT | DType::FLOAT16 | DType::BF16 | DType::DOUBLE => Kind::Float,
            DType::FLOAT8_E5M2 | DType::FLOAT8_E4M3FN | DType::HIFLOAT8 => Kind::Float,
            DType::INT8 | DType::INT16 | DType::INT32 | DType::INT64 | DType::INT4 => Kind::Int,
            DType::QINT8 | DType::QINT16 | DType::QINT32 => Kind::Int,
            DType::UINT8 | DType::UINT16 | DType::UINT32 | DType::UINT64 | DType::UINT1 => Kind::UInt,
            DType::QUINT8 | DType::QUINT16 => Kind::UInt,
            DType::BOOL => Kind::Bool,
            DType::COMPLEX32 | DType::COMPLEX64 | DType::COMPLEX128 => Kind::Complex,
            _ => Kind::Opaque,
        }
    }

    /// Whether the tensor decoder turns this type into numbers.
    pub fn is_decodable(self) -> bool {
        self.kind() != Kind::Opaque
    }

    /// Why a tensor of this dtype cannot be turned into numbers, naming the dtype; `None` where it can.
    /// Such a tensor is unreadable by design: reports name it and count it as unreadable input (exit 2).
    pub fn undecodable_reason(self) -> Option<String> {
        if self.is_decodable() {
            None
        } else if self.is_known() {
            Some(format!("{}: accutrace cannot decode its values yet", self.name()))
        } else {
            Some(format!(
                "{}: a dtype code this accutrace does not know, so its values cannot be decoded",
                self.name()
            ))
        }
    }

    /// Whether values are floating point (complex counts: its parts are floats).
    pub fn is_float(self) -> bool {
        matches!(self.kind(), Kind::Float | Kind::Complex)
    }

    /// The cube block C0 of device formats: 16 for 16/32-bit types, 32 for 8-bit, 64 for 4-bit.
    pub fn c0(self) -> u32 {
        match self.bits() {
            Some(8) => 32,
            Some(4) => 64,
            _ => 16,
        }
    }

    /// The largest finite magnitude: values at this limit are what saturation mode leaves of an overflow.
    pub fn saturation_limit(self) -> Option<f64> {
        Some(match self {
            DType::FLOAT16 | DType::COMPLEX32 => 65504.0,
            DType::BF16 => 3.3895313892515355e38,
            DType::FLOAT | DType::COMPLEX64 => f32::MAX as f64,
            DType::DOUBLE | DType::COMPLEX128 => f64::MAX,
            DType::FLOAT8_E4M3FN => 448.0,
            DType::FLOAT8_E5M2 => 57344.0,
            DType::HIFLOAT8 => crate::tensor::hifloat8::HIFLOAT8_MAX as f64,
            DType::INT8 | DType::QINT8 => i8::MAX as f64,
            DType::INT16 | DType::QINT16 => i16::MAX as f64,
            DType::INT32 | DType::QINT32 => i32::MAX as f64,
            DType::INT64 => i64::MAX as f64,
            DType::UINT8 | DType::QUINT8 => u8::MAX as f64,
            DType::UINT16 | DType::QUINT16 => u16::MAX as f64,
            DType::UINT32 => u32::MAX as f64,
            DType::UINT64 => u64::MAX as f64,
            DType::INT4 => 7.0,
            _ => return None,
        })
    }

    /// PyTorch's name of the dtype (`torch.float32`), as msprobe writes it; `None` where torch has none.
    pub fn torch_name(self) -> Option<&'static str> {
        Some(match self {
            DType::FLOAT => "torch.float32",
            DType::FLOAT16 => "torch.float16",
            DType::BF16 => "torch.bfloat16",
            DType::DOUBLE => "torch.float64",
            DType::INT8 => "torch.int8",
            DType::UINT8 => "torch.uint8",
            DType::INT16 => "torch.int16",
            DType::UINT16 => "torch.uint16",
            DType::INT32 => "torch.int32",
            DType::UINT32 => "torch.uint32",
            DType::INT64 => "torch.int64",
            DType::UINT64 => "torch.uint64",
            DType::BOOL => "torch.bool",
            DType::COMPLEX32 => "torch.complex32",
            DType::COMPLEX64 => "torch.complex64",
            DType::COMPLEX128 => "torch.complex128",
            DType::FLOAT8_E4M3FN => "torch.float8_e4m3fn",
            DType::FLOAT8_E5M2 => "torch.float8_e5m2",
            _ => return None,
        })
    }

    /// Parses the names other tools print: `DT_FLOAT16`, `FLOAT16`, `float16`, `torch.float16`, `fp16`,
    /// `half`, `bfloat16`, `float32`, `int64`, `bool`, ... Case-insensitive.
    pub fn from_name(name: &str) -> Option<DType> {
        let lower = name.trim().to_ascii_lowercase();
        let bare = lower.strip_prefix("torch.").or_else(|| lower.strip_prefix("dt_")).unwrap_or(&lower);
        let dtype = match bare {
            "float" | "float32" | "fp32" => DType::FLOAT,
            "float16" | "fp16" | "half" => DType::FLOAT16,
            "bf16" | "bfloat16" => DType::BF16,
            "double" | "float64" | "fp64" => DType::DOUBLE,
            "int8" => DType::INT8,
            "uint8" => DType::UINT8,
            "int16" | "short" => DType::INT16,
            "uint16" => DType::UINT16,
            "int32" | "int" => DType::INT32,
            "int64" | "long" => DType::INT64,
            "uint32" => DType::UINT32,
            "uint64" => DType::UINT64,
            "bool" => DType::BOOL,
            "int4" => DType::INT4,
            "uint1" => DType::UINT1,
            "complex32" => DType::COMPLEX32,
            "complex64" | "cfloat" => DType::COMPLEX64,
            "complex128" | "cdouble" => DType::COMPLEX128,
            "float8_e4m3fn" => DType::FLOAT8_E4M3FN,
            "float8_e5m2" => DType::FLOAT8_E5M2,
            _ => {
                return Dt::from_str_name(&format!("DT_{}", bare.to_ascii_uppercase()))
                    .map(|d| DType(d as i32))
            }
        };
        Some(dtype)
    }
}

/// HCCL's data type codes (`HcclDataType` of hccl_types.h) on the dtype table: collectives name their
/// element type with these, not with CANN's `OutputDataType`.
pub mod hccl {
    use super::DType;

    /// HCCL's 128-bit integer: no CANN dtype has it, so it has no [`DType`]; collectives still move it.
    pub const INT128: u32 = 12;

    /// The CANN dtype of an HCCL code, `None` for int128 and for codes HCCL does not define.
    pub fn dtype(code: u32) -> Option<DType> {
        Some(match code {
            0 => DType::INT8,
            1 => DType::INT16,
            2 => DType::INT32,
            3 => DType::FLOAT16,
            4 => DType::FLOAT,
            5 => DType::INT64,
            6 => DType::UINT64,
            7 => DType::UINT8,
            8 => DType::UINT16,
            9 => DType::UINT32,
            10 => DType::DOUBLE,
            11 => DType::BF16,
            14 => DType::HIFLOAT8,
            15 => DType::FLOAT8_E4M3FN,
            16 => DType::FLOAT8_E5M2,
            17 => DType::FLOAT8_E8M0,
            _ => return None,
        })
    }

    /// Bytes per element of an HCCL code, `None` for codes HCCL does not define.
    pub fn element_bytes(code: u32) -> Option<u64> {
        if code == INT128 {
            return Some(16);
        }
        Some(u64::from(dtype(code)?.bits()? / 8))
    }

    /// A short name for reports: the CANN dtype's (`FLOAT16`), `INT128`, or `HCCL_DATA_TYPE(13)`.
    pub fn name(code: u32) -> String {
        match dtype(code) {
            Some(d) => d.name().into_owned(),
            None if code == INT128 => "INT128".into(),
            None => format!("HCCL_DATA_TYPE({code})"),
        }
    }
}

/// Serialized as its name (`"FLOAT16"`), which is what JSON reports and manifests show.
impl serde::Serialize for DType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name())
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_data_types_map_to_dump_types_and_back() {
        assert_eq!(DType::from_acl(0), Some(DType::FLOAT));
        assert_eq!(DType::from_acl(1), Some(DType::FLOAT16));
        assert_eq!(DType::from_acl(3), Some(DType::INT32));
        assert_eq!(DType::from_acl(27), Some(DType::BF16));
        assert_eq!(DType::from_acl(-1), None);
        assert_eq!(DType::from_acl(5), None, "acl_base.h skips 5");
        for (acl, d) in ACL_DATA_TYPES {
            assert_eq!(d.acl(), Some(acl));
            assert!(d.is_known(), "{acl}");
        }
        assert_eq!(DType::QINT8.acl(), None);
    }

    #[test]
    fn names_and_sizes_follow_the_enum() {
        assert_eq!(DType::FLOAT16.code(), 2);
        assert_eq!(DType::BF16.code(), 27);
        assert_eq!(DType::FLOAT8_E4M3FN.code(), 35);
        assert_eq!(DType::BF16.name(), "BF16");
        assert_eq!(DType::from_code(999).name(), "UNKNOWN(999)");
        assert!(!DType::from_code(999).is_decodable());
        assert_eq!(DType::INT4.byte_size(5), Some(3));
        assert_eq!(DType::UINT1.byte_size(9), Some(2));
        assert_eq!(DType::COMPLEX64.byte_size(3), Some(24));
        assert_eq!(DType::STRING.byte_size(3), None);
        assert_eq!(DType::FLOAT.byte_size(u64::MAX), None);
        assert_eq!(DType::INT8.c0(), 32);
        assert_eq!(DType::INT4.c0(), 64);
        assert_eq!(DType::FLOAT.c0(), 16);
    }

    /// The runtime's `OutputDataType` (hicann/runtime 681ef761 `src/dfx/adump/proto/dump_task.proto`) with
    /// each element's bits from its metadef `GetSizeByDataType` (`src/dfx/adump/inc/metadef/external/graph/
    /// types.h`; `kDataTypeSizeBitOffset + n` is n bits); `None` where the vendor has no width (-1, or
    /// HIFLOAT4_SCALE, which its table stops short of). Written out by hand: a code, name or width of ours
    /// that differs from the vendor's fails here.
    const VENDOR_DTYPES: [(i32, &str, Option<u32>); 43] = [
        (0, "UNDEFINED", None),
        (1, "FLOAT", Some(32)),
        (2, "FLOAT16", Some(16)),
        (3, "INT8", Some(8)),
        (4, "UINT8", Some(8)),
        (5, "INT16", Some(16)),
        (6, "UINT16", Some(16)),
        (7, "INT32", Some(32)),
        (8, "INT64", Some(64)),
        (9, "UINT32", Some(32)),
        (10, "UINT64", Some(64)),
        (11, "BOOL", Some(8)),
        (12, "DOUBLE", Some(64)),
        (13, "STRING", None),
        (14, "DUAL_SUB_INT8", Some(8)),
        (15, "DUAL_SUB_UINT8", Some(8)),
        (16, "COMPLEX64", Some(64)),
        (17, "COMPLEX128", Some(128)),
        (18, "QINT8", Some(8)),
        (19, "QINT16", Some(16)),
        (20, "QINT32", Some(32)),
        (21, "QUINT8", Some(8)),
        (22, "QUINT16", Some(16)),
        (23, "RESOURCE", Some(64)),
        (24, "STRING_REF", None),
        (25, "DUAL", Some(40)),
        (26, "VARIANT", Some(64)),
        (27, "BF16", Some(16)),
        (28, "INT4", Some(4)),
        (29, "UINT1", Some(1)),
        (30, "INT2", Some(2)),
        (31, "UINT2", Some(2)),
        (32, "COMPLEX32", Some(32)),
        (33, "HIFLOAT8", Some(8)),
        (34, "FLOAT8_E5M2", Some(8)),
        (35, "FLOAT8_E4M3FN", Some(8)),
        (36, "FLOAT8_E8M0", Some(8)),
        (37, "FLOAT6_E3M2", Some(6)),
        (38, "FLOAT6_E2M3", Some(6)),
        (39, "FLOAT4_E2M1", Some(4)),
        (40, "FLOAT4_E1M2", Some(4)),
        (41, "HIFLOAT4", Some(4)),
        (42, "HIFLOAT4_SCALE", None),
    ];

    /// Types the vendor sizes that are no array of numbers to accutrace (a handle, a variant, a float plus
    /// int8 pair, the halves of a dual output): no width here, so nothing reads their bytes as elements.
    const WIDTHLESS_BY_CHOICE: [&str; 5] = ["DUAL_SUB_INT8", "DUAL_SUB_UINT8", "RESOURCE", "DUAL", "VARIANT"];

    #[test]
    fn every_code_name_and_width_is_the_vendor_s() {
        for (code, name, vendor_bits) in VENDOR_DTYPES {
            let dtype = DType::from_code(code);
            assert!(dtype.is_known(), "{code} {name}");
            assert_eq!(dtype.name(), name, "code {code}");
            assert_eq!(DType::from_name(&format!("DT_{name}")), Some(dtype), "{name}");
            let ours = if WIDTHLESS_BY_CHOICE.contains(&name) { None } else { vendor_bits };
            assert_eq!(dtype.bits(), ours, "{name}'s bits");
        }
        // Nothing past the vendor's last code is known.
        assert!(!DType::from_code(VENDOR_DTYPES.len() as i32).is_known());
    }

    /// The runtime's newer dtypes: HIFLOAT4 is sized (so a file's later tensors are placed right) but not
    /// decoded, since no vendor source gives the encoding of its values; its scale type has no width.
    #[test]
    fn hifloat4_is_named_sized_and_refused_by_name() {
        assert_eq!(DType::HIFLOAT4.code(), 41);
        assert_eq!(DType::HIFLOAT4_SCALE.code(), 42);
        assert_eq!(DType::HIFLOAT4.byte_size(5), Some(3));
        assert_eq!(DType::HIFLOAT4.c0(), 64, "the vendor's platform tables give DT_HIFLOAT4 a C0 of 64");
        assert_eq!(DType::HIFLOAT4_SCALE.byte_size(5), None);
        for dtype in [DType::HIFLOAT4, DType::HIFLOAT4_SCALE] {
            assert!(!dtype.is_decodable(), "{dtype}");
            let why = dtype.undecodable_reason().unwrap();
            assert_eq!(why, format!("{dtype}: accutrace cannot decode its values yet"));
        }
        assert_eq!(
            DType::from_code(99).undecodable_reason().unwrap(),
            "UNKNOWN(99): a dtype code this accutrace does not know, so its values cannot be decoded"
        );
        assert_eq!(DType::FLOAT16.undecodable_reason(), None);
    }

    /// HiFloat8 decodes (tensor::hifloat8, from the vendor runtime's decoder): a float kind, one byte, and
    /// saturation at its largest finite value, 2^15.
    #[test]
    fn hifloat8_is_a_decodable_float() {
        assert_eq!(DType::HIFLOAT8.kind(), Kind::Float);
        assert_eq!(DType::HIFLOAT8.undecodable_reason(), None);
        assert_eq!(DType::HIFLOAT8.bits(), Some(8));
        assert_eq!(DType::HIFLOAT8.saturation_limit(), Some(32768.0));
        assert_eq!(DType::from_name("hifloat8"), Some(DType::HIFLOAT8));
    }

    #[test]
    fn hccl_codes_map_onto_the_table() {
        assert_eq!(hccl::dtype(3), Some(DType::FLOAT16));
        assert_eq!(hccl::dtype(4), Some(DType::FLOAT));
        assert_eq!(hccl::dtype(11), Some(DType::BF16));
        assert_eq!(hccl::dtype(15), Some(DType::FLOAT8_E4M3FN));
        assert_eq!(hccl::dtype(13), None);
        assert_eq!(hccl::element_bytes(hccl::INT128), Some(16));
        assert_eq!(hccl::element_bytes(10), Some(8));
        assert_eq!(hccl::element_bytes(13), None);
        assert_eq!(hccl::name(12), "INT128");
        assert_eq!(hccl::name(99), "HCCL_DATA_TYPE(99)");
    }

    #[test]
    fn parses_other_tools_names() {
        assert_eq!(DType::from_name("torch.bfloat16"), Some(DType::BF16));
        // Every torch name reads back as its dtype.
        for code in 0..64 {
            let dtype = DType(code);
            if let Some(name) = dtype.torch_name() {
                assert_eq!(DType::from_name(name), Some(dtype), "{name}");
            }
        }
        assert_eq!(DType::from_name("DT_FLOAT16"), Some(DType::FLOAT16));
        assert_eq!(DType::from_name("float32"), Some(DType::FLOAT));
        assert_eq!(DType::from_name("DT_QINT8"), Some(DType::QINT8));
        assert_eq!(DType::from_name("nonsense"), None);
    }
}
