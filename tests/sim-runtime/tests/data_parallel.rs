//! Device memory, datasets and the two-halves step a data-parallel framework runs, through the C ABI.

mod common;
use ascend_sys::*;
use common::*;
use std::ffi::c_void;

// Thin wrappers over the loaded library's exports. Every call is sound for the same reason: the pointers
// come from the loaded library, which `lib()` keeps loaded, and the arguments satisfy each function's C
// contract.
fn malloc(size: usize) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    assert_eq!(unsafe { lib().aclrt_malloc().unwrap()(&mut p, size, ACL_MEM_MALLOC_HUGE_FIRST) }, 0);
    p
}
fn free(p: *mut c_void) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclrt_free().unwrap()(p) }
}
fn memcpy(dst: *mut c_void, max: usize, src: *const c_void, n: usize, kind: aclrtMemcpyKind) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclrt_memcpy().unwrap()(dst, max, src, n, kind) }
}
/// A dataset of data buffers over `(ptr, size)` pairs.
fn dataset(bufs: &[(*mut c_void, usize)]) -> *mut aclmdlDataset {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    let d = unsafe { lib().aclmdl_create_dataset().unwrap()() };
    for &(p, n) in bufs {
        // SAFETY: a resolved export of the loaded library, called per its C contract.
        let b = unsafe { lib().acl_create_data_buffer().unwrap()(p, n) };
        // SAFETY: a resolved export of the loaded library, called per its C contract.
        assert_eq!(unsafe { lib().aclmdl_add_dataset_buffer().unwrap()(d, b) }, 0);
    }
    d
}
fn destroy(d: *mut aclmdlDataset) {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    let n = unsafe { lib().aclmdl_get_dataset_num_buffers().unwrap()(d) };
    for i in 0..n {
        // SAFETY: a resolved export of the loaded library, called per its C contract.
        let b = unsafe { lib().aclmdl_get_dataset_buffer().unwrap()(d, i) };
        // SAFETY: a resolved export of the loaded library, called per its C contract.
        assert_eq!(unsafe { lib().acl_destroy_data_buffer().unwrap()(b) }, 0);
    }
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    assert_eq!(unsafe { lib().aclmdl_destroy_dataset().unwrap()(d) }, 0);
}
fn execute_with(id: u32, input: *mut aclmdlDataset, output: *mut aclmdlDataset) -> aclError {
    // SAFETY: a resolved export of the loaded library, called per its C contract.
    unsafe { lib().aclmdl_execute().unwrap()(id, input, output) }
}
fn put_f32(p: *mut c_void, v: f32) {
    assert_eq!(memcpy(p, 4, (&v as *const f32).cast(), 4, ACL_MEMCPY_HOST_TO_DEVICE), 0);
}
fn last_report() -> String {
    type ReportFn = unsafe extern "C" fn(*mut std::ffi::c_char, usize) -> usize;
    // The runtime was loaded RTLD_LOCAL by the loader: look the symbol up in its own handle.
    // SAFETY: NUL-terminated names; dlopen/dlsym have no other requirement.
    let handle = unsafe { libc::dlopen(c"libascendcl.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    // SAFETY: NUL-terminated names; dlopen/dlsym have no other requirement.
    let sym = unsafe { libc::dlsym(handle, c"simAclLastStepReport".as_ptr()) };
    let f =
        // SAFETY: the symbol is the runtime's simAclLastStepReport, whose C type is ReportFn.
        unsafe { std::mem::transmute::<*mut c_void, Option<ReportFn>>(sym) }.expect("the runtime exports it");
    let mut buf = vec![0u8; 4096];
    // SAFETY: the report function writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The gradients the compute half left in `h.grads`, as values.
fn download_grads(h: &Halves) -> Vec<f32> {
    let mut bytes = vec![0u8; h.grad_bytes];
    assert_eq!(
        memcpy(bytes.as_mut_ptr().cast(), h.grad_bytes, h.grads, h.grad_bytes, ACL_MEMCPY_DEVICE_TO_HOST),
        0
    );
    sim_model::precision::decode(sim_model::Precision::Fp16, &bytes)
}

/// The model's gradient buffers for the two halves.
struct Halves {
    grads: *mut c_void,
    flag: *mut c_void,
    divisor: *mut c_void,
    grad_bytes: usize,
}

impl Halves {
    fn new(model_json: &str) -> Halves {
        let cfg = sim_model::ModelConfig::from_json(model_json).unwrap();
        // fp16 models hand out fp16 gradients.
        assert_eq!(cfg.precision, sim_model::Precision::Fp16);
        let grad_bytes = sim_model::Trainer::new(cfg).param_count() * 2;
        let h = Halves { grads: malloc(grad_bytes), flag: malloc(4), divisor: malloc(4), grad_bytes };
        put_f32(h.divisor, 1.0);
        h
    }

    /// One step in two halves on the model's own data: compute, then apply what came out.
    fn step(&self, id: u32) {
        let out = dataset(&[(self.grads, self.grad_bytes), (self.flag, 4)]);
        assert_eq!(execute_with(id, std::ptr::null_mut(), out), ACL_SUCCESS);
        destroy(out);
        let input = dataset(&[(self.grads, self.grad_bytes), (self.flag, 4), (self.divisor, 4)]);
        assert_eq!(execute_with(id, input, std::ptr::null_mut()), ACL_SUCCESS);
        destroy(input);
    }

    fn free(self) {
        for p in [self.grads, self.flag, self.divisor] {
            assert_eq!(free(p), ACL_SUCCESS);
        }
    }
}

const MODEL: &str =
    r#"{"n_layers": 2, "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1}}}"#;

/// Runs 3 steps (one overflows, so one update is skipped) dumping to disk under `root`, whole or in
/// halves; returns the dump files (paths relative to `root`) and each step's report line.
fn run(root: &std::path::Path, halves: bool) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
    std::fs::create_dir_all(root.join("dump")).unwrap();
    let cfg = write(
        root,
        "acl.json",
        &format!(r#"{{"dump": {{"dump_path": "{}/dump", "dump_op_switch": "on"}}}}"#, root.display()),
    );
    let model = write(root, "m.json", MODEL);
    assert_eq!(init(Some(&cfg)), ACL_SUCCESS);
    assert_eq!(set_device(0), ACL_SUCCESS);
    let (rc, id) = load(&model);
    assert_eq!(rc, ACL_SUCCESS);
    let buffers = Halves::new(MODEL);
    let mut reports = Vec::new();
    for _ in 0..3 {
        if halves {
            buffers.step(id);
        } else {
            assert_eq!(execute(id), ACL_SUCCESS);
        }
        reports.push(last_report());
    }
    buffers.free();
    assert_eq!(unload(id), ACL_SUCCESS);
    assert_eq!(finalize(), ACL_SUCCESS);
    let prefix = format!("{}/", root.display());
    let mut files: Vec<(String, Vec<u8>)> = files_under(&root.join("dump"))
        .into_iter()
        .map(|(p, b)| (p.strip_prefix(&prefix).unwrap().to_string(), b))
        .collect();
    files.sort();
    (files, reports)
}

#[test]
fn two_halves_dump_and_train_exactly_like_whole_steps() {
    let _g = serial();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (whole, whole_reports) = run(a.path(), false);
    let (halves, half_reports) = run(b.path(), true);
    assert!(whole.len() > 100, "{} dump files", whole.len());
    assert!(whole_reports[1].contains("\"skipped\":true"), "{}", whole_reports[1]);
    assert_eq!(half_reports, whole_reports);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&halves), names(&whole));
    for ((name, x), (_, y)) in whole.iter().zip(&halves) {
        assert!(x == y, "{name} differs");
    }
}

#[test]
fn fed_data_and_summed_gradients_are_used() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "m.json", "{}");
    assert_eq!(init(None), ACL_SUCCESS);
    let (_, id) = load(&model);
    let h = Halves::new("{}");
    let cfg = sim_model::ModelConfig::default();
    let n = cfg.batch * cfg.seq * 4;
    let (tokens, labels) = (malloc(n), malloc(n));
    // Feed batch 5 of the stream instead of step 0's own.
    let batch = sim_model::data::batch(&cfg, 5);
    let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    assert_eq!(memcpy(tokens, n, bytes(&batch.tokens).as_ptr().cast(), n, ACL_MEMCPY_HOST_TO_DEVICE), 0);
    assert_eq!(memcpy(labels, n, bytes(&batch.labels).as_ptr().cast(), n, ACL_MEMCPY_HOST_TO_DEVICE), 0);
    let input = dataset(&[(tokens, n), (labels, n)]);
    let out = dataset(&[(h.grads, h.grad_bytes), (h.flag, 4)]);
    assert_eq!(execute_with(id, input, out), ACL_SUCCESS);
    let fed = download_grads(&h);
    let mut trainer = sim_model::Trainer::new(cfg.clone());
    let expected =
        trainer.compute_gradients(0, sim_model::OverflowMode::InfNan, &mut sim_model::NullSink, &batch);
    assert!(fed == expected.flat(), "the gradients of the fed batch differ");
    // The apply half divides summed gradients by the divisor: twice the gradients over 2 replicas is the
    // same update as the gradients alone.
    let doubled: Vec<f32> = fed.iter().map(|g| g * 2.0).collect();
    let doubled = sim_model::precision::encode(sim_model::Precision::Fp16, &doubled);
    assert_eq!(
        memcpy(h.grads, h.grad_bytes, doubled.as_ptr().cast(), h.grad_bytes, ACL_MEMCPY_HOST_TO_DEVICE),
        0
    );
    put_f32(h.divisor, 2.0);
    let apply = dataset(&[(h.grads, h.grad_bytes), (h.flag, 4), (h.divisor, 4)]);
    assert_eq!(execute_with(id, apply, std::ptr::null_mut()), ACL_SUCCESS);
    let report = last_report();
    assert!(report.starts_with("{\"step\":0,") && report.contains("\"skipped\":false"), "{report}");
    // (2g) / (2 scale) == g / scale exactly: the next step's gradients match a trainer that applied g.
    let mode = sim_model::OverflowMode::InfNan;
    trainer.apply_gradients(0, mode, &mut sim_model::NullSink, expected, false, 1.0);
    let next = trainer.compute_gradients(1, mode, &mut sim_model::NullSink, &sim_model::data::batch(&cfg, 1));
    assert_eq!(execute_with(id, std::ptr::null_mut(), out), ACL_SUCCESS);
    assert!(download_grads(&h) == next.flat(), "the next step's gradients differ");
    for d in [input, out, apply] {
        destroy(d);
    }
    for p in [tokens, labels] {
        assert_eq!(free(p), 0);
    }
    h.free();
    assert_eq!(finalize(), ACL_SUCCESS);
}

#[test]
fn bad_memory_and_dataset_use_is_refused() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "m.json", "{}");
    assert_eq!(init(None), ACL_SUCCESS);
    let (_, id) = load(&model);
    let h = Halves::new("{}");
    // Memory calls.
    let mut p = std::ptr::null_mut();
    // SAFETY: the loaded export with a writable output; size 0 is a documented invalid argument.
    assert_eq!(unsafe { lib().aclrt_malloc().unwrap()(&mut p, 0, 0) }, ACL_ERROR_INVALID_PARAM);
    let block = malloc(16);
    assert_eq!(
        memcpy(block, 8, block, 16, ACL_MEMCPY_DEVICE_TO_DEVICE),
        ACL_ERROR_INVALID_PARAM,
        "count > destMax"
    );
    assert_eq!(memcpy(block, 16, std::ptr::null(), 4, 1), ACL_ERROR_INVALID_PARAM);
    assert_eq!(memcpy(block, 16, block.cast_const(), 0, 9), ACL_ERROR_INVALID_PARAM, "unknown kind");
    assert_eq!(free(block), ACL_SUCCESS);
    assert_eq!(free(block), ACL_ERROR_INVALID_PARAM, "double free");
    // Executions whose datasets do not fit.
    let apply = dataset(&[(h.grads, h.grad_bytes), (h.flag, 4), (h.divisor, 4)]);
    assert_eq!(
        execute_with(id, apply, std::ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "apply before compute"
    );
    let short = dataset(&[(h.grads, h.grad_bytes - 4), (h.flag, 4)]);
    assert_eq!(execute_with(id, std::ptr::null_mut(), short), ACL_ERROR_INVALID_PARAM);
    let mut host = vec![0u8; h.grad_bytes];
    let outside = dataset(&[(host.as_mut_ptr().cast(), h.grad_bytes), (h.flag, 4)]);
    assert_eq!(execute_with(id, std::ptr::null_mut(), outside), ACL_ERROR_INVALID_PARAM, "host memory");
    let cfg = sim_model::ModelConfig::default();
    let n = cfg.batch * cfg.seq * 4;
    let tokens = malloc(n);
    put_f32(tokens, 1e9); // not a token id
    let fed = dataset(&[(tokens, n), (tokens, n)]);
    let out = dataset(&[(h.grads, h.grad_bytes), (h.flag, 4)]);
    assert_eq!(execute_with(id, fed, out), ACL_ERROR_INVALID_PARAM, "token outside the vocabulary");
    let odd = dataset(&[(h.flag, 4)]);
    assert_eq!(execute_with(id, odd, std::ptr::null_mut()), ACL_ERROR_INVALID_PARAM);
    // A dataset handle the runtime did not make.
    let mut fake = 0u64;
    assert_eq!(
        execute_with(id, (&mut fake as *mut u64).cast(), std::ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        // SAFETY: a handle the runtime never made is a documented invalid argument.
        unsafe { lib().aclmdl_destroy_dataset().unwrap()((&fake as *const u64).cast()) },
        ACL_ERROR_INVALID_PARAM
    );
    for d in [apply, short, outside, fed, out, odd] {
        destroy(d);
    }
    assert_eq!(free(tokens), 0);
    h.free();
    assert_eq!(finalize(), ACL_SUCCESS);
}
