//! Two captures of a chain of ops whose activations are recorded twice (an op's output, then the next op's
//! input), for the tests of diff and compare that read such a tensor once: a source that can turn that off,
//! and damage to one record's payload.

pub use crate::support::damage;
use crate::support::RunWriter;
use accutrace_formats::capture::Io;
use accutrace_formats::tensor::host_bytes::HostBytes;
use accutrace_formats::DType;
use analyzer::index::{Index, TensorId};
use analyzer::sources::{HostBlocks, Source};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A source that answers as the one it wraps, except that [`Source::same_stored_data`] is `false` when
/// `shortcut` is off (every pair is then measured from its own bytes), and counts its `true` answers.
pub struct Wrapped {
    inner: Box<dyn Source>,
    shortcut: bool,
    same: AtomicUsize,
}

impl Wrapped {
    /// How often [`Source::same_stored_data`] answered `true`.
    pub fn shortcuts(&self) -> usize {
        self.same.load(Ordering::Relaxed)
    }
}

impl Source for Wrapped {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn root(&self) -> &Path {
        self.inner.root()
    }
    fn index(&self) -> &Index {
        self.inner.index()
    }
    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()> {
        self.inner.read_values(tensor, out)
    }
    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        self.inner.content_hash(tensor)
    }
    fn read_host_bytes(&self, tensor: TensorId) -> Result<Option<HostBytes>> {
        self.inner.read_host_bytes(tensor)
    }
    fn with_host_bytes(&self, tensor: TensorId, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.inner.with_host_bytes(tensor, f)
    }
    fn with_host_blocks(&self, tensor: TensorId, f: &mut dyn FnMut(&mut dyn HostBlocks)) -> Result<bool> {
        self.inner.with_host_blocks(tensor, f)
    }
    fn same_stored_data(&self, a: TensorId, b: TensorId) -> Result<bool> {
        let same = self.shortcut && self.inner.same_stored_data(a, b)?;
        if same {
            self.same.fetch_add(1, Ordering::Relaxed);
        }
        Ok(same)
    }
    fn release_stored_data(&self, a: TensorId) -> Result<()> {
        self.inner.release_stored_data(a)
    }
    fn release_all(&self) {
        self.inner.release_all()
    }
}

/// `run`, with the shortcut on or off.
pub fn open(run: &Path, shortcut: bool) -> Wrapped {
    Wrapped { inner: analyzer::sources::open(run).unwrap(), shortcut, same: AtomicUsize::new(0) }
}

const N: usize = 40_000;

/// `report` of `a` and `b` opened with the shortcut and without it: (with, without, how often the
/// shortcut was taken). Without it, it never is.
pub fn both_ways<T>(a: &Path, b: &Path, report: impl Fn(&Wrapped, &Wrapped) -> T) -> (T, T, usize) {
    let run = |shortcut| {
        let (x, y) = (open(a, shortcut), open(b, shortcut));
        let out = report(&x, &y);
        (out, x.shortcuts() + y.shortcuts())
    };
    let ((with, taken), (without, never)) = (run(true), run(false));
    assert_eq!(never, 0);
    (with, without, taken)
}

/// fp16 activations of op `k` (smooth: zstd-compressed), or noise (stored raw) for op 3; in run 2 every
/// 7th value of op 2 onwards is one ulp off, as a nondeterministic op 2 would leave them.
fn output(k: u64, run2: bool) -> Vec<u8> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ k;
    (0..N)
        .flat_map(|i| {
            let mut bits = if k == 3 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s as u16) & 0x7bff
            } else {
                half::f16::from_f32((i as f32 * 0.013 + k as f32).sin() * 3.0).to_bits()
            };
            if run2 && k >= 2 && i % 7 == 0 {
                bits ^= 1;
            }
            bits.to_le_bytes()
        })
        .collect()
}

/// A run of 6 chained ops: op k reads op k-1's output (recorded again as its input 0) and a weight
/// (input 1, the same in both runs), and writes its output.
pub fn write_run(dir: &Path, run2: bool) -> PathBuf {
    let mut run = RunWriter::create(&dir.join(if run2 { "b" } else { "a" }), 1 << 20);
    let weight = output(100, false);
    for k in 0..6u64 {
        run.op(k, "Gelu");
        let input = if k == 0 { output(99, false) } else { output(k - 1, run2) };
        for (io, index, data) in
            [(Io::Input, 0, &input), (Io::Input, 1, &weight), (Io::Output, 0, &output(k, run2))]
        {
            run.tensor(io, index, DType::FLOAT16, data);
        }
    }
    run.finish()
}
