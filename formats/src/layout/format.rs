//! The `Format` newtype over CANN's `OutputFormat` code.

use accutrace_proto::dumpdata::OutputFormat;
use std::borrow::Cow;

/// A CANN device format code (`FORMAT_*`), possibly one this build does not know.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Format(i32);

macro_rules! format_consts {
    ($($name:ident = $code:literal),* $(,)?) => {
        impl Format {
            $(
                #[doc = concat!("`FORMAT_", stringify!($name), "` (", stringify!($code), ")")]
                pub const $name: Format = Format($code);
            )*
        }
    };
}

// Codes from proto/dump_data.proto (docs/CANN.md §1); a unit test checks each against the generated enum.
format_consts! {
    NCHW = 0, NHWC = 1, ND = 2, NC1HWC0 = 3, FRACTAL_Z = 4, NC1HWC0_C04 = 12, HWCN = 16,
    C1HWNCOC0 = 25, MD = 26, NDHWC = 27, FRACTAL_NZ = 29, NCDHW = 30, DHWCN = 31, NDC1HWC0 = 32,
    FRACTAL_Z_3D = 33,
    CN = 34, NC = 35, FRACTAL_Z_G = 39, NCL = 47,
}

impl Format {
    /// The format with this enum code (unknown codes are kept and reported by the converters).
    pub const fn from_code(code: i32) -> Format {
        Format(code)
    }

    /// The `OutputFormat` enum value.
    pub const fn code(self) -> i32 {
        self.0
    }

    /// Whether the code is one of the enum's listed values.
    pub fn is_known(self) -> bool {
        OutputFormat::try_from(self.0).is_ok()
    }

    /// Name without the `FORMAT_` prefix (`NC1HWC0`, `FRACTAL_NZ`, `C1HWNCoC0`), or `UNKNOWN(77)`.
    pub fn name(self) -> Cow<'static, str> {
        match OutputFormat::try_from(self.0) {
            Ok(f) => Cow::Borrowed(f.as_str_name().trim_start_matches("FORMAT_")),
            Err(_) => Cow::Owned(format!("UNKNOWN({})", self.0)),
        }
    }

    /// Parses `FORMAT_NC1HWC0`, `NC1HWC0`, `fractal_nz`, ... (case-insensitive).
    pub fn from_name(name: &str) -> Option<Format> {
        let upper = name.trim().to_ascii_uppercase();
        let bare = upper.strip_prefix("FORMAT_").unwrap_or(&upper);
        // The enum spells one name in mixed case (C1HWNCoC0), so compare case-insensitively.
        (0..=255).map(Format).find(|f| f.is_known() && f.name().eq_ignore_ascii_case(bare))
    }

    /// Formats whose device bytes are the host tensor in row-major order, unchanged.
    pub fn is_identity(self) -> bool {
        matches!(
            self,
            Format::ND | Format::NCHW | Format::NC | Format::NCL | Format::NCDHW | Format::CN | Format::MD
        )
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consts_match_the_generated_enum() {
        for (format, name) in [
            (Format::NCHW, "NCHW"),
            (Format::NHWC, "NHWC"),
            (Format::ND, "ND"),
            (Format::NC1HWC0, "NC1HWC0"),
            (Format::FRACTAL_Z, "FRACTAL_Z"),
            (Format::NC1HWC0_C04, "NC1HWC0_C04"),
            (Format::HWCN, "HWCN"),
            (Format::C1HWNCOC0, "C1HWNCoC0"),
            (Format::MD, "MD"),
            (Format::NDHWC, "NDHWC"),
            (Format::FRACTAL_NZ, "FRACTAL_NZ"),
            (Format::NCDHW, "NCDHW"),
            (Format::DHWCN, "DHWCN"),
            (Format::NDC1HWC0, "NDC1HWC0"),
            (Format::FRACTAL_Z_3D, "FRACTAL_Z_3D"),
            (Format::CN, "CN"),
            (Format::NC, "NC"),
            (Format::FRACTAL_Z_G, "FRACTAL_Z_G"),
            (Format::NCL, "NCL"),
        ] {
            assert_eq!(format.name(), name);
            assert_eq!(Format::from_name(name), Some(format));
        }
        assert_eq!(Format::from_name("format_c1hwncoc0"), Some(Format::C1HWNCOC0));
        assert_eq!(Format::from_code(77).name(), "UNKNOWN(77)");
        assert_eq!(Format::from_name("nonsense"), None);
    }
}
