//! Compiles the `*.proto` files of this package (`proto/`) into Rust with protox (a pure-Rust protobuf
//! compiler front end) and prost-build, so building accutrace needs neither a system `protoc` nor libclang.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Cargo runs build scripts in the package directory: the .proto files sit beside Cargo.toml.
    let proto_dir = PathBuf::from(".");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&proto_dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "proto"))
        .collect();
    files.sort();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    // Watching the directory too makes a newly added .proto file trigger a rebuild.
    println!("cargo:rerun-if-changed=.");
    println!("cargo:rerun-if-changed=build.rs");

    let descriptors = protox::compile(&files, [&proto_dir])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
