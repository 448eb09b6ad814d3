//! msprobe's `dump.json`: one record per API call, flattened into tensor entries in dump order.
//!
//! A record is `"{api_type}.{api}.{call}.{forward|backward}": { input_args: [...], input_kwargs: {...},
//! output: [...] }` (backward records use `input`/`output`; module dumps may add `parameters`). Arguments
//! nest (lists, tuples, dicts); each leaf is a tensor (`type: torch.Tensor`), a scalar (`int`, `float`,
//! `bool`, ...), another object, or `null`. Names follow msprobe's compare, checked against its CSV:
//! positional leaves get `.input.{i}`, nested ones `.input.{i}.{j}`, keyword ones `.input.{key}`,
//! outputs `.output.{i}`; `null` leaves are kept (msprobe lists them as rows with N/A dtype).

use crate::{DType, FormatError, Result};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// JSON with object keys in file order. serde_json's own `Value` sorts keys (its `preserve_order`
/// feature would change ordering for the whole workspace), and dump order is the order of the calls.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as serde_json parsed it.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object, its keys in file order.
    Object(Vec<(String, Value)>),
}

impl Value {
    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.as_u64(),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Value, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> std::result::Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_none<E>(self) -> std::result::Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_bool<E>(self, b: bool) -> std::result::Result<Value, E> {
                Ok(Value::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> std::result::Result<Value, E> {
                Ok(Value::Number(i.into()))
            }
            fn visit_u64<E>(self, u: u64) -> std::result::Result<Value, E> {
                Ok(Value::Number(u.into()))
            }
            fn visit_f64<E>(self, f: f64) -> std::result::Result<Value, E> {
                Ok(serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number))
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Value, E> {
                Ok(Value::String(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> std::result::Result<Value, E> {
                Ok(Value::String(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element()? {
                    items.push(v);
                }
                Ok(Value::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = map.next_entry()? {
                    fields.push((k, v));
                }
                Ok(Value::Object(fields))
            }
        }
        d.deserialize_any(V)
    }
}

/// One statistic as msprobe wrote it (numbers, bools for bool tensors, `null` where it has none).
#[derive(Clone, Debug, PartialEq)]
pub enum StatValue {
    /// `null`: msprobe has none.
    None,
    /// A bool tensor's statistic.
    Bool(bool),
    /// An integer statistic.
    Int(i64),
    /// A float statistic (inf and NaN included).
    Float(f64),
    /// Anything else, as written.
    Str(String),
}

impl StatValue {
    fn from_json(v: Option<&Value>) -> StatValue {
        match v {
            None | Some(Value::Null) => StatValue::None,
            Some(Value::Bool(b)) => StatValue::Bool(*b),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) if !n.is_f64() => StatValue::Int(i),
                _ => StatValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            // Non-finite statistics arrive as strings ("inf", "NaN", or our rewrite of Infinity/NaN).
            Some(Value::String(s)) => match parse_nonfinite(s) {
                Some(f) => StatValue::Float(f),
                None => StatValue::Str(s.clone()),
            },
            Some(other) => StatValue::Str(format!("{other:?}")),
        }
    }

    /// The number, for arithmetic (bools count as 0/1 like Python).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            StatValue::Bool(b) => Some(f64::from(u8::from(*b))),
            StatValue::Int(i) => Some(*i as f64),
            StatValue::Float(f) => Some(*f),
            StatValue::None | StatValue::Str(_) => None,
        }
    }

    /// How Python's `str()` prints it, which is what msprobe's CSV holds (`None`, `False`, `988`, `1e-05`).
    pub fn py_repr(&self) -> String {
        match self {
            StatValue::None => "None".into(),
            StatValue::Bool(b) => if *b { "True" } else { "False" }.into(),
            StatValue::Int(i) => i.to_string(),
            StatValue::Float(f) => super::py_float::py_float_repr(*f),
            StatValue::Str(s) => s.clone(),
        }
    }
}

fn parse_nonfinite(s: &str) -> Option<f64> {
    match s.to_ascii_lowercase().as_str() {
        "inf" | "infinity" | "+inf" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    }
}

/// What a tensor leaf records.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMeta {
    /// The dtype as msprobe names it (`torch.bfloat16`).
    pub dtype_name: String,
    /// The dtype, when accutrace knows it.
    pub dtype: Option<DType>,
    /// The tensor's shape.
    pub shape: Vec<u64>,
    /// Largest value.
    pub max: StatValue,
    /// Smallest value.
    pub min: StatValue,
    /// Mean.
    pub mean: StatValue,
    /// L2 norm.
    pub norm: StatValue,
    /// Whether the tensor required a gradient, when recorded.
    pub requires_grad: Option<bool>,
    /// File under `dump_tensor_data/` (`.pt` for PyTorch, `.npy` for MindSpore); absent in statistics dumps.
    pub data_name: Option<String>,
    /// `md5` (or `crc32`) when the dump was made with summary_mode md5.
    pub md5: Option<String>,
}

/// One leaf of an API record.
#[derive(Clone, Debug, PartialEq)]
pub enum EntryKind {
    /// A tensor.
    Tensor(TensorMeta),
    /// A Python scalar argument (`int`, `float`, `bool`, `str`, ...): type name and value.
    Scalar {
        /// The Python type (`int`, `float`, ...).
        type_name: String,
        /// The value.
        value: StatValue,
    },
    /// Any other recorded object (`slice`, `torch.dtype`, `torch.Size`, ...), kept as raw JSON.
    Other {
        /// The recorded type name.
        type_name: String,
        /// The recorded value.
        value: Value,
    },
    /// `null`: an absent optional argument or a gradient that does not exist.
    None,
}

/// Forward or backward pass of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The forward call.
    Forward,
    /// Its backward.
    Backward,
}

/// What a leaf is to the call: an argument (positional or keyword), a result, a module parameter, or a
/// parameter's gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `input_args`, `input_kwargs` (forward) or `input` (backward).
    Input,
    /// `output`.
    Output,
    /// `parameters` (module dumps).
    Parameters,
    /// `parameters_grad`.
    ParametersGrad,
}

/// One flattened leaf with msprobe's full name.
#[derive(Clone, Debug, PartialEq)]
pub struct MsprobeEntry {
    /// `{api_type}.{api}.{call}.{forward|backward}.{input|output}.{i}[.{j}...]` exactly as msprobe names it.
    pub name: String,
    /// The record's key, `{api_type}.{api}.{call}.{forward|backward}`.
    pub op_name: String,
    /// Forward or backward, from the record's key (absent for module records without it).
    pub direction: Option<Direction>,
    /// What the leaf is to the call.
    pub role: Role,
    /// What the leaf holds.
    pub kind: EntryKind,
}

impl MsprobeEntry {
    /// The tensor's metadata, when the leaf is a tensor.
    pub fn tensor(&self) -> Option<&TensorMeta> {
        match &self.kind {
            EntryKind::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

/// The top of `dump.json` with its entries flattened.
#[derive(Clone, Debug, Default)]
pub struct ParsedDump {
    /// `tensor`, `statistics`, `md5`, ...
    pub task: String,
    /// `L0` (modules), `L1` (APIs), `mix`, ...
    pub level: String,
    /// `pytorch` or `mindspore`, when recorded.
    pub framework: Option<String>,
    /// The directory recorded by the machine that made the dump.
    pub dump_data_dir: Option<String>,
    /// Every leaf of every record, in dump order.
    pub entries: Vec<MsprobeEntry>,
}

/// Python's json writes `NaN`, `Infinity`, `-Infinity` for non-finite floats, which strict JSON (and
/// serde_json) refuses; they are turned into strings outside string literals before parsing.
fn quote_nonfinite(bytes: &[u8]) -> Cow<'_, [u8]> {
    const TOKENS: [&[u8]; 3] = [b"-Infinity", b"Infinity", b"NaN"];
    let mut out: Option<Vec<u8>> = None;
    let (mut in_str, mut escaped, mut i) = (false, false, 0);
    while i < bytes.len() {
        let c = bytes[i];
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
        } else if c == b'"' {
            in_str = true;
        } else if let Some(tok) = TOKENS.iter().find(|t| bytes[i..].starts_with(t)) {
            let o = out.get_or_insert_with(|| bytes[..i].to_vec());
            o.push(b'"');
            o.extend_from_slice(tok);
            o.push(b'"');
            i += tok.len();
            continue;
        }
        if let Some(o) = out.as_mut() {
            o.push(c);
        }
        i += 1;
    }
    out.map_or(Cow::Borrowed(bytes), Cow::Owned)
}

/// Byte offset of serde_json's (line, column) in `bytes`.
fn byte_offset(bytes: &[u8], line: usize, column: usize) -> u64 {
    let line_start: usize =
        bytes.split(|&c| c == b'\n').take(line.saturating_sub(1)).map(|l| l.len() + 1).sum();
    (line_start + column.saturating_sub(1)) as u64
}

/// Parses the bytes of a `dump.json`. Offsets in errors point into `bytes`.
pub fn parse(bytes: &[u8]) -> Result<ParsedDump> {
    let text = quote_nonfinite(bytes);
    let root: Value = serde_json::from_slice(&text).map_err(|e| {
        // Rewriting shifts offsets slightly after the first non-finite token; the line stays right.
        FormatError::at(byte_offset(&text, e.line(), e.column()), format!("invalid JSON: {e}"))
    })?;
    if !matches!(root, Value::Object(_)) {
        return Err(FormatError::at(0, "dump.json is not a JSON object"));
    }
    let text_field = |k: &str| root.get(k).and_then(Value::as_str).map(str::to_owned);
    let data = match root.get("data") {
        Some(Value::Object(d)) => d,
        Some(_) => return Err(FormatError::whole("\"data\" is not an object")),
        None => return Err(FormatError::whole("dump.json has no \"data\" object: not an msprobe dump")),
    };
    let mut entries = Vec::new();
    for (op_name, record) in data {
        if !matches!(record, Value::Object(_)) {
            return Err(FormatError::whole(format!("record {op_name} is not an object")));
        }
        let direction = direction_of(op_name);
        // Inputs first (positional, then keyword), then outputs, then parameters: msprobe's row order.
        let sections: [(&str, Role, &str); 6] = [
            ("input_args", Role::Input, "input"),
            ("input", Role::Input, "input"),
            ("input_kwargs", Role::Input, "input"),
            ("output", Role::Output, "output"),
            ("parameters", Role::Parameters, "parameters"),
            ("parameters_grad", Role::ParametersGrad, "parameters_grad"),
        ];
        for (key, role, label) in sections {
            if let Some(section) = record.get(key) {
                // msprobe writes a section as a list, an object or null; a bare value holds no argument
                // records, so reading it as one value would lose the section's tensors without a word.
                if !matches!(section, Value::Array(_) | Value::Object(_) | Value::Null) {
                    return Err(FormatError::whole(format!(
                        "{op_name}: \"{key}\" is a {}, not a list or object of arguments as msprobe writes \
                         them: the file was edited or damaged; dump again with msprobe",
                        json_type(section)
                    )));
                }
                let prefix = format!("{op_name}.{label}");
                let mut leaf = |name: String, kind: EntryKind| {
                    entries.push(MsprobeEntry { name, op_name: op_name.clone(), direction, role, kind })
                };
                flatten(section, &prefix, &mut leaf, op_name)?;
            }
        }
    }
    Ok(ParsedDump {
        task: text_field("task").unwrap_or_default(),
        level: text_field("level").unwrap_or_default(),
        framework: text_field("framework"),
        dump_data_dir: text_field("dump_data_dir"),
        entries,
    })
}

fn direction_of(op_name: &str) -> Option<Direction> {
    op_name.split('.').rev().find_map(|part| match part {
        "forward" => Some(Direction::Forward),
        "backward" => Some(Direction::Backward),
        _ => None,
    })
}

/// Walks a section: arrays and type-less objects are containers, objects with `type` are leaves.
fn flatten(v: &Value, prefix: &str, leaf: &mut impl FnMut(String, EntryKind), op: &str) -> Result<()> {
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                flatten(item, &format!("{prefix}.{i}"), leaf, op)?;
            }
        }
        Value::Object(map) if v.get("type").is_none() => {
            for (k, item) in map {
                flatten(item, &format!("{prefix}.{k}"), leaf, op)?;
            }
        }
        Value::Object(_) => leaf(prefix.to_owned(), leaf_kind(v, prefix, op)?),
        Value::Null => leaf(prefix.to_owned(), EntryKind::None),
        other => leaf(
            prefix.to_owned(),
            EntryKind::Other { type_name: json_type(other).to_owned(), value: other.clone() },
        ),
    }
    Ok(())
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "str",
        _ => "object",
    }
}

fn leaf_kind(map: &Value, name: &str, op: &str) -> Result<EntryKind> {
    let type_name = map.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
    let is_tensor = map.get("dtype").is_some() && map.get("shape").is_some();
    if !is_tensor {
        return Ok(match type_name.as_str() {
            "int" | "float" | "bool" | "str" => {
                EntryKind::Scalar { value: StatValue::from_json(map.get("value")), type_name }
            }
            _ => EntryKind::Other { value: map.get("value").cloned().unwrap_or(Value::Null), type_name },
        });
    }
    let dtype_name = map.get("dtype").and_then(Value::as_str).unwrap_or_default().to_owned();
    let shape = match map.get("shape") {
        Some(Value::Array(dims)) => {
            dims.iter().map(|d| d.as_u64()).collect::<Option<Vec<u64>>>().ok_or_else(|| {
                FormatError::whole(format!("{op}: {name} has a shape that is not a list of sizes"))
            })?
        }
        Some(Value::Null) | None => Vec::new(),
        Some(_) => return Err(FormatError::whole(format!("{op}: {name} has a shape that is not a list"))),
    };
    let text = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok(EntryKind::Tensor(TensorMeta {
        dtype: DType::from_name(&dtype_name),
        dtype_name,
        shape,
        max: StatValue::from_json(map.get("Max")),
        min: StatValue::from_json(map.get("Min")),
        mean: StatValue::from_json(map.get("Mean")),
        norm: StatValue::from_json(map.get("Norm")),
        requires_grad: map.get("requires_grad").and_then(Value::as_bool),
        data_name: text("data_name"),
        md5: text("md5").or_else(|| text("crc32")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_msprobe() {
        let json = br#"{"task":"tensor","level":"L1","data":{
          "Torch.softmax.0.forward":{"input_args":[{"type":"torch.Tensor","dtype":"torch.bfloat16","shape":[2],
             "Max":NaN,"Min":-Infinity,"Mean":null,"Norm":1.5,"requires_grad":true,"data_name":"a.pt"},
             [{"type":"int","value":32}], null],
             "input_kwargs":{"dim":{"type":"int","value":-1}},
             "output":[{"type":"torch.Tensor","dtype":"torch.float32","shape":[],"Max":1,"Min":1,"Mean":1,
             "Norm":1,"requires_grad":false,"data_name":"b.pt"}]},
          "Tensor.__truediv__.0.backward":{"input":[null],"output":[null, {"type":"slice","value":[1,null,2]}]}}}"#;
        let d = parse(json).unwrap();
        let names: Vec<_> = d.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Torch.softmax.0.forward.input.0",
                "Torch.softmax.0.forward.input.1.0",
                "Torch.softmax.0.forward.input.2",
                "Torch.softmax.0.forward.input.dim",
                "Torch.softmax.0.forward.output.0",
                "Tensor.__truediv__.0.backward.input.0",
                "Tensor.__truediv__.0.backward.output.0",
                "Tensor.__truediv__.0.backward.output.1",
            ]
        );
        let t = d.entries[0].tensor().unwrap();
        assert!(matches!(t.max, StatValue::Float(f) if f.is_nan()));
        assert_eq!(t.min, StatValue::Float(f64::NEG_INFINITY));
        assert_eq!(t.dtype, Some(DType::BF16));
        assert_eq!(d.entries[4].tensor().unwrap().max, StatValue::Int(1));
        assert_eq!(d.entries[5].direction, Some(Direction::Backward));
        assert!(matches!(d.entries[7].kind, EntryKind::Other { ref type_name, .. } if type_name == "slice"));
    }

    #[test]
    fn errors_carry_offsets() {
        let err = parse(b"{\"data\": {\n  \"x\": [1,}\n}").unwrap_err();
        assert_eq!(err.offset, Some(21), "{err}"); // the stray `}`
        assert!(parse(b"[1]").is_err());
        assert!(parse(b"{}").unwrap_err().problem.contains("no \"data\""));
        // A section that is a bare value (not msprobe's list or object) is an error naming it, not a value.
        let err =
            parse(br#"{"data": {"Functional.linear.2.forward": {"input_args": [], "output": "oops"}}}"#)
                .unwrap_err();
        assert!(err.problem.contains("Functional.linear.2.forward: \"output\" is a str"), "{err}");
        assert!(parse(br#"{"data": {"Functional.gelu.0.forward": {"input_args": 5}}}"#).is_err());
        // Tokens inside strings are left alone.
        assert_eq!(&*quote_nonfinite(br#"{"a":"NaN \" Infinity"}"#), br#"{"a":"NaN \" Infinity"}"#);
    }
}
