//! Gives the cdylib the SONAME `libascendcl.so`, as CANN's library has: a process that loaded it by full
//! path can then be attached to with `dlopen("libascendcl.so", RTLD_NOLOAD)`, which matches SONAMEs.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libascendcl.so");
    }
}
