//! Protobuf types generated at build time from `proto/*.proto` (see `proto/build.rs`).
//!
//! - [`dumpdata`]: CANN's `toolkit.dumpdata` schema, the header of every dump file.
//! - `capture` (when present): the metadata records of accutrace's own capture format.
//!
//! Nothing here is written by hand beyond this module list: change the `.proto` files instead.

/// CANN's dump file header (`package toolkit.dumpdata`).
pub mod dumpdata {
    include!(concat!(env!("OUT_DIR"), "/toolkit.dumpdata.rs"));
}

/// accutrace's capture record schema (`package accutrace.capture`, see docs/CAPTURE_FORMAT.md).
pub mod capture {
    include!(concat!(env!("OUT_DIR"), "/accutrace.capture.rs"));
}
