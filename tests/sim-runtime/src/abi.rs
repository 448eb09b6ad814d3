//! The exported ACL entry points (signatures checked against `ascend_sys::fns` in the tests).
//!
//! Every export runs its body under `catch_unwind`: a panic must never unwind into C (that is undefined
//! behaviour) and must not take the training process down; it becomes `ACL_ERROR_INTERNAL_ERROR`.

use crate::config::{parse_dump_json, ConfigError, DumpConfig};
use crate::dumper;
use crate::state::{self, LoadedModel};
use crate::{clock, execute, memory, model, overflow, sysparam};
use ascend_sys::*;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub(crate) fn guard(name: &str, body: impl FnOnce() -> aclError) -> aclError {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        eprintln!("sim-ascendcl: {name} panicked; returning ACL_ERROR_INTERNAL_ERROR");
        ACL_ERROR_INTERNAL_ERROR
    })
}

/// A C path argument, or `None` when null.
///
/// # Safety
/// `p` is null or points at a NUL-terminated string that stays valid for the call (the ACL contract).
unsafe fn c_path(p: *const c_char) -> Option<PathBuf> {
    if p.is_null() {
        return None;
    }
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: non-null and NUL-terminated per this function's contract.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

/// Reads and parses a dump configuration file; the error is the ACL code to return.
fn read_dump_config(path: &std::path::Path) -> Result<Option<DumpConfig>, aclError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        eprintln!("sim-ascendcl: cannot read {}: {e}", path.display());
        ACL_ERROR_INVALID_FILE
    })?;
    let cfg = parse_dump_json(&text).map_err(|e| {
        eprintln!("sim-ascendcl: {}: {e:?}", path.display());
        match e {
            ConfigError::Parse(_) => ACL_ERROR_PARSE_FILE,
            ConfigError::Invalid(_) => ACL_ERROR_INVALID_DUMP_CONFIG,
        }
    })?;
    if cfg.is_none() && text.contains("\"dump\"") {
        // CANN's log line when NeedDump turns a valid configuration down.
        eprintln!("sim-ascendcl: {}: No dump config need to be set", path.display());
    }
    Ok(cfg)
}

/// # Safety
/// `config_path` is NULL or a NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn aclInit(config_path: *const c_char) -> aclError {
    guard("aclInit", || {
        if state::with(|rt| rt.initialized) {
            return ACL_ERROR_REPEAT_INITIALIZE;
        }
        // SAFETY: the caller passes NULL or a NUL-terminated path (aclInit's contract).
        let dump = match unsafe { c_path(config_path) } {
            None => None,
            Some(path) => match read_dump_config(&path) {
                Ok(cfg) => cfg,
                Err(code) => return code,
            },
        };
        clock::reset();
        overflow::reset_device();
        sysparam::reset();
        state::with(|rt| {
            *rt = state::Runtime {
                initialized: true,
                dump,
                session_dir: clock::date_dir_name(clock::now_us()),
                next_model_id: 1,
                ..Default::default()
            };
        });
        match other_tool_registers() {
            // Another tool in the process (MindSpore's or msprobe's dump) registers its callback first:
            // every later registration is ignored, as the runtime does.
            Some(OtherTool::First) => register_other_tool_callback(),
            // The same, where no interposer sees it (a tool that bound the runtime's function before a
            // collector was loaded): the only sign left is that nothing arrives.
            Some(OtherTool::Unseen) => state::set_callback_if_none(other_tool_callback),
            Some(OtherTool::After | OtherTool::AfterThenUnregister) | None => {}
        }
        ACL_SUCCESS
    })
}

/// When `SIM_ACL_OTHER_DUMP_CALLBACK` has another tool register its dump callback.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OtherTool {
    /// In aclInit, before a collector's registration (which follows the real aclInit).
    First,
    /// In aclInit, straight into the runtime's state: no exported symbol is called.
    Unseen,
    /// At aclrtSetDevice, after a collector registered in aclInit: the runtime ignores it.
    After,
    /// As `After`, then at once `acldumpUnregCallback` (the tool turns its dump off): that removes the
    /// collector's callback, the one registered.
    AfterThenUnregister,
}

/// `SIM_ACL_OTHER_DUMP_CALLBACK`: `1`, `unseen`, `after` or `after-unregister`, each for every process
/// or, followed by `:rank:N` (`rank:N` alone for `1`), for the process whose RANK_ID is N.
fn other_tool_registers() -> Option<OtherTool> {
    let value = std::env::var("SIM_ACL_OTHER_DUMP_CALLBACK").ok()?;
    let (when, rank) = match value.split_once("rank:") {
        Some((when, rank)) => (when.trim_end_matches(':'), Some(rank.trim().to_string())),
        None => (value.as_str(), None),
    };
    if let Some(rank) = rank {
        if !std::env::var("RANK_ID").is_ok_and(|r| r.trim() == rank) {
            return None;
        }
    }
    match when {
        "1" | "" => Some(OtherTool::First),
        "unseen" => Some(OtherTool::Unseen),
        "after" => Some(OtherTool::After),
        "after-unregister" => Some(OtherTool::AfterThenUnregister),
        _ => None,
    }
}

/// An ACL function the way a tool linked against the runtime finds it: the definition the global scope
/// finds (an `LD_PRELOAD`ed interposer's, if any), else, when this library was loaded without RTLD_GLOBAL,
/// through a handle of it (a `dlsym` interposer sees that). Null when neither has it.
fn other_tool_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: NUL-terminated names; dladdr only reads the loader's tables into a zeroed Dl_info.
    let found = unsafe {
        let global = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        if !global.is_null() {
            global
        } else {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let handle = if libc::dladdr(other_tool_callback as *const c_void, &mut info) != 0 {
                libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD)
            } else {
                std::ptr::null_mut()
            };
            if handle.is_null() {
                std::ptr::null_mut()
            } else {
                libc::dlsym(handle, name.as_ptr())
            }
        }
    };
    if found.is_null() {
        eprintln!("sim-ascendcl: SIM_ACL_OTHER_DUMP_CALLBACK: {} cannot be found", name.to_string_lossy());
    }
    found
}

/// Registers the other tool's callback through the exported `acldumpRegCallback` ([`other_tool_symbol`]).
fn register_other_tool_callback() {
    let found = other_tool_symbol(c"acldumpRegCallback");
    if found.is_null() {
        return;
    }
    // SAFETY: the symbol acldumpRegCallback (ours or an interposer's) has the AcldumpRegCallbackFn signature.
    let reg = unsafe { std::mem::transmute::<*mut c_void, AcldumpRegCallbackFn>(found) };
    // SAFETY: a callback of the acldumpCallback signature and flag 0.
    let code = unsafe { reg(Some(other_tool_callback), 0) };
    if code != ACL_SUCCESS {
        eprintln!("sim-ascendcl: SIM_ACL_OTHER_DUMP_CALLBACK: acldumpRegCallback returned {code}");
    }
}

/// The other tool turns its dump off through the exported `acldumpUnregCallback`: the runtime removes
/// whichever callback is registered.
fn unregister_other_tool_callback() {
    let found = other_tool_symbol(c"acldumpUnregCallback");
    if !found.is_null() {
        // SAFETY: the symbol acldumpUnregCallback has the AcldumpUnregCallbackFn signature.
        unsafe { std::mem::transmute::<*mut c_void, AcldumpUnregCallbackFn>(found)() };
    }
}

/// The callback of the other tool that `SIM_ACL_OTHER_DUMP_CALLBACK=1` registers: takes every chunk, keeps
/// nothing.
unsafe extern "C" fn other_tool_callback(_chunk: *const acldumpChunk, _len: i32) -> i32 {
    0
}

#[no_mangle]
pub extern "C" fn aclFinalize() -> aclError {
    guard("aclFinalize", || {
        if !state::with(|rt| rt.initialized) {
            return ACL_ERROR_REPEAT_FINALIZE;
        }
        crate::stream::synchronize();
        dumper::shutdown();
        state::set_callback(None);
        state::with(|rt| *rt = state::Runtime::default());
        crate::emit::reset_single_op();
        crate::single_op::reset_counters();
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclrtSetDevice(device_id: i32) -> aclError {
    guard("aclrtSetDevice", || {
        let code = state::with(|rt| {
            if !rt.initialized {
                ACL_ERROR_UNINITIALIZE
            } else if device_id < 0 {
                ACL_ERROR_INVALID_PARAM
            } else {
                rt.device = Some(device_id);
                ACL_SUCCESS
            }
        });
        // Outside the state lock: the registration takes it again.
        match other_tool_registers() {
            Some(OtherTool::After) if code == ACL_SUCCESS => register_other_tool_callback(),
            Some(OtherTool::AfterThenUnregister) if code == ACL_SUCCESS => {
                register_other_tool_callback();
                unregister_other_tool_callback();
            }
            _ => {}
        }
        code
    })
}

#[no_mangle]
pub extern "C" fn aclrtResetDevice(device_id: i32) -> aclError {
    guard("aclrtResetDevice", || {
        if device_id < 0 {
            return ACL_ERROR_INVALID_PARAM;
        }
        crate::stream::synchronize();
        dumper::drain();
        state::with(|rt| {
            if rt.device == Some(device_id) {
                rt.device = None;
            }
        });
        overflow::reset_device();
        sysparam::reset();
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclrtSynchronizeDevice() -> aclError {
    guard("aclrtSynchronizeDevice", || {
        if crate::stream::device_sync_fails() {
            return ACL_ERROR_FAILURE;
        }
        crate::stream::synchronize();
        dumper::drain();
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclrtSetDeviceSatMode(mode: aclrtFloatOverflowMode) -> aclError {
    guard("aclrtSetDeviceSatMode", || match mode {
        ACL_RT_OVERFLOW_MODE_SATURATION | ACL_RT_OVERFLOW_MODE_INFNAN => {
            overflow::set_mode(mode);
            ACL_SUCCESS
        }
        _ => ACL_ERROR_INVALID_PARAM,
    })
}

/// # Safety
/// `mode` is NULL or points at 4 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn aclrtGetDeviceSatMode(mode: *mut aclrtFloatOverflowMode) -> aclError {
    guard("aclrtGetDeviceSatMode", || {
        if mode.is_null() {
            return ACL_ERROR_INVALID_PARAM;
        }
        // SAFETY: non-null, and the caller passes a writable aclrtFloatOverflowMode (the API's contract);
        // write_unaligned tolerates a caller buffer of bytes.
        unsafe { mode.write_unaligned(overflow::mode()) };
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclrtCtxSetSysParamOpt(opt: aclSysParamOpt, value: i64) -> aclError {
    guard("aclrtCtxSetSysParamOpt", || sysparam::set(opt, value))
}

/// # Safety
/// `value` is NULL or points at 8 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn aclrtCtxGetSysParamOpt(opt: aclSysParamOpt, value: *mut i64) -> aclError {
    guard("aclrtCtxGetSysParamOpt", || {
        if value.is_null() {
            return ACL_ERROR_INVALID_PARAM;
        }
        match sysparam::get(opt) {
            // SAFETY: non-null, and the caller passes a writable int64_t (the API's contract).
            Ok(v) => unsafe { value.write_unaligned(v) },
            Err(code) => return code,
        }
        ACL_SUCCESS
    })
}

/// # Safety
/// `output` is NULL or points at `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn aclrtGetOverflowStatus(
    output: *mut c_void,
    size: usize,
    _stream: aclrtStream,
) -> aclError {
    guard("aclrtGetOverflowStatus", || {
        if output.is_null() || size < 8 {
            return ACL_ERROR_INVALID_PARAM;
        }
        // The documented buffer is 64 bytes; we fill what we know (u64 status, LE) and zero the rest.
        let mut record = [0u8; ACL_OVERFLOW_STATUS_SIZE];
        record[..8].copy_from_slice(&overflow::status().to_le_bytes());
        let n = size.min(record.len());
        // SAFETY: `output` is non-null and the caller guarantees `size` writable bytes; n <= size. The
        // simulator has no device memory, so the "device buffer" is the caller's host memory.
        unsafe { std::ptr::copy_nonoverlapping(record.as_ptr(), output.cast::<u8>(), n) };
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclrtResetOverflowStatus(_stream: aclrtStream) -> aclError {
    guard("aclrtResetOverflowStatus", || {
        overflow::reset_status();
        ACL_SUCCESS
    })
}

/// # Safety
/// `dev_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn aclrtMalloc(
    dev_ptr: *mut *mut c_void,
    size: usize,
    _policy: aclrtMemMallocPolicy,
) -> aclError {
    guard("aclrtMalloc", || {
        if dev_ptr.is_null() || size == 0 {
            return ACL_ERROR_INVALID_PARAM;
        }
        let Some(p) = memory::malloc(size) else { return ACL_ERROR_BAD_ALLOC };
        // SAFETY: non-null and writable per the contract.
        unsafe { dev_ptr.write_unaligned(p) };
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> aclError {
    guard("aclrtFree", || if memory::free(dev_ptr) { ACL_SUCCESS } else { ACL_ERROR_INVALID_PARAM })
}

/// # Safety
/// `dst` is writable for `dest_max` bytes and `src` readable for `count` bytes; they do not overlap.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> aclError {
    guard("aclrtMemcpy", || {
        let known_kind = matches!(
            kind,
            ACL_MEMCPY_HOST_TO_HOST
                | ACL_MEMCPY_HOST_TO_DEVICE
                | ACL_MEMCPY_DEVICE_TO_HOST
                | ACL_MEMCPY_DEVICE_TO_DEVICE
        );
        if !known_kind || count > dest_max || (count > 0 && (dst.is_null() || src.is_null())) {
            return ACL_ERROR_INVALID_PARAM;
        }
        // The simulated device's memory is host memory: every kind is the same copy. The synchronous copy
        // also orders it after everything queued before it, as aclrtMemcpy does.
        if count > 0 {
            // SAFETY: per the contract, `src` is readable and `dst` writable for `count` bytes (<= dest_max)
            // and the ranges do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst.cast::<u8>(), count) };
        }
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclrtSynchronizeStream(_stream: aclrtStream) -> aclError {
    guard("aclrtSynchronizeStream", || {
        // The launches queued on the stream (asynchronous mode), then the dump thread's delivery.
        crate::stream::synchronize();
        dumper::drain();
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclmdlCreateDataset() -> *mut aclmdlDataset {
    catch_unwind(memory::create_dataset).unwrap_or(std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn aclmdlDestroyDataset(dataset: *const aclmdlDataset) -> aclError {
    guard("aclmdlDestroyDataset", || {
        if memory::destroy_dataset(dataset) {
            ACL_SUCCESS
        } else {
            ACL_ERROR_INVALID_PARAM
        }
    })
}

#[no_mangle]
pub extern "C" fn aclmdlAddDatasetBuffer(
    dataset: *mut aclmdlDataset,
    buffer: *mut aclDataBuffer,
) -> aclError {
    guard("aclmdlAddDatasetBuffer", || {
        if memory::add_to_dataset(dataset, buffer) {
            ACL_SUCCESS
        } else {
            ACL_ERROR_INVALID_PARAM
        }
    })
}

#[no_mangle]
pub extern "C" fn aclmdlGetDatasetNumBuffers(dataset: *const aclmdlDataset) -> usize {
    catch_unwind(|| memory::dataset_buffers(dataset).map_or(0, |b| b.len())).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn aclmdlGetDatasetBuffer(dataset: *const aclmdlDataset, index: usize) -> *mut aclDataBuffer {
    catch_unwind(|| {
        memory::dataset_buffers(dataset)
            .and_then(|b| b.get(index).copied())
            .map_or(std::ptr::null_mut(), std::ptr::with_exposed_provenance_mut)
    })
    .unwrap_or(std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn aclCreateDataBuffer(data: *mut c_void, size: usize) -> *mut aclDataBuffer {
    catch_unwind(|| memory::create_buffer(data, size)).unwrap_or(std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn aclDestroyDataBuffer(buffer: *const aclDataBuffer) -> aclError {
    guard("aclDestroyDataBuffer", || {
        if memory::destroy_buffer(buffer) {
            ACL_SUCCESS
        } else {
            ACL_ERROR_INVALID_PARAM
        }
    })
}

#[no_mangle]
pub extern "C" fn aclGetDataBufferAddr(buffer: *const aclDataBuffer) -> *mut c_void {
    catch_unwind(|| {
        memory::buffer(buffer).map_or(std::ptr::null_mut(), |(a, _)| std::ptr::with_exposed_provenance_mut(a))
    })
    .unwrap_or(std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn aclGetDataBufferSizeV2(buffer: *const aclDataBuffer) -> usize {
    catch_unwind(|| memory::buffer(buffer).map_or(0, |(_, n)| n)).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn aclmdlInitDump() -> aclError {
    guard("aclmdlInitDump", || {
        state::with(|rt| {
            if !rt.initialized {
                return ACL_ERROR_UNINITIALIZE;
            }
            // As the open-source runtime (src/acl/aclrt_impl/toolchain/dump.cpp): a second call before
            // aclmdlFinalizeDump is refused with ACL_ERROR_REPEAT_INITIALIZE, and dumping stays as it was.
            if rt.dump_initialized {
                return ACL_ERROR_REPEAT_INITIALIZE;
            }
            rt.dump_initialized = true;
            ACL_SUCCESS
        })
    })
}

/// # Safety
/// `dump_cfg_path` is NULL or a NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn aclmdlSetDump(dump_cfg_path: *const c_char) -> aclError {
    guard("aclmdlSetDump", || {
        let (initialized, dump_initialized) = state::with(|rt| (rt.initialized, rt.dump_initialized));
        if !initialized {
            return ACL_ERROR_UNINITIALIZE;
        }
        if !dump_initialized {
            return ACL_ERROR_DUMP_NOT_RUN;
        }
        // SAFETY: the caller passes a NUL-terminated path (aclmdlSetDump's contract) or NULL.
        let Some(path) = (unsafe { c_path(dump_cfg_path) }) else { return ACL_ERROR_INVALID_PARAM };
        let cfg = match read_dump_config(&path) {
            Ok(Some(cfg)) => cfg,
            // Valid, and nothing to set (NeedDump): success, and the dump stays as it was.
            Ok(None) => return ACL_SUCCESS,
            Err(code) => return code,
        };
        state::with(|rt| {
            rt.dump = Some(cfg);
            rt.session_dir = clock::date_dir_name(clock::now_us());
        });
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn aclmdlFinalizeDump() -> aclError {
    guard("aclmdlFinalizeDump", || {
        if !state::with(|rt| rt.dump_initialized) {
            return ACL_ERROR_DUMP_NOT_RUN;
        }
        // As adump's server stops: the dumps of launches the device has not run are lost, silently (a caller
        // synchronizes first to keep them); what was handed over is delivered.
        crate::stream::drop_pending_dumps();
        dumper::drain();
        let models: Vec<_> = state::with(|rt| {
            rt.dump_initialized = false;
            rt.dump = None;
            rt.models.values().cloned().collect()
        });
        // Dumping stops for every model, including those loaded while it was on.
        for m in models {
            state::lock(&m).dump = None;
        }
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn acldumpRegCallback(cb: Option<AcldumpCallbackFn>, flag: i32) -> aclError {
    guard("acldumpRegCallback", || {
        // As adump's acldumpRegCallback (src/dfx/adump/adump/host/adx_datadump_callback.cpp): a null callback
        // or a flag other than 0 is ACL_ERROR_FAILURE; while a callback is registered another registration
        // is ignored (the first keeps receiving) and still reports success.
        if flag != 0 || cb.is_none() {
            return ACL_ERROR_FAILURE;
        }
        if let Some(cb) = cb {
            state::set_callback_if_none(cb);
        }
        ACL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn acldumpUnregCallback() {
    guard("acldumpUnregCallback", || {
        // Deliver what is queued for the old callback before it goes: after this returns, it is never called
        // (launches the device has not run yet would call it later: their dumps are dropped).
        crate::stream::drop_pending_dumps();
        dumper::drain();
        state::set_callback(None);
        ACL_SUCCESS
    });
}

/// # Safety
/// `model_path` is NULL or a NUL-terminated string; `model_id` is NULL or points at 4 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn aclmdlLoadFromFile(model_path: *const c_char, model_id: *mut u32) -> aclError {
    guard("aclmdlLoadFromFile", || {
        if !state::with(|rt| rt.initialized) {
            return ACL_ERROR_UNINITIALIZE;
        }
        if model_id.is_null() {
            return ACL_ERROR_INVALID_PARAM;
        }
        // SAFETY: the caller passes a NUL-terminated path or NULL (aclmdlLoadFromFile's contract).
        let Some(path) = (unsafe { c_path(model_path) }) else { return ACL_ERROR_INVALID_PARAM };
        let loaded = match model::load(&path) {
            Ok(m) => m,
            Err(model::LoadError::Read(e)) => {
                eprintln!("sim-ascendcl: {e}");
                return ACL_ERROR_READ_MODEL_FAILURE;
            }
            Err(model::LoadError::Parse(e)) => {
                eprintln!("sim-ascendcl: {}: {e}", path.display());
                return ACL_ERROR_PARSE_MODEL;
            }
        };
        let id = register_model(loaded);
        // SAFETY: non-null, and the caller passes a writable uint32_t.
        unsafe { model_id.write_unaligned(id) };
        ACL_SUCCESS
    })
}

/// Adds a model to the table with the current dump configuration; returns its id.
pub(crate) fn register_model(model: Box<dyn model::DeviceModel>) -> u32 {
    state::with(|rt| {
        let id = rt.next_model_id.max(1);
        rt.next_model_id = id + 1;
        let loaded = LoadedModel {
            id,
            model,
            dump: rt.dump.clone(),
            session_dir: rt.session_dir.clone(),
            next_step: 0,
            pending: None,
        };
        rt.models.insert(id, Arc::new(Mutex::new(loaded)));
        id
    })
}

#[no_mangle]
pub extern "C" fn aclmdlExecute(
    model_id: u32,
    input: *const aclmdlDataset,
    output: *mut aclmdlDataset,
) -> aclError {
    guard("aclmdlExecute", || {
        let Some((model, device_id)) =
            state::with(|rt| rt.models.get(&model_id).map(|m| (Arc::clone(m), rt.device.unwrap_or(0))))
        else {
            return ACL_ERROR_INVALID_MODEL_ID;
        };
        let slices = memory::dataset_slices(input).and_then(|i| Ok((i, memory::dataset_slices(output)?)));
        // The global lock is released: only this model's lock is held while the step runs.
        let result = slices.and_then(|(i, o)| execute::run(&mut state::lock(&model), device_id, &i, &o));
        match result {
            Ok(()) => ACL_SUCCESS,
            Err(e) => {
                eprintln!("sim-ascendcl: aclmdlExecute(model {model_id}): {e}");
                ACL_ERROR_INVALID_PARAM
            }
        }
    })
}

/// The newest step report (sim-model's documented channel: the framework reads the loss through
/// `simAclLastStepReport`, or from the file named by `SIM_ACL_REPORT`).
static LAST_STEP_REPORT: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

pub(crate) fn publish_step_report(line: String) {
    if let Some(path) = std::env::var_os("SIM_ACL_REPORT") {
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            eprintln!(
                "sim-acl: cannot append the step report to {}: {e}",
                std::path::Path::new(&path).display()
            );
        }
    }
    *LAST_STEP_REPORT.lock().unwrap_or_else(|p| p.into_inner()) = Some(line);
}

/// Copies the newest step report, NUL-terminated, into `buf` (truncated to `len - 1` bytes) and returns
/// its full length; 0 before the first step or when `buf` is NULL.
///
/// # Safety
/// `buf` must be NULL or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn simAclLastStepReport(buf: *mut std::ffi::c_char, len: usize) -> usize {
    catch_unwind(AssertUnwindSafe(|| {
        let guard = LAST_STEP_REPORT.lock().unwrap_or_else(|p| p.into_inner());
        let Some(line) = guard.as_deref() else { return 0 };
        if buf.is_null() || len == 0 {
            return 0;
        }
        let n = line.len().min(len - 1);
        // SAFETY: the caller guarantees `buf` has `len` writable bytes; we write n + 1 <= len of them, from
        // a source that cannot overlap it (our own String).
        unsafe {
            std::ptr::copy_nonoverlapping(line.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        line.len()
    }))
    .unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn aclmdlUnload(model_id: u32) -> aclError {
    guard("aclmdlUnload", || match state::with(|rt| rt.models.remove(&model_id)) {
        Some(_) => ACL_SUCCESS,
        None => ACL_ERROR_INVALID_MODEL_ID,
    })
}

/// Compile-time check that every export has the exact signature of `accutrace_acl.h`.
#[allow(dead_code)]
const SIGNATURES: () = {
    let _: AclInitFn = aclInit;
    let _: AclFinalizeFn = aclFinalize;
    let _: AclrtSetDeviceFn = aclrtSetDevice;
    let _: AclrtResetDeviceFn = aclrtResetDevice;
    let _: AclrtSynchronizeDeviceFn = aclrtSynchronizeDevice;
    let _: AclrtSetDeviceSatModeFn = aclrtSetDeviceSatMode;
    let _: AclrtGetDeviceSatModeFn = aclrtGetDeviceSatMode;
    let _: AclrtCtxSetSysParamOptFn = aclrtCtxSetSysParamOpt;
    let _: AclrtCtxGetSysParamOptFn = aclrtCtxGetSysParamOpt;
    let _: AclrtGetOverflowStatusFn = aclrtGetOverflowStatus;
    let _: AclrtResetOverflowStatusFn = aclrtResetOverflowStatus;
    let _: AclrtMallocFn = aclrtMalloc;
    let _: AclrtFreeFn = aclrtFree;
    let _: AclrtMemcpyFn = aclrtMemcpy;
    let _: AclrtSynchronizeStreamFn = aclrtSynchronizeStream;
    let _: AclmdlCreateDatasetFn = aclmdlCreateDataset;
    let _: AclmdlDestroyDatasetFn = aclmdlDestroyDataset;
    let _: AclmdlAddDatasetBufferFn = aclmdlAddDatasetBuffer;
    let _: AclmdlGetDatasetNumBuffersFn = aclmdlGetDatasetNumBuffers;
    let _: AclmdlGetDatasetBufferFn = aclmdlGetDatasetBuffer;
    let _: AclCreateDataBufferFn = aclCreateDataBuffer;
    let _: AclDestroyDataBufferFn = aclDestroyDataBuffer;
    let _: AclGetDataBufferAddrFn = aclGetDataBufferAddr;
    let _: AclGetDataBufferSizeV2Fn = aclGetDataBufferSizeV2;
    let _: AclmdlLoadFromFileFn = aclmdlLoadFromFile;
    let _: AclmdlExecuteFn = aclmdlExecute;
    let _: AclmdlUnloadFn = aclmdlUnload;
    let _: AclmdlInitDumpFn = aclmdlInitDump;
    let _: AclmdlSetDumpFn = aclmdlSetDump;
    let _: AclmdlFinalizeDumpFn = aclmdlFinalizeDump;
    let _: AcldumpRegCallbackFn = acldumpRegCallback;
    let _: AcldumpUnregCallbackFn = acldumpUnregCallback;
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_body_becomes_an_internal_error() {
        assert_eq!(guard("test", || panic!("boom")), ACL_ERROR_INTERNAL_ERROR);
        assert_eq!(guard("test", || ACL_SUCCESS), ACL_SUCCESS);
    }
}
