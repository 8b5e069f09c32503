#!/usr/bin/env bash
# A sweep as a Slurm job array against a real single-node Slurm (tools/README.md,
# "Sweeps on a cluster"): starts munged, slurmctld and slurmd on localhost in a
# temporary folder, submits a 4-task array whose tasks each run one shard of a sweep
# (`--shard ${SLURM_ARRAY_TASK_ID}/4`), merges the shards in a job that depends on the
# array, and compares the merged CSV with the same sweep run in one process. Every
# daemon is stopped by its PID when the test ends, whatever happens.
#
#   tests/slurm/test_slurm_sweep.sh BUILD_DIR        (inside tools/dev; ctest slurm:sweep_array)
#
# The environment shares the host's /sys, so Slurm's cgroup plugins stay off
# (CgroupPlugin=disabled, proctrack/linuxproc, task/none); jobs run as root, as this
# test does.
set -euo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
for tool in munged slurmctld slurmd sbatch sinfo; do
  command -v "$tool" >/dev/null || { echo "slurm test: $tool is not installed (tools/dev installs slurm-wlm and munge)"; exit 1; }
done
export PATH="$build/bin:$PATH"
work=$(mktemp -d /tmp/spyre-slurm.XXXXXX)
pids=()
cleanup() {
  local status=$?
  # Jobs first (their steps are not the daemons' children), then the daemons.
  scancel --quiet --user="$(id -un)" 2>/dev/null || true
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munged.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$status" -ne 0 ]; then
    for log in "$work"/*.log "$work"/out/*; do [ -f "$log" ] && { echo "--- $log"; tail -n 30 "$log"; }; done
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
mkdir -p "$work/state" "$work/spool" "$work/out"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: a fresh key, its socket in the folder.
head -c 1024 /dev/urandom > "$work/munge.key"
chmod 400 "$work/munge.key"
munged --force --key-file="$work/munge.key" --socket="$work/munge.socket" --pid-file="$work/munged.pid" \
  --log-file="$work/munged.log" --seed-file="$work/munged.seed"

export SLURM_CONF="$work/slurm.conf"
cat > "$SLURM_CONF" <<CONF
ClusterName=spyre-ci
SlurmctldHost=localhost
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$work/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
echo "CgroupPlugin=disabled" > "$work/cgroup.conf"

slurmctld -D -i -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" > "$work/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 120); do
  state=$(sinfo -h -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || { echo "slurm test: the node did not become idle (state '$state')"; exit 1; }
echo "slurm test: slurmctld and slurmd up ($(slurmctld -V)), node idle"

# The sweep: 8 points over 4 shards, on the CI chip.
sweep=(--workload add:65536 --config "$repo/configs/spyre-ci.yaml" --grid cores.count=1,2,4,4
       --grid memory.peak_gbps=25.6,51.2 --jobs 1)
cat > "$work/array.sh" <<JOB
#!/bin/bash
#SBATCH --array=1-4 --output=$work/out/array_%a.out
spyre-sim sweep ${sweep[*]} --shard \${SLURM_ARRAY_TASK_ID}/4 --out $work/shard-\${SLURM_ARRAY_TASK_ID}
JOB
array=$(sbatch --parsable "$work/array.sh")
echo "slurm test: submitted array job $array"
# (In the background and waited for, so a TERM or INT stops the test at once.)
sbatch --wait --dependency="afterok:$array" --output="$work/out/merge.out" \
  --wrap "spyre-sim sweep-merge $work/shard-1 $work/shard-2 $work/shard-3 $work/shard-4 --out $work/merged" &
pids+=($!)
wait "${pids[-1]}"
tasks=$(ls -d "$work"/shard-* | wc -l)
echo "slurm test: the array's $tasks tasks and the merge job finished"

spyre-sim sweep "${sweep[@]}" --out "$work/single" > "$work/single.out" 2>&1
if ! cmp -s "$work/merged/sweep.csv" "$work/single/sweep.csv"; then
  echo "slurm test: the merged CSV differs from the one-process sweep's"
  diff "$work/merged/sweep.csv" "$work/single/sweep.csv" || true
  exit 1
fi
rows=$(($(wc -l < "$work/merged/sweep.csv") - 1))
echo "slurm test: the merged CSV ($rows points from $tasks shards) equals the one-process sweep's"
echo "1 passed, 0 failed"
