#!/bin/sh
# One node's part of the cross-rank analysis: summarize the capture this node's ranks wrote, for
# `analyzer merge`. The job's scheduler starts it once per node (docs/CLUSTER.md: Slurm, Volcano, mpirun,
# torchrun). No daemon, no port: it reads a local directory and writes one Parquet file per rank.
#
#   ACCUTRACE_DIR   this node's capture: the directory the collector wrote during the job (node-local disk)
#   SUMMARIES       where to write the summaries: a directory every node can write and the merging host
#                   can read (shared file system, or gathered afterwards); files are named by rank, so every
#                   node writes into the same directory
#   ANALYZER        the analyzer binary (default: `analyzer` on PATH)
#
# Exit status: scan's. 0: written. 2: the capture misses something (a torn segment, a rank that did not
# seal its stream); the summaries are still written and carry it, so `merge` leads with it too.
set -eu
: "${ACCUTRACE_DIR:?set ACCUTRACE_DIR to the node-local capture directory}"
: "${SUMMARIES:?set SUMMARIES to a directory shared by the nodes}"
echo "$(uname -n): scanning $ACCUTRACE_DIR into $SUMMARIES" >&2
exec "${ANALYZER:-analyzer}" scan "$ACCUTRACE_DIR" -o "$SUMMARIES"
