//! Finding CANN's libraries at run time and resolving the ACL entry points from them.
//!
//! Nothing links against CANN: the collector is injected into a process that already loaded
//! `libascendcl.so` (attach with `RTLD_NOLOAD`, the vendor collector's own pattern), and tools that drive
//! the runtime themselves search the toolkit's usual install locations. Every entry point is optional at
//! load time; a missing one is reported by name when asked for, never by a panic.

use crate::fns::*;
use libloading::os::unix::Library;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};

/// The runtime library; its SONAME, which `RTLD_NOLOAD` matches, is the same.
pub const ASCENDCL_NAME: &str = "libascendcl.so";
/// The open-source runtime's own library (hicann/runtime `src/acl/aclrt`): `aclInit`, `aclFinalize`, the
/// `aclrt*` calls and `aclmdlInitDump`/`SetDump`/`FinalizeDump` are defined here, and `libascendcl.so`
/// becomes a compatibility library beside it. A framework built against it may never load `libascendcl.so`.
pub const ACL_RT_NAME: &str = "libacl_rt.so";
/// Newer toolkits move the dump API (`acldumpRegCallback`, ...) into this library.
pub const ASCEND_DUMP_NAME: &str = "libascend_dump.so";
/// Every library the entry points may come from, in the order they are searched.
pub const RUNTIME_NAMES: [&str; 3] = [ASCENDCL_NAME, ACL_RT_NAME, ASCEND_DUMP_NAME];

/// Why the library or one of its entry points is unavailable.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("none of {ASCENDCL_NAME}, {ACL_RT_NAME}, {ASCEND_DUMP_NAME} is loaded in this process")]
    NotLoaded,
    #[error("cannot load {path}: {source}")]
    Open { path: String, source: libloading::Error },
    #[error("{ASCENDCL_NAME} (or {ACL_RT_NAME}) not found (tried: {tried})")]
    NotFound { tried: String },
    #[error("symbol {symbol} not found in {libraries}")]
    MissingSymbol { symbol: &'static str, libraries: String },
}

/// Looks `name` up in each library in turn; the first hit wins.
///
/// # Safety
/// `T` must be the function-pointer type of the C symbol `name` (the table in `acl_functions!` pairs each
/// name with its `accutrace_acl.h` signature), and the returned pointer is only valid while `libs` stay open.
unsafe fn lookup<T: Copy>(libs: &[Library], name: &str) -> Option<T> {
    libs.iter().find_map(|lib| {
        // SAFETY: per this function's contract, T is the symbol's true type.
        unsafe { lib.get::<T>(name) }.ok().map(|sym| *sym)
    })
}

macro_rules! acl_functions {
    ($($field:ident : $ty:ty = $sym:literal),* $(,)?) => {
        /// Every ACL entry point accutrace touches, resolved or `None`.
        #[derive(Clone, Copy, Default, Debug)]
        pub struct AclFunctions {
            $(#[doc = concat!("`", $sym, "`")] pub $field: Option<$ty>,)*
        }

        impl AclFunctions {
            /// Resolves every entry point from `libs`.
            ///
            /// # Safety
            /// The pointers are valid only while `libs` stay loaded (AclLibrary owns them for that reason).
            unsafe fn resolve(libs: &[Library]) -> Self {
                // SAFETY: each field's type is the header's signature for the symbol named beside it.
                unsafe { AclFunctions { $($field: lookup::<$ty>(libs, $sym),)* } }
            }

            /// C names of the entry points that were not found.
            pub fn missing(&self) -> Vec<&'static str> {
                let mut missing = Vec::new();
                $(if self.$field.is_none() { missing.push($sym); })*
                missing
            }
        }

        impl AclLibrary {
            $(
                #[doc = concat!("`", $sym, "`, or [`LoadError::MissingSymbol`] naming it.")]
                pub fn $field(&self) -> Result<$ty, LoadError> {
                    self.fns.$field.ok_or_else(|| self.missing_symbol($sym))
                }
            )*
        }
    };
}

acl_functions! {
    acl_init: AclInitFn = "aclInit",
    acl_finalize: AclFinalizeFn = "aclFinalize",
    aclrt_set_device: AclrtSetDeviceFn = "aclrtSetDevice",
    aclrt_reset_device: AclrtResetDeviceFn = "aclrtResetDevice",
    aclrt_synchronize_device: AclrtSynchronizeDeviceFn = "aclrtSynchronizeDevice",
    aclrt_set_device_sat_mode: AclrtSetDeviceSatModeFn = "aclrtSetDeviceSatMode",
    aclrt_get_device_sat_mode: AclrtGetDeviceSatModeFn = "aclrtGetDeviceSatMode",
    aclrt_ctx_set_sys_param_opt: AclrtCtxSetSysParamOptFn = "aclrtCtxSetSysParamOpt",
    aclrt_ctx_get_sys_param_opt: AclrtCtxGetSysParamOptFn = "aclrtCtxGetSysParamOpt",
    aclrt_get_overflow_status: AclrtGetOverflowStatusFn = "aclrtGetOverflowStatus",
    aclrt_reset_overflow_status: AclrtResetOverflowStatusFn = "aclrtResetOverflowStatus",
    aclrt_malloc: AclrtMallocFn = "aclrtMalloc",
    aclrt_free: AclrtFreeFn = "aclrtFree",
    aclrt_memcpy: AclrtMemcpyFn = "aclrtMemcpy",
    aclrt_synchronize_stream: AclrtSynchronizeStreamFn = "aclrtSynchronizeStream",
    aclmdl_create_dataset: AclmdlCreateDatasetFn = "aclmdlCreateDataset",
    aclmdl_destroy_dataset: AclmdlDestroyDatasetFn = "aclmdlDestroyDataset",
    aclmdl_add_dataset_buffer: AclmdlAddDatasetBufferFn = "aclmdlAddDatasetBuffer",
    aclmdl_get_dataset_num_buffers: AclmdlGetDatasetNumBuffersFn = "aclmdlGetDatasetNumBuffers",
    aclmdl_get_dataset_buffer: AclmdlGetDatasetBufferFn = "aclmdlGetDatasetBuffer",
    acl_create_data_buffer: AclCreateDataBufferFn = "aclCreateDataBuffer",
    acl_destroy_data_buffer: AclDestroyDataBufferFn = "aclDestroyDataBuffer",
    acl_get_data_buffer_addr: AclGetDataBufferAddrFn = "aclGetDataBufferAddr",
    acl_get_data_buffer_size_v2: AclGetDataBufferSizeV2Fn = "aclGetDataBufferSizeV2",
    aclmdl_load_from_file: AclmdlLoadFromFileFn = "aclmdlLoadFromFile",
    aclmdl_execute: AclmdlExecuteFn = "aclmdlExecute",
    aclmdl_unload: AclmdlUnloadFn = "aclmdlUnload",
    aclmdl_init_dump: AclmdlInitDumpFn = "aclmdlInitDump",
    aclmdl_set_dump: AclmdlSetDumpFn = "aclmdlSetDump",
    aclmdl_finalize_dump: AclmdlFinalizeDumpFn = "aclmdlFinalizeDump",
    acldump_reg_callback: AcldumpRegCallbackFn = "acldumpRegCallback",
    acldump_unreg_callback: AcldumpUnregCallbackFn = "acldumpUnregCallback",
}

/// An opened (or attached) CANN runtime and its resolved entry points.
///
/// Holding this keeps the libraries loaded, which is what keeps the function pointers in [`AclFunctions`]
/// valid: copy them out only for as long as the `AclLibrary` lives.
pub struct AclLibrary {
    /// The resolved entry points (also available through the accessor methods, which name what is missing).
    pub fns: AclFunctions,
    /// What was opened, for messages: the names or paths passed to dlopen.
    opened: Vec<String>,
    libs: Vec<Library>,
}

impl std::fmt::Debug for AclLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AclLibrary").field("opened", &self.opened).field("fns", &self.fns).finish()
    }
}

impl AclLibrary {
    /// Attaches to the `libascendcl.so` / `libacl_rt.so` / `libascend_dump.so` the process already loaded
    /// (the framework's copies), without loading anything new: `dlopen(name, RTLD_LAZY | RTLD_NOLOAD)`.
    pub fn attach_loaded() -> Result<AclLibrary, LoadError> {
        let mut libs = Vec::new();
        let mut opened = Vec::new();
        for name in RUNTIME_NAMES {
            // SAFETY: RTLD_NOLOAD never maps a new object, so no initialisers run; it only takes a
            // reference on an object that is already loaded (matched by path or SONAME).
            if let Ok(lib) = unsafe { Library::open(Some(name), libc::RTLD_LAZY | libc::RTLD_NOLOAD) } {
                libs.push(lib);
                opened.push(name.to_string());
            }
        }
        if libs.is_empty() {
            return Err(LoadError::NotLoaded);
        }
        Ok(Self::from_libs(libs, opened))
    }

    /// Loads the runtime from the first of: `$ASCEND_TOOLKIT_HOME/lib64`,
    /// `/usr/local/Ascend/ascend-toolkit/latest/lib64`, `/usr/local/Ascend/cann/lib64`, then the plain name
    /// (the dynamic linker's search path); in each place `libascendcl.so`, else `libacl_rt.so`.
    /// `libacl_rt.so` and `libascend_dump.so` are loaded beside it when present.
    pub fn find_and_load() -> Result<AclLibrary, LoadError> {
        let mut tried = Vec::new();
        for dir in search_dirs() {
            for name in [ASCENDCL_NAME, ACL_RT_NAME] {
                let path = dir.join(name);
                if path.is_file() {
                    return Self::from_path(&path);
                }
                tried.push(path.display().to_string());
            }
        }
        let mut libs = Vec::new();
        let mut opened = Vec::new();
        for name in RUNTIME_NAMES {
            if let Ok(lib) = Self::open_one(name) {
                libs.push(lib);
                opened.push(name.to_string());
            }
        }
        // libascend_dump.so alone is no runtime: aclInit and the dump configuration live elsewhere.
        if opened.iter().all(|n| n == ASCEND_DUMP_NAME) {
            tried.extend([ASCENDCL_NAME.to_string(), ACL_RT_NAME.to_string()]);
            return Err(LoadError::NotFound { tried: tried.join(", ") });
        }
        Ok(Self::from_libs(libs, opened))
    }

    /// Loads the runtime from an explicit path, and `libacl_rt.so` and `libascend_dump.so` from the same
    /// directory when there (the path may name either of them, or `libascendcl.so`).
    pub fn from_path(path: impl AsRef<Path>) -> Result<AclLibrary, LoadError> {
        let path = path.as_ref();
        let lib = Self::open_one(path)?;
        let mut libs = vec![lib];
        let mut opened = vec![path.display().to_string()];
        for sibling in [ACL_RT_NAME, ASCEND_DUMP_NAME] {
            if path.file_name().is_some_and(|f| f == sibling) {
                continue;
            }
            if let Some(sibling_path) = path.parent().map(|d| d.join(sibling)).filter(|p| p.is_file()) {
                if let Ok(lib) = Self::open_one(&sibling_path) {
                    libs.push(lib);
                    opened.push(sibling_path.display().to_string());
                }
            }
        }
        Ok(Self::from_libs(libs, opened))
    }

    /// The names or paths that were opened, runtime first.
    pub fn opened(&self) -> &[String] {
        &self.opened
    }

    /// Where the resolved `aclInit` (or, failing that, `acldumpRegCallback`) really lives, via dladdr.
    pub fn runtime_path(&self) -> Option<PathBuf> {
        let addr = match (self.fns.acl_init, self.fns.acldump_reg_callback) {
            (Some(f), _) => f as *const c_void,
            (None, Some(f)) => f as *const c_void,
            (None, None) => return None,
        };
        library_path_of(addr)
    }

    fn open_one(name: impl AsRef<std::ffi::OsStr>) -> Result<Library, LoadError> {
        let name = name.as_ref();
        // SAFETY: loading CANN runs its initialisers; that is the documented way to use it, and they
        // impose no requirements on us beyond being called from an ordinary thread.
        unsafe { Library::open(Some(name), libc::RTLD_LAZY) }
            .map_err(|source| LoadError::Open { path: name.to_string_lossy().into_owned(), source })
    }

    fn from_libs(libs: Vec<Library>, opened: Vec<String>) -> AclLibrary {
        // SAFETY: `libs` moves into the returned value next to the pointers, so they stay loaded while
        // the pointers are reachable through it.
        let fns = unsafe { AclFunctions::resolve(&libs) };
        AclLibrary { fns, opened, libs }
    }

    fn missing_symbol(&self, symbol: &'static str) -> LoadError {
        debug_assert!(!self.libs.is_empty());
        LoadError::MissingSymbol { symbol, libraries: self.opened.join(", ") }
    }
}

/// The toolkit directories searched by [`AclLibrary::find_and_load`], in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(home) = std::env::var_os("ASCEND_TOOLKIT_HOME").filter(|h| !h.is_empty()) {
        dirs.push(PathBuf::from(home).join("lib64"));
    }
    dirs.push(PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest/lib64"));
    dirs.push(PathBuf::from("/usr/local/Ascend/cann/lib64"));
    dirs
}

/// The file of the loaded object that contains `addr` (dladdr), e.g. to find the real `libascendcl.so`
/// behind a symbol that an `LD_PRELOAD`ed library interposes.
// dladdr compares `addr` against the loader's address ranges and never dereferences it, so any value
// (dangling, null) is fine and the function is safe to call.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn library_path_of(addr: *const c_void) -> Option<PathBuf> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: Dl_info is plain data (pointers and nothing else); all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for `addr` (any value is allowed) and writes `info`.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: on success dli_fname points at the loader's NUL-terminated copy of the object's name, which
    // lives as long as the object; we copy it out at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let bytes = name.to_bytes();
    if bytes.is_empty() {
        return None;
    }
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}
