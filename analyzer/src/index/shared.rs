//! Names and shapes held once per index ([`SharedName`], [`SharedShape`]): every step and every rank repeat
//! the same op names, op types and tensor shapes, so the index keeps one of each and every op and tensor
//! shares it (#18: a copy per op and per tensor grew with the tensor count). Both read as the plain text or
//! dimensions they hold.
//!
//! Each is one pointer (8 bytes) to the shared box of its text or dimensions, not a fat `Arc<str>` (16): a
//! name is held twice an op and a shape once a tensor, a distinct one once an index, so the second hop
//! costs a heap block per distinct name and saves 8 bytes a use (#18: bytes an op and a tensor).

use serde::Serialize;
use std::sync::Arc;

/// An op name or op type, held once per index and shared by every op and output that carries it: every
/// step and every rank repeat the same names, and a copy per op and per output grew with the tensor count
/// (#18). Reads as a `&str` (`&name[..]`, `name.as_str()`, compared with text directly).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedName(Arc<Box<str>>);

impl SharedName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `other` is this very text, not a copy of it.
    pub fn is_shared_with(&self, other: &SharedName) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::ops::Deref for SharedName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SharedName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SharedName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A name of its own, shared with nothing (tests, and names made after indexing).
impl From<&str> for SharedName {
    fn from(text: &str) -> SharedName {
        SharedName(Arc::new(text.into()))
    }
}

impl From<String> for SharedName {
    fn from(text: String) -> SharedName {
        SharedName(Arc::new(text.into()))
    }
}

impl PartialEq<str> for SharedName {
    fn eq(&self, other: &str) -> bool {
        **self.0 == *other
    }
}

impl PartialEq<&str> for SharedName {
    fn eq(&self, other: &&str) -> bool {
        **self.0 == **other
    }
}

impl PartialEq<String> for SharedName {
    fn eq(&self, other: &String) -> bool {
        **self.0 == **other
    }
}

impl PartialEq<SharedName> for str {
    fn eq(&self, other: &SharedName) -> bool {
        *self == **other.0
    }
}

impl PartialEq<SharedName> for &str {
    fn eq(&self, other: &SharedName) -> bool {
        **self == **other.0
    }
}

impl PartialEq<SharedName> for String {
    fn eq(&self, other: &SharedName) -> bool {
        **self == **other.0
    }
}

/// The empty name.
impl Default for SharedName {
    fn default() -> SharedName {
        SharedName::from("")
    }
}

impl std::fmt::Display for SharedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

/// As the text itself, as when names were `String`s.
impl std::fmt::Debug for SharedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for SharedName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A tensor's shape, held once per index and shared by every tensor of that shape: every step and every
/// rank repeat the same shapes, and a heap block per tensor grew with the tensor count (#18). Reads as a
/// `&[u64]`.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedShape(Arc<Box<[u64]>>);

impl SharedShape {
    /// Whether `other` is this very shape, not a copy of it.
    pub fn is_shared_with(&self, other: &SharedShape) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::ops::Deref for SharedShape {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        &self.0
    }
}

impl AsRef<[u64]> for SharedShape {
    fn as_ref(&self) -> &[u64] {
        &self.0
    }
}

impl std::borrow::Borrow<[u64]> for SharedShape {
    fn borrow(&self) -> &[u64] {
        &self.0
    }
}

/// A shape of its own, shared with nothing until the tensor is pushed.
impl From<Vec<u64>> for SharedShape {
    fn from(dims: Vec<u64>) -> SharedShape {
        SharedShape(Arc::new(dims.into()))
    }
}

impl From<&[u64]> for SharedShape {
    fn from(dims: &[u64]) -> SharedShape {
        SharedShape(Arc::new(dims.into()))
    }
}

impl PartialEq<[u64]> for SharedShape {
    fn eq(&self, other: &[u64]) -> bool {
        **self.0 == *other
    }
}

impl PartialEq<Vec<u64>> for SharedShape {
    fn eq(&self, other: &Vec<u64>) -> bool {
        **self.0 == **other
    }
}

impl PartialEq<SharedShape> for Vec<u64> {
    fn eq(&self, other: &SharedShape) -> bool {
        **self == **other.0
    }
}

/// As the dimensions themselves, as when shapes were `Vec`s.
impl std::fmt::Debug for SharedShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for SharedShape {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (*self.0).serialize(serializer)
    }
}
