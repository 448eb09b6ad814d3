//! Device memory and model datasets: `aclrtMalloc` / `aclrtFree` / `aclrtMemcpy`, `aclDataBuffer` and
//! `aclmdlDataset`.
//!
//! The simulated device has no memory of its own: an `aclrtMalloc` block is host memory (64-byte aligned,
//! zeroed) that the runtime keeps in a table. Handles (blocks, data buffers, datasets) are checked against
//! their tables before use, so a handle the runtime did not hand out, or one already freed, is an
//! `ACL_ERROR_INVALID_PARAM`, not undefined behaviour. A model reads and writes its inputs and outputs only
//! inside live blocks ([`DeviceSlice`]).

use ascend_sys::{aclDataBuffer, aclmdlDataset};
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::Mutex;

/// Alignment of device blocks (what vector loads on the device want; more than any host type needs).
const BLOCK_ALIGN: usize = 64;

#[derive(Default)]
struct Tables {
    /// Live blocks: start address -> size.
    blocks: BTreeMap<usize, usize>,
    /// Live data buffers: handle -> (address, size). The handle is a boxed allocation of its own.
    buffers: HashMap<usize, (usize, usize)>,
    /// Live datasets: handle -> the data buffer handles in it, in order.
    datasets: HashMap<usize, Vec<usize>>,
}

static TABLES: Mutex<Option<Tables>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Tables) -> R) -> R {
    let mut guard = crate::state::lock(&TABLES);
    f(guard.get_or_insert_with(Tables::default))
}

/// A new zeroed block of `size` bytes, `None` for size 0 or when the allocator fails.
pub fn malloc(size: usize) -> Option<*mut c_void> {
    let layout = Layout::from_size_align(size, BLOCK_ALIGN).ok().filter(|_| size > 0)?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // Exposed: model inputs come back as plain addresses inside data buffers (`DeviceSlice`).
    with(|t| t.blocks.insert(p.expose_provenance(), size));
    Some(p.cast())
}

/// Frees a block `malloc` returned; `false` when `p` is not the start of a live block.
pub fn free(p: *mut c_void) -> bool {
    let Some(size) = with(|t| t.blocks.remove(&p.addr())) else { return false };
    let layout = Layout::from_size_align(size, BLOCK_ALIGN).expect("the layout malloc used");
    // SAFETY: `p` was returned by `alloc_zeroed` with this layout (it was in the table, which only `malloc`
    // fills), and removing it from the table makes this the only free.
    unsafe { std::alloc::dealloc(p.cast(), layout) };
    true
}

/// Whether `[addr, addr + len)` lies inside one live block.
pub fn in_device_memory(addr: usize, len: usize) -> bool {
    with(|t| match t.blocks.range(..=addr).next_back() {
        Some((&start, &size)) => addr.checked_add(len).is_some_and(|end| end <= start + size),
        None => false,
    })
}

/// A data buffer describing `size` bytes at `data` (not checked here: the model checks when it uses it).
pub fn create_buffer(data: *mut c_void, size: usize) -> *mut aclDataBuffer {
    // A real allocation, so the handle is unique while it lives; its contents are never read.
    let handle = Box::into_raw(Box::new(0u8));
    with(|t| t.buffers.insert(handle.expose_provenance(), (data.addr(), size)));
    handle.cast()
}

pub fn destroy_buffer(b: *const aclDataBuffer) -> bool {
    let Some(_) = with(|t| t.buffers.remove(&b.addr())) else { return false };
    // SAFETY: the handle was made by `Box::into_raw(Box::new(0u8))` in `create_buffer` (the table only
    // holds such handles) and removing it from the table makes this the only drop.
    drop(unsafe { Box::from_raw(b.cast_mut().cast::<u8>()) });
    true
}

/// `(address, size)` of a live data buffer.
pub fn buffer(b: *const aclDataBuffer) -> Option<(usize, usize)> {
    with(|t| t.buffers.get(&b.addr()).copied())
}

pub fn create_dataset() -> *mut aclmdlDataset {
    let handle = Box::into_raw(Box::new(0u8));
    with(|t| t.datasets.insert(handle.expose_provenance(), Vec::new()));
    handle.cast()
}

pub fn destroy_dataset(d: *const aclmdlDataset) -> bool {
    let Some(_) = with(|t| t.datasets.remove(&d.addr())) else { return false };
    // SAFETY: as in `destroy_buffer`: made by `create_dataset`, removed from the table exactly once.
    drop(unsafe { Box::from_raw(d.cast_mut().cast::<u8>()) });
    true
}

/// Appends a live buffer to a live dataset; `false` if either is not.
pub fn add_to_dataset(d: *mut aclmdlDataset, b: *mut aclDataBuffer) -> bool {
    with(|t| {
        if !t.buffers.contains_key(&b.addr()) {
            return false;
        }
        match t.datasets.get_mut(&d.addr()) {
            Some(list) => {
                list.push(b.addr());
                true
            }
            None => false,
        }
    })
}

/// The buffer handles of a live dataset, `None` when `d` is not one.
pub fn dataset_buffers(d: *const aclmdlDataset) -> Option<Vec<usize>> {
    with(|t| t.datasets.get(&d.addr()).cloned())
}

/// A model input or output: a live data buffer whose bytes lie inside a live block.
#[derive(Clone, Copy, Debug)]
pub struct DeviceSlice {
    addr: usize,
    len: usize,
}

impl DeviceSlice {
    /// `len` bytes at `addr`, when they lie inside one live block (or `len` is 0).
    pub fn checked(addr: usize, len: usize) -> Option<DeviceSlice> {
        (len == 0 || in_device_memory(addr, len)).then_some(DeviceSlice { addr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, copied out.
    pub fn read(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: `dataset_slices` checked the range lies in a live block; the copy is into our own Vec.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::with_exposed_provenance::<u8>(self.addr),
                out.as_mut_ptr(),
                self.len,
            )
        };
        out
    }

    /// Overwrites the bytes; `data` must have this slice's length.
    pub fn write(&self, data: &[u8]) {
        assert_eq!(data.len(), self.len, "device slice written with the wrong length");
        // SAFETY: as in `read`; `data` is the caller's own memory, not device memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                std::ptr::with_exposed_provenance_mut::<u8>(self.addr),
                self.len,
            )
        };
    }
}

/// The buffers of a dataset (NULL = none) as device slices, or why they cannot be used.
pub fn dataset_slices(d: *const aclmdlDataset) -> Result<Vec<DeviceSlice>, String> {
    if d.is_null() {
        return Ok(Vec::new());
    }
    let handles = dataset_buffers(d).ok_or_else(|| format!("{d:?} is not a dataset of this runtime"))?;
    handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            let (addr, len) = with(|t| t.buffers.get(&h).copied())
                .ok_or_else(|| format!("buffer {i} of the dataset was destroyed"))?;
            if len > 0 && !in_device_memory(addr, len) {
                return Err(format!(
                    "buffer {i} ({len} bytes at {addr:#x}) is not inside memory from aclrtMalloc"
                ));
            }
            Ok(DeviceSlice { addr, len })
        })
        .collect()
}
