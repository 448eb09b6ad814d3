//! What each tensor of a training step is, from what a dump knows: op names and types, inputs and outputs,
//! content hashes. No script, no framework hooks. `check` and `watch` label tensors with it.
//!
//! - **Optimizer ops** are the update kernels ([`is_optimizer`]: `Apply*`, `ResourceApply*`, `SparseApply*`,
//!   fused Adam/LAMB kernels). Their input 0 is the **weight** before the update (the master copy the
//!   optimizer owns), their output 0 the weight after it; the last other input of the weight's shape is
//!   the **gradient** (ApplyAdam's `grad`, ApplyGradientDescent's `delta`, ApplyMomentum's `grad`); the
//!   remaining inputs and outputs of that shape are **optimizer state** (moments, accumulators). A
//!   parameter is named by its optimizer op without the op's own last name component (and without a
//!   leading `optimizer/`): `optimizer/model/fc1/weight/ApplyAdam` updates `model/fc1/weight`.
//! - **Backward ops** are named like a framework's gradient graph ([`is_backward`]: a `gradients` name
//!   component, a `*_grad` component, an op type ending in `Grad`, msprobe's `.backward`): their outputs
//!   are **gradients**.
//! - The outputs of every other op are **activations**, of the op's kind ([`activation_kind`]: tanh,
//!   sigmoid, relu for the saturation conditions).
//! - An input that no earlier op of the same step and rank produced (no output with its content hash) is
//!   a **leaf**: data (token ids, labels, images) or a device copy of a weight.
//!
//! Weights are known only through their optimizer ops: a step skipped for overflow has none, and a
//! framework whose optimizer runs on the host shows none at all (then every weight condition says so).

use crate::index::{Index, Io, OpId, TensorId};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// What a tensor is in the training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A weight before (an optimizer op's input 0) or after (its output 0) an update.
    Weight,
    /// A parameter's gradient (an optimizer op's gradient input) or a backward op's output.
    Gradient,
    /// A forward op's output.
    Activation,
    /// An optimizer's moment or accumulator.
    OptimizerState,
    /// An input no earlier op of its step produced: data, or a device copy of a weight.
    Leaf,
}

impl Role {
    /// The word reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Weight => "weight",
            Role::Gradient => "gradient",
            Role::Activation => "activation",
            Role::OptimizerState => "optimizer state",
            Role::Leaf => "leaf input",
        }
    }
}

/// One parameter's update at one step: its optimizer op and the tensors the op names.
#[derive(Clone, Debug)]
pub struct Update {
    /// The parameter's name (the optimizer op's name without its last component).
    pub param: String,
    pub op: OpId,
    pub step: u64,
    pub rank: u32,
    /// The weight before the update (input 0).
    pub before: TensorId,
    /// The weight after it (output 0 when the op outputs the weight).
    pub after: Option<TensorId>,
    /// The gradient the update used.
    pub gradient: Option<TensorId>,
}

impl Update {
    /// Whether `before` is the op's input 0, the weight. A source that could not index input 0 (a torn or
    /// missing file) leaves the op's inputs starting at input 1, an optimizer state: judged as the weight,
    /// it would read as a finding about the model.
    pub fn weight_read(&self, index: &Index) -> bool {
        let t = &index.tensors[self.before];
        (t.io, t.index) == (Io::Input, 0)
    }
}

/// The roles of an index's tensors, and the updates its optimizer ops made.
#[derive(Clone, Debug, Default)]
pub struct Roles {
    /// By tensor id; `None` for an input produced by an earlier op (its producer's output has the role).
    pub of: Vec<Option<Role>>,
    /// Every optimizer op, in execution order.
    pub updates: Vec<Update>,
}

/// Op types of update kernels beyond the `Apply*` families: CANN's fused optimizer kernels.
const FUSED_OPTIMIZERS: &[&str] = &["AdamApplyOne", "LambApply", "LambUpdate", "FusedMulApplyMomentum"];

/// Whether an op type is an optimizer's update kernel.
pub fn is_optimizer(op_type: &str) -> bool {
    ["Apply", "ResourceApply", "SparseApply"].iter().any(|p| op_type.starts_with(p))
        || FUSED_OPTIMIZERS.iter().any(|f| op_type.contains(f))
}

/// Whether an op belongs to the backward pass, by its name and type.
pub fn is_backward(name: &str, op_type: &str) -> bool {
    op_type.ends_with("Grad")
        || op_type.ends_with("GradV2")
        || name.contains(".backward")
        || name.split('/').any(|c| c == "gradients" || c.ends_with("_grad") || c.starts_with("Gradients"))
}

/// The activation functions with saturation conditions (MindInsight's recommended set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationKind {
    Tanh,
    Sigmoid,
    Relu,
}

/// The activation an op type computes, for the ones with saturation conditions.
pub fn activation_kind(op_type: &str) -> Option<ActivationKind> {
    match op_type.to_ascii_lowercase().as_str() {
        "tanh" => Some(ActivationKind::Tanh),
        "sigmoid" => Some(ActivationKind::Sigmoid),
        "relu" | "reluv2" | "relu6" => Some(ActivationKind::Relu),
        _ => None,
    }
}

/// The parameter an optimizer op updates: its name without the last component and a leading `optimizer/`.
pub fn param_name(op_name: &str) -> String {
    let base = op_name.rsplit_once('/').map_or(op_name, |(head, _)| head);
    base.strip_prefix("optimizer/").unwrap_or(base).to_string()
}

impl Roles {
    /// Labels every tensor of `index`.
    pub fn of(index: &Index) -> Roles {
        let mut roles = Roles { of: vec![None; index.tensors.len()], updates: Vec::new() };
        // Outputs seen so far in each step and rank, by content hash: what makes an input a leaf.
        let mut produced: BTreeMap<(u32, u64), HashSet<u64>> = BTreeMap::new();
        for (o, op) in index.ops.iter().enumerate() {
            let seen = produced.entry((op.rank, op.step)).or_default();
            for t in op.inputs() {
                let leaf = index.tensors[t].hash().is_some_and(|h| !seen.contains(&h));
                if leaf {
                    roles.of[t] = Some(Role::Leaf);
                }
            }
            if is_optimizer(&op.op_type) {
                roles.label_update(index, o);
            } else {
                let role = if is_backward(&op.name, &op.op_type) { Role::Gradient } else { Role::Activation };
                for t in op.outputs() {
                    roles.of[t] = Some(role);
                }
            }
            seen.extend(op.outputs().filter_map(|t| index.tensors[t].hash()));
        }
        roles
    }

    fn label_update(&mut self, index: &Index, o: OpId) {
        let op = &index.ops[o];
        let Some(before) = op.inputs().next() else { return };
        let shape = &index.tensors[before].shape;
        let same = |t: &TensorId| index.tensors[*t].shape == *shape && index.tensors[*t].dtype.is_float();
        let gradient = op.inputs().skip(1).rev().find(same);
        let after = op.outputs().next().filter(same);
        for t in op.tensors().filter(same) {
            self.of[t] = Some(Role::OptimizerState);
        }
        // Without input 0 (a file not read) the first input is a state, not the weight.
        if (index.tensors[before].io, index.tensors[before].index) == (Io::Input, 0) {
            self.of[before] = Some(Role::Weight);
        }
        if let Some(t) = after {
            self.of[t] = Some(Role::Weight);
        }
        if let Some(g) = gradient {
            self.of[g] = Some(Role::Gradient);
        }
        self.updates.push(Update {
            param: param_name(&op.name),
            op: o,
            step: op.step,
            rank: op.rank,
            before,
            after,
            gradient,
        });
    }

    /// The role of a tensor (`None`: an input an earlier op produced).
    pub fn role(&self, t: TensorId) -> Option<Role> {
        self.of[t]
    }
}

/// Whether an op's name says it computes the loss (`loss`, `cross_entropy`, `nll`: msprobe names PyTorch's
/// loss `Functional.cross_entropy.0.forward`), and not its gradient or its scaling. watch's loss and the
/// report's loss plot both read the loss this way, so that they agree on which op it is.
pub fn names_a_loss(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let lossy = ["loss", "cross_entropy", "crossentropy", "nll"].iter().any(|k| name.contains(k));
    lossy && !name.contains("grad") && !name.contains("scale") && !name.contains("backward")
}

/// The loss of a step: the one-element float output of the last forward op named like a loss
/// ([`names_a_loss`]) before the backward pass starts. `None` when no op looks like one.
pub fn loss_tensor(index: &Index, ops: &[OpId]) -> Option<TensorId> {
    let mut found = None;
    for &o in ops {
        let op = &index.ops[o];
        if is_backward(&op.name, &op.op_type) || is_optimizer(&op.op_type) {
            break;
        }
        if !names_a_loss(&op.name) {
            continue;
        }
        let scalar = op.outputs().find(|&t| {
            let info = &index.tensors[t];
            info.dtype.is_float() && info.shape.iter().product::<u64>() == 1
        });
        if scalar.is_some() {
            found = scalar;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_types_tell_the_passes_apart() {
        assert!(is_optimizer("ApplyAdamD") && is_optimizer("ApplyGradientDescent"));
        assert!(is_optimizer("ResourceApplyAdam") && is_optimizer("AdamApplyOneWithDecay"));
        assert!(!is_optimizer("MatMulV2") && !is_optimizer("Adam")); // a bare name is too vague
        assert!(is_backward("gradients/model/fc1/MatMul_grad/MatMul_1", "MatMulV2"));
        assert!(is_backward("model/x", "GeluGrad"));
        assert!(is_backward("Functional.linear.0.backward", "linear"));
        assert!(!is_backward("model/layer_0/attn/Softmax", "SoftmaxV2"));
        assert_eq!(param_name("optimizer/model/fc1/weight/ApplyAdam"), "model/fc1/weight");
        assert_eq!(param_name("Adam/update_dense/kernel/ResourceApplyAdam"), "Adam/update_dense/kernel");
        assert_eq!(activation_kind("Tanh"), Some(ActivationKind::Tanh));
        assert_eq!(activation_kind("ReluV2"), Some(ActivationKind::Relu));
        assert_eq!(activation_kind("GeLU"), None);
    }
}
