#!/bin/sh
# The cross-rank analysis of a finished job with torchrun: run this on every node the job ran on, as the
# training was started (same NNODES and MASTER_ADDR, each node its NODE_RANK). torchrun starts one scan on
# the node (--nproc-per-node=1, --no-python: a program, not a Python script); node 0 then merges.
#   NNODES=<nodes> NODE_RANK=<this node's> MASTER_ADDR=<node 0's address> torchrun-scan.sh
# torchrun's agents wait for each other before they exit (its exit barrier, 300 s by default), so node 0
# merges when every node's scan has ended. A node later than that, or one whose scan wrote nothing, misses
# from the merge: its ranks' collectives are then incomplete, and merge says so first (exit 2), never a
# partial all-clear; run `analyzer merge "$SUMMARIES"` again once all have ended.
set -eu
: "${NNODES:?set NNODES to the number of nodes the job ran on}"
: "${NODE_RANK:?set NODE_RANK to this node's rank (0 .. NNODES-1)}"
: "${MASTER_ADDR:?set MASTER_ADDR to node 0's address}"
# The node-local capture (the collector's ACCUTRACE_DIR during training) and a shared directory for the
# summaries; torchrun passes its environment to the scan.
export ACCUTRACE_DIR="${ACCUTRACE_DIR:-/local/accutrace/run}"
export SUMMARIES="${SUMMARIES:-$HOME/accutrace/summaries}"
export ANALYZER="${ANALYZER:-analyzer}"
SCAN_NODE="${SCAN_NODE:-$(cd "$(dirname "$0")" && pwd)/scan-node.sh}"
mkdir -p "$SUMMARIES"
status=0
torchrun --nnodes="$NNODES" --node-rank="$NODE_RANK" --nproc-per-node=1 \
    --master-addr="$MASTER_ADDR" --master-port="${MASTER_PORT:-29501}" --no-python "$SCAN_NODE" || status=$?
if [ "$NODE_RANK" != 0 ]; then
    exit "$status"
fi
[ "$status" = 0 ] || echo "this node's scan reported a problem; merge leads with it" >&2
exec "$ANALYZER" merge "$SUMMARIES"
