#!/bin/sh
# The cross-rank analysis of a finished job with Open MPI: one scan per node (mpirun's -npernode 1), then
# merge here, once every node's scan has ended (mpirun returns when all its processes have).
#   NODES=<the job's node count> HOSTFILE=<its hosts, one a line> mpirun-scan.sh
# Run it on a host that sees SUMMARIES; scan-node.sh must be at the same path on every node (it is taken
# from this script's directory, on a shared file system, unless SCAN_NODE names it).
set -eu
: "${NODES:?set NODES to the number of nodes the job ran on}"
# The node-local capture (the collector's ACCUTRACE_DIR during training, the same path on every node), a
# shared directory for the summaries, and the analyzer: mpirun's -x hands all three to every node.
export ACCUTRACE_DIR="${ACCUTRACE_DIR:-/local/accutrace/run}"
export SUMMARIES="${SUMMARIES:-$HOME/accutrace/summaries}"
export ANALYZER="${ANALYZER:-analyzer}"
SCAN_NODE="${SCAN_NODE:-$(cd "$(dirname "$0")" && pwd)/scan-node.sh}"
mkdir -p "$SUMMARIES"
# A node whose capture misses something exits 2 but still writes its summaries (they carry the problem);
# merge below leads with it, so go on.
mpirun -np "$NODES" -npernode 1 ${HOSTFILE:+--hostfile "$HOSTFILE"} \
    -x ACCUTRACE_DIR -x SUMMARIES -x ANALYZER "$SCAN_NODE" ||
    echo "a node's scan reported a problem; merge leads with it" >&2
exec "$ANALYZER" merge "$SUMMARIES"
