//! A safe interpreter for the pickles inside `torch.save` archives.
//!
//! `data.pkl` is a program for Python's pickle machine; running it with Python can call any importable
//! function. Here nothing is ever called: the interpreter knows the handful of opcodes torch emits, resolves
//! `GLOBAL`s against a whitelist (tensor rebuild functions, storage classes, `OrderedDict`) into inert
//! markers, and turns `REDUCE` of a whitelisted rebuild function into a [`PickledTensor`] description. Anything
//! else is refused with the byte offset of the opcode.
//!
//! Resource bounds: every value counts its nodes and nesting depth when it is built, memo copies are
//! charged to a node budget, so a small pickle cannot expand into a large or deep value; byte lengths
//! are checked against the remaining input before anything is allocated.

use crate::{DType, FormatError, Result};
use std::collections::HashMap;

/// Nodes a pickle may create in total (torch's tensor pickles use a few dozen).
const NODE_BUDGET: usize = 1 << 20;
/// Deepest nesting of tuples/lists/dicts accepted.
const MAX_DEPTH: usize = 64;
/// Largest memo index accepted (the memo is a map, this only bounds its size).
const MAX_MEMO: usize = 1 << 20;
/// Deepest stack of MARKs.
const MAX_MARKS: usize = 1 << 12;

/// A `torch.*Storage` reference made by the persistent-id loader: the archive entry `data/{key}`.
#[derive(Clone, Debug, PartialEq)]
pub struct StorageRef {
    /// Element type of the storage.
    pub dtype: DType,
    /// Name of the storage class, e.g. `BFloat16Storage` (for messages).
    pub class: String,
    /// The storage's key: its bytes are the archive entry `data/{key}`.
    pub key: String,
    /// Elements the storage declares (checked against the entry's real size by the caller).
    pub numel: u64,
}

/// A tensor as the pickle describes it: a view (offset, size, stride) into a storage.
#[derive(Clone, Debug, PartialEq)]
pub struct PickledTensor {
    /// The storage the tensor views.
    pub storage: StorageRef,
    /// First element of the view, in elements.
    pub storage_offset: u64,
    /// The tensor's shape.
    pub size: Vec<u64>,
    /// Elements between neighbours along each dimension.
    pub stride: Vec<u64>,
}

/// Callables the interpreter recognises; every other GLOBAL is refused.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Global {
    RebuildTensorV2,
    RebuildTensor,
    RebuildParameter,
    OrderedDict,
    Storage(DType, &'static str),
}

/// A value on the pickle machine's stack. Containers carry their node count and depth so bounds are O(1).
#[derive(Clone, Debug)]
enum Value {
    None,
    // Booleans, floats and byte strings are only ever skipped (requires_grad, hooks), so no payload.
    Bool,
    Int(i64),
    Float,
    Str(String),
    Bytes,
    Tuple(Box<Container>),
    List(Box<Container>),
    Dict(Box<Container>),
    Global(Global),
    Storage(StorageRef),
    Tensor(PickledTensor),
}

#[derive(Clone, Debug, Default)]
struct Container {
    items: Vec<Value>,
    nodes: usize,
    depth: usize,
}

impl Value {
    fn nodes(&self) -> usize {
        match self {
            Value::Tuple(c) | Value::List(c) | Value::Dict(c) => c.nodes,
            Value::Tensor(t) => 1 + t.size.len() + t.stride.len(),
            _ => 1,
        }
    }

    fn depth(&self) -> usize {
        match self {
            Value::Tuple(c) | Value::List(c) | Value::Dict(c) => c.depth,
            _ => 0,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool => "bool",
            Value::Int(_) => "int",
            Value::Float => "float",
            Value::Str(_) => "str",
            Value::Bytes => "bytes",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Global(_) => "global",
            Value::Storage(_) => "storage",
            Value::Tensor(_) => "tensor",
        }
    }
}

fn container(items: Vec<Value>, at: u64) -> Result<Box<Container>> {
    let nodes = items.iter().map(Value::nodes).fold(1usize, usize::saturating_add);
    let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
    if depth > MAX_DEPTH {
        return Err(FormatError::at(at, format!("pickle nests deeper than {MAX_DEPTH} levels")));
    }
    Ok(Box::new(Container { items, nodes, depth }))
}

/// Which module.name pairs may appear in GLOBAL / STACK_GLOBAL.
fn resolve_global(module: &str, name: &str) -> Option<Global> {
    let storage = |dtype, class| Some(Global::Storage(dtype, class));
    match (module, name) {
        ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildTensorV2),
        ("torch._utils", "_rebuild_tensor") => Some(Global::RebuildTensor),
        ("torch._utils", "_rebuild_parameter") => Some(Global::RebuildParameter),
        ("collections", "OrderedDict") => Some(Global::OrderedDict),
        ("torch", "FloatStorage") => storage(DType::FLOAT, "FloatStorage"),
        ("torch", "DoubleStorage") => storage(DType::DOUBLE, "DoubleStorage"),
        ("torch", "HalfStorage") => storage(DType::FLOAT16, "HalfStorage"),
        ("torch", "BFloat16Storage") => storage(DType::BF16, "BFloat16Storage"),
        ("torch", "LongStorage") => storage(DType::INT64, "LongStorage"),
        ("torch", "IntStorage") => storage(DType::INT32, "IntStorage"),
        ("torch", "ShortStorage") => storage(DType::INT16, "ShortStorage"),
        ("torch", "CharStorage") => storage(DType::INT8, "CharStorage"),
        ("torch", "ByteStorage") => storage(DType::UINT8, "ByteStorage"),
        ("torch", "BoolStorage") => storage(DType::BOOL, "BoolStorage"),
        _ => None,
    }
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    budget: usize,
}

/// Runs `data` (the bytes of `data.pkl`) and returns the tensor it rebuilds. Offsets in errors are
/// relative to the start of `data`.
pub fn load_tensor(data: &[u8]) -> Result<PickledTensor> {
    let mut m =
        Machine { data, pos: 0, stack: Vec::new(), marks: Vec::new(), memo: HashMap::new(), budget: 0 };
    match m.run()? {
        Value::Tensor(t) => Ok(t),
        other => Err(FormatError::at(0, format!("pickle holds a {}, not a single tensor", other.kind()))),
    }
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize, at: u64) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(FormatError::at(
                at,
                format!("pickle truncated: opcode needs {n} bytes, {} remain", self.data.len() - self.pos),
            )),
        }
    }

    fn u8(&mut self, at: u64) -> Result<u8> {
        Ok(self.take(1, at)?[0])
    }
    fn u16(&mut self, at: u64) -> Result<u16> {
        let b = self.take(2, at)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, at: u64) -> Result<u32> {
        let b = self.take(4, at)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, at: u64) -> Result<u64> {
        let b = self.take(8, at)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn text(&mut self, n: usize, at: u64) -> Result<String> {
        let bytes = self.take(n, at)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| FormatError::at(at, "pickle string is not valid UTF-8"))
    }

    /// Reads a newline-terminated line (GLOBAL's module and name).
    fn line(&mut self, at: u64) -> Result<String> {
        let rest = &self.data[self.pos..];
        let len =
            rest.iter().take(256).position(|&c| c == b'\n').ok_or_else(|| {
                FormatError::at(at, "GLOBAL name is not newline-terminated within 256 bytes")
            })?;
        let s = self.text(len, at)?;
        self.pos += 1;
        Ok(s)
    }

    fn push(&mut self, v: Value, at: u64) -> Result<()> {
        self.budget = self.budget.saturating_add(v.nodes());
        if self.budget > NODE_BUDGET {
            return Err(FormatError::at(at, format!("pickle builds more than {NODE_BUDGET} values")));
        }
        self.stack.push(v);
        Ok(())
    }

    fn pop(&mut self, at: u64) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(FormatError::at(at, "pickle stack underflow"));
        }
        Ok(self.stack.pop().expect("checked non-empty"))
    }

    fn top_mut(&mut self, at: u64) -> Result<&mut Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(FormatError::at(at, "pickle stack underflow"));
        }
        Ok(self.stack.last_mut().expect("checked non-empty"))
    }

    fn pop_mark(&mut self, at: u64) -> Result<Vec<Value>> {
        let mark =
            self.marks.pop().ok_or_else(|| FormatError::at(at, "opcode needs a MARK but none is set"))?;
        Ok(self.stack.split_off(mark))
    }

    fn memo_put(&mut self, key: u32, at: u64) -> Result<()> {
        if key as usize >= MAX_MEMO {
            return Err(FormatError::at(at, format!("memo index {key} is too large")));
        }
        let v = self.top_mut(at)?.clone();
        self.memo.insert(key, v);
        Ok(())
    }

    fn memo_get(&mut self, key: u32, at: u64) -> Result<()> {
        let v = self
            .memo
            .get(&key)
            .cloned()
            .ok_or_else(|| FormatError::at(at, format!("memo {key} is unset")))?;
        self.push(v, at)
    }

    fn run(&mut self) -> Result<Value> {
        loop {
            let at = self.pos as u64;
            let op = self.u8(at)?;
            match op {
                0x80 => {
                    let proto = self.u8(at)?;
                    if !(2..=5).contains(&proto) {
                        return Err(FormatError::at(at, format!("pickle protocol {proto} is not supported")));
                    }
                }
                0x95 => {
                    self.u64(at)?; // FRAME: a length hint only
                }
                b'.' => {
                    let v = self.pop(at)?;
                    if !self.stack.is_empty() || !self.marks.is_empty() {
                        return Err(FormatError::at(at, "STOP with values left on the stack"));
                    }
                    return Ok(v);
                }
                b'(' => {
                    if self.marks.len() >= MAX_MARKS {
                        return Err(FormatError::at(at, "too many nested MARKs"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop(at)?;
                }
                b'1' => {
                    self.pop_mark(at)?;
                }
                b'2' => {
                    let v = self.top_mut(at)?.clone();
                    self.push(v, at)?;
                }
                b')' => self.push(Value::Tuple(container(Vec::new(), at)?), at)?,
                b']' => self.push(Value::List(container(Vec::new(), at)?), at)?,
                b'}' => self.push(Value::Dict(container(Vec::new(), at)?), at)?,
                b'N' => self.push(Value::None, at)?,
                0x88 => self.push(Value::Bool, at)?,
                0x89 => self.push(Value::Bool, at)?,
                b'K' => {
                    let v = self.u8(at)?;
                    self.push(Value::Int(v.into()), at)?
                }
                b'M' => {
                    let v = self.u16(at)?;
                    self.push(Value::Int(v.into()), at)?
                }
                b'J' => {
                    let v = self.u32(at)? as i32;
                    self.push(Value::Int(v.into()), at)?
                }
                0x8a => {
                    // LONG1: little-endian two's complement of n bytes; torch sizes fit in 8.
                    let n = self.u8(at)? as usize;
                    let bytes = self.take(n, at)?;
                    if n > 8 {
                        return Err(FormatError::at(at, format!("LONG1 of {n} bytes exceeds 64 bits")));
                    }
                    let mut buf =
                        if bytes.last().is_some_and(|&b| b & 0x80 != 0) { [0xff; 8] } else { [0; 8] };
                    buf[..n].copy_from_slice(bytes);
                    self.push(Value::Int(i64::from_le_bytes(buf)), at)?
                }
                b'G' => {
                    self.take(8, at)?;
                    self.push(Value::Float, at)?
                }
                b'X' => {
                    let n = self.u32(at)? as usize;
                    let s = self.text(n, at)?;
                    self.push(Value::Str(s), at)?
                }
                0x8c => {
                    let n = self.u8(at)? as usize;
                    let s = self.text(n, at)?;
                    self.push(Value::Str(s), at)?
                }
                0x8d => {
                    let n = usize::try_from(self.u64(at)?).unwrap_or(usize::MAX);
                    let s = self.text(n, at)?;
                    self.push(Value::Str(s), at)?
                }
                b'U' => {
                    let n = self.u8(at)? as usize;
                    let s = self.text(n, at)?;
                    self.push(Value::Str(s), at)?
                }
                b'C' => {
                    let n = self.u8(at)? as usize;
                    self.take(n, at)?;
                    self.push(Value::Bytes, at)?
                }
                b'B' => {
                    let n = self.u32(at)? as usize;
                    self.take(n, at)?;
                    self.push(Value::Bytes, at)?
                }
                b'q' => {
                    let k = self.u8(at)?;
                    self.memo_put(k.into(), at)?
                }
                b'r' => {
                    let k = self.u32(at)?;
                    self.memo_put(k, at)?
                }
                0x94 => {
                    let k = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
                    self.memo_put(k, at)?
                }
                b'h' => {
                    let k = self.u8(at)?;
                    self.memo_get(k.into(), at)?
                }
                b'j' => {
                    let k = self.u32(at)?;
                    self.memo_get(k, at)?
                }
                b't' => {
                    let items = self.pop_mark(at)?;
                    self.push(Value::Tuple(container(items, at)?), at)?
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop(at)?);
                    }
                    items.reverse();
                    self.push(Value::Tuple(container(items, at)?), at)?
                }
                b'l' => {
                    let items = self.pop_mark(at)?;
                    self.push(Value::List(container(items, at)?), at)?
                }
                b'a' | b'e' | b's' | b'u' => {
                    let items = if op == b'a' || op == b's' {
                        let n = if op == b'a' { 1 } else { 2 };
                        let mut v = Vec::with_capacity(n);
                        for _ in 0..n {
                            v.push(self.pop(at)?);
                        }
                        v.reverse();
                        v
                    } else {
                        self.pop_mark(at)?
                    };
                    self.extend_top(op, items, at)?
                }
                b'c' => {
                    let module = self.line(at)?;
                    let name = self.line(at)?;
                    self.push_global(&module, &name, at)?
                }
                0x93 => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => self.push_global(&m, &n, at)?,
                        _ => return Err(FormatError::at(at, "STACK_GLOBAL needs two strings")),
                    }
                }
                b'Q' => {
                    let pid = self.pop(at)?;
                    let storage = persistent_load(pid, at)?;
                    self.push(Value::Storage(storage), at)?
                }
                b'R' => {
                    let args = self.pop(at)?;
                    let func = self.pop(at)?;
                    let v = reduce(func, args, at)?;
                    self.push(v, at)?
                }
                b'b' => {
                    // BUILD sets an object's state: only inert targets (dicts, tensors) are accepted and
                    // the state is dropped, which is what a tensor's values need.
                    let _state = self.pop(at)?;
                    match self.top_mut(at)? {
                        Value::Dict(_) | Value::Tensor(_) => {}
                        other => {
                            let kind = other.kind();
                            return Err(FormatError::at(at, format!("BUILD on a {kind} is not supported")));
                        }
                    }
                }
                other => {
                    return Err(FormatError::at(
                        at,
                        format!("pickle opcode 0x{other:02x} is not supported by the safe reader"),
                    ))
                }
            }
        }
    }

    fn push_global(&mut self, module: &str, name: &str, at: u64) -> Result<()> {
        match resolve_global(module, name) {
            Some(g) => self.push(Value::Global(g), at),
            None => {
                Err(FormatError::at(at, format!("pickle references {module}.{name}, which is not allowed")))
            }
        }
    }

    fn extend_top(&mut self, op: u8, items: Vec<Value>, at: u64) -> Result<()> {
        let top = self.top_mut(at)?;
        let (c, pairs) = match top {
            Value::List(c) if op == b'a' || op == b'e' => (c, false),
            Value::Dict(c) if op == b's' || op == b'u' => (c, true),
            other => {
                let kind = other.kind();
                return Err(FormatError::at(at, format!("opcode 0x{op:02x} cannot extend a {kind}")));
            }
        };
        if pairs && items.len() & 1 == 1 {
            return Err(FormatError::at(at, "SETITEMS with an odd number of values"));
        }
        for item in &items {
            c.nodes = c.nodes.saturating_add(item.nodes());
            c.depth = c.depth.max(item.depth() + 1);
        }
        if c.depth > MAX_DEPTH {
            return Err(FormatError::at(at, format!("pickle nests deeper than {MAX_DEPTH} levels")));
        }
        c.items.extend(items);
        Ok(())
    }
}

/// torch's persistent id: `('storage', StorageClass, key, location, numel)`.
fn persistent_load(pid: Value, at: u64) -> Result<StorageRef> {
    let items = match pid {
        Value::Tuple(c) => c.items,
        other => {
            return Err(FormatError::at(at, format!("persistent id is a {}, not a tuple", other.kind())))
        }
    };
    match items.as_slice() {
        [Value::Str(tag), Value::Global(Global::Storage(dtype, class)), Value::Str(key), _location, numel]
            if tag == "storage" =>
        {
            let numel = as_u64(numel, "storage size", at)?;
            Ok(StorageRef { dtype: *dtype, class: (*class).to_owned(), key: key.clone(), numel })
        }
        _ => Err(FormatError::at(
            at,
            "persistent id is not ('storage', <torch storage class>, key, location, numel)",
        )),
    }
}

fn as_u64(v: &Value, what: &str, at: u64) -> Result<u64> {
    match v {
        Value::Int(i) if *i >= 0 => Ok(*i as u64),
        other => Err(FormatError::at(at, format!("{what} must be a non-negative int, got {}", other.kind()))),
    }
}

fn int_tuple(v: &Value, what: &str, at: u64) -> Result<Vec<u64>> {
    match v {
        Value::Tuple(c) | Value::List(c) => c.items.iter().map(|x| as_u64(x, what, at)).collect(),
        other => Err(FormatError::at(at, format!("{what} must be a tuple of ints, got {}", other.kind()))),
    }
}

/// Applies a whitelisted callable; nothing outside this match can run.
fn reduce(func: Value, args: Value, at: u64) -> Result<Value> {
    let args = match args {
        Value::Tuple(c) => c.items,
        other => {
            return Err(FormatError::at(at, format!("REDUCE arguments are a {}, not a tuple", other.kind())))
        }
    };
    match func {
        Value::Global(Global::OrderedDict) => {
            if !args.is_empty() {
                return Err(FormatError::at(at, "OrderedDict called with arguments"));
            }
            Ok(Value::Dict(container(Vec::new(), at)?))
        }
        Value::Global(Global::RebuildTensorV2 | Global::RebuildTensor) => {
            // (storage, storage_offset, size, stride, [requires_grad, backward_hooks, [metadata]])
            if args.len() < 4 {
                return Err(FormatError::at(at, "tensor rebuild needs storage, offset, size and stride"));
            }
            let storage = match &args[0] {
                Value::Storage(s) => s.clone(),
                other => return Err(FormatError::at(at, format!("tensor storage is a {}", other.kind()))),
            };
            let storage_offset = as_u64(&args[1], "storage offset", at)?;
            let size = int_tuple(&args[2], "tensor size", at)?;
            let stride = int_tuple(&args[3], "tensor stride", at)?;
            if size.len() != stride.len() {
                return Err(FormatError::at(
                    at,
                    format!("tensor has {} sizes but {} strides", size.len(), stride.len()),
                ));
            }
            Ok(Value::Tensor(PickledTensor { storage, storage_offset, size, stride }))
        }
        Value::Global(Global::RebuildParameter) => match args.into_iter().next() {
            Some(t @ Value::Tensor(_)) => Ok(t),
            _ => Err(FormatError::at(at, "_rebuild_parameter needs a tensor")),
        },
        other => Err(FormatError::at(at, format!("REDUCE of a {} is not allowed", other.kind()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pickle torch 2.x writes for a 2x3 float tensor (protocol 2), built opcode by opcode.
    pub(crate) fn tensor_pickle(class: &str, numel: u8, size: &[u8], stride: &[u8], offset: u8) -> Vec<u8> {
        let mut p = vec![0x80, 2];
        p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storage");
        p.extend(format!("ctorch\n{class}\n").as_bytes());
        p.extend(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu");
        p.extend([b'K', numel, b't', b'Q', b'K', offset, b'(']);
        for &s in size {
            p.extend([b'K', s]);
        }
        p.push(b't');
        p.push(b'(');
        for &s in stride {
            p.extend([b'K', s]);
        }
        p.push(b't');
        p.extend(b"\x89ccollections\nOrderedDict\n)Rtq\x01R.");
        p
    }

    #[test]
    fn rebuilds_a_tensor_description() {
        let t = load_tensor(&tensor_pickle("FloatStorage", 6, &[2, 3], &[3, 1], 0)).unwrap();
        assert_eq!(t.storage.dtype, DType::FLOAT);
        assert_eq!(t.storage.numel, 6);
        assert_eq!(t.size, vec![2, 3]);
        assert_eq!(t.stride, vec![3, 1]);
        let t = load_tensor(&tensor_pickle("BFloat16Storage", 6, &[], &[], 5)).unwrap();
        assert_eq!(t.storage.dtype, DType::BF16);
        assert_eq!(t.storage_offset, 5);
        assert!(t.size.is_empty());
    }

    #[test]
    fn refuses_globals_outside_the_whitelist() {
        let evil = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";
        let err = load_tensor(evil).unwrap_err();
        assert!(err.problem.contains("os.system"), "{err}");
        assert_eq!(err.offset, Some(2));
    }

    #[test]
    fn refuses_unknown_opcodes_and_truncation_with_offsets() {
        let err = load_tensor(b"\x80\x02i").unwrap_err();
        assert_eq!(err.offset, Some(2));
        let err = load_tensor(b"\x80\x02X\xff\xff\xff\x7f").unwrap_err();
        assert!(err.problem.contains("truncated"), "{err}");
        let full = tensor_pickle("FloatStorage", 6, &[2, 3], &[3, 1], 0);
        for cut in 0..full.len() {
            assert!(load_tensor(&full[..cut]).is_err(), "prefix of {cut} bytes accepted");
        }
    }

    #[test]
    fn memo_copies_cannot_blow_up() {
        // Each round doubles a tuple through the memo: 2^40 nodes if nothing stopped it.
        let mut p = vec![0x80, 2, b')', b'q', 0];
        for _ in 0..40 {
            p.extend([b'0', b'h', 0, b'h', 0, 0x86, b'q', 0]);
        }
        p.push(b'.');
        let err = load_tensor(&p).unwrap_err();
        assert!(err.problem.contains("more than") || err.problem.contains("deeper"), "{err}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut p = vec![0x80, 2, b')'];
        p.extend(std::iter::repeat_n(0x85, 100));
        p.push(b'.');
        assert!(load_tensor(&p).unwrap_err().problem.contains("deeper"));
    }
}
