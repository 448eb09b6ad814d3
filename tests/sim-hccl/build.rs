//! Gives the cdylib the SONAME `libhccl.so`, as CANN's library has, so `dlopen("libhccl.so", RTLD_NOLOAD)`
//! finds a copy that was loaded by full path.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhccl.so");
    }
}
